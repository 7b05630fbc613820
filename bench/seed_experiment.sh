#!/usr/bin/env bash
# bench/seed_experiment.sh — the seed's experiment on real weights (issue 40, point 5), in one
# command: SmolLM2-135M-Instruct (the GGUF file scripts/setup.sh installs, converted by
# `ztrain convert --from gguf`), loaded in bf16, fine-tuned on the licence texts of
# /usr/share/common-licenses in SmolLM2's tokens (`ztrain tokenize`), on 2 ranks x 1 thread,
# constant lr, no weight decay: FSDP memory-constrained (bf16 flat parameters and AdamW state)
# at a small lr and at lr x ranks, FSDP with bf16 mixed precision (Accelerate's fixed mode:
# fp32 master), DeepSpeed ZeRO-3 bf16 (fp32 master), and FSDP bf16 and DeepSpeed at a lr where
# few bf16 updates are lost.  bench/seed_figures.py runs them and draws the four figures
# (docs/precision.md); with --peers every run is repeated with torch FSDP and DeepSpeed from
# PyPI (the venv of bench/peers/setup.sh, build/peers-venv).
#
#   bench/seed_experiment.sh [--peers] [--steps 40] [--lr 1e-5] [--big_lr 4e-4] [--runs a,b]
#   bench/seed_experiment.sh --audit        # the predicted lost fraction of step 1 per lr
#
# Output in $OUT (default out/seed_smollm2): seed_fig*.svg, table.md, results.json (a rerun
# keeps the runs it does not repeat), and each run's JSONL / logs.
set -euo pipefail
cd "$(dirname "$0")/.."
gguf=${ZT_SMOLLM2_GGUF:-/usr/local/lib/ztrain/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf}
out=${OUT:-out/seed_smollm2}
# the driver needs numpy: the peer venv has it, else Debian's python3 (scripts/setup.sh)
py=${PYTHON:-build/peers-venv/bin/python}
[ -x "$py" ] || py=python3
export OMP_NUM_THREADS=1 LC_ALL=C   # C: the licence files in byte order, as the figures were made
mkdir -p "$out"
[ -f "$out/base/config.json" ] || build/ztrain convert --from gguf "$gguf" --output_dir "$out/base"
if [ ! -f "$out/ids.npy" ]; then
    for f in /usr/share/common-licenses/*; do
        if [ -f "$f" ] && [ ! -L "$f" ]; then cat "$f"; fi
    done > "$out/text.txt"
    build/ztrain tokenize --tokenizer "$out/base" --input "$out/text.txt" --output "$out/ids.npy"
fi
exec "$py" bench/seed_figures.py --model "$out/base" --data "$out/ids.npy" --out "$out" "$@"
