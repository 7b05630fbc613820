#!/usr/bin/env bash
# bench/seed_experiment.sh — the seed's experiment on real weights (issue 40, point 5):
# SmolLM2-135M-Instruct (the GGUF file scripts/setup.sh installs, converted by ztrain),
# loaded in bf16, fine-tuned on the Debian licence texts on 2 ranks in the precision modes
# of examples/precision/run.py: (i) FSDP memory-constrained (bf16 flat parameters and Adam
# state) at a small lr, (ii) the same at lr x ranks, (iii) Accelerate's fixed FSDP mode (bf16
# mixed precision: fp32 master), (iv) DeepSpeed ZeRO-3 bf16 (fp32 master), (v) a bf16 master
# with Kahan compensation.  Each mode's JSONL carries the lost-update fraction of every step;
# run.py draws loss and grad norm (out/seed_smollm2/precision.svg) and the table.
#   bench/seed_experiment.sh [--lr 1e-5] [--steps 24] [--block_size 32] [--batch 2]
# Short runs for 2 cores: a few dozen steps of 2 ranks x 2 sequences of 32 tokens.
set -euo pipefail
cd "$(dirname "$0")/.."
gguf=${ZT_SMOLLM2_GGUF:-/usr/local/lib/ztrain/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf}
out=${OUT:-out/seed_smollm2}
mkdir -p "$out"
[ -f "$out/base/config.json" ] || build/ztrain convert --from gguf "$gguf" --output_dir "$out/base"
python3 examples/precision/run.py --model "$out/base" --tokenizer "$out/base" --out "$out" \
    --ranks 2 --steps 24 --block_size 32 --batch 2 "$@"
