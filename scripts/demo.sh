#!/usr/bin/env bash
# scripts/demo.sh — the main job: set up, build, and train a small byte-level
# Llama on real English text (the licence texts Debian ships in base-files) on
# two MPI ranks, then evaluate it on held-out text and say where the model was
# saved.
# Extra arguments are passed to `ztrain train` (e.g. --max_steps 50).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
make -j"$(nproc)" build/ztrain >/dev/null
out=out/demo
mkdir -p "$out"

# Real text, byte-level tokens: 90% for training, the last 10% held out.
corpus="$out/corpus.txt"
find /usr/share/common-licenses -maxdepth 1 -type f | sort | xargs cat > "$corpus"
total=$(stat -c %s "$corpus")
held=$((total / 10))
head -c $((total - held)) "$corpus" > "$out/train.txt"
tail -c "$held" "$corpus" > "$out/eval.txt"
echo "data: $((total - held)) training bytes, $held held-out bytes from /usr/share/common-licenses"

build/ztrain init-model --model_config examples/demo/config.json --output_dir "$out/init" --seed 1
# Two ranks through the ZeRO engine: FSDP FULL_SHARD with the model loaded in
# bf16 and bf16 mixed precision, i.e. fp32 master weights and Adam state
# (the "aligned" mode); the plan and the per-rank memory are printed first.
build/ztrain launch --config_file examples/configs/fsdp_full_shard_bf16.yaml train \
    --model "$out/init" --torch_dtype bfloat16 --data "$out/train.txt" --output_dir "$out/model" \
    --block_size 128 --per_device_train_batch_size 8 --max_steps 1000 \
    --learning_rate 2e-3 --warmup_steps 40 --lr_scheduler_type cosine --weight_decay 0.1 \
    --shuffle --log_jsonl "$out/train.jsonl" --progress "$@"
build/ztrain eval --model "$out/model" --data "$out/eval.txt" --block_size 128 --mixed_precision bf16
echo "model saved to $out/model (Hugging Face format: config.json + model.safetensors)"
echo "per-step metrics in $out/train.jsonl"
