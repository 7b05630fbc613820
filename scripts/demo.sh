#!/usr/bin/env bash
# scripts/demo.sh — the main job: set up, build, fit a BPE tokenizer and train a
# small Llama on real English text (the licence texts Debian ships in base-files)
# on two MPI ranks, watching a held-out loss during training; then draw the run
# (out/demo/train.svg) and let the model continue a prompt, greedily and sampled.
# Extra arguments are passed to `ztrain train` (e.g. --max_steps 50).
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
scripts/setup.sh
make -j"$(nproc)" build/ztrain >/dev/null
built=$(date +%s) # the build is part of the demo's time, and said apart at the end
out=out/demo
rm -rf "$out"
mkdir -p "$out"
export ZTRAIN_CACHE_DIR="$out/cache" # the tokenized text, keyed by content hash

# Real text: 90% for training, the last 10% held out.
corpus="$out/corpus.txt"
find /usr/share/common-licenses -maxdepth 1 -type f | sort | xargs cat > "$corpus"
total=$(stat -c %s "$corpus")
held=$((total / 10))
head -c $((total - held)) "$corpus" > "$out/train.txt"
tail -c "$held" "$corpus" > "$out/eval.txt"
echo "data: $((total - held)) training bytes, $held held-out bytes from /usr/share/common-licenses"

# A byte-level BPE of 2048 tokens fitted to the training text (Hugging Face's
# tokenizer.json format), and a model whose vocabulary matches it.
build/ztrain tokenizer train --input "$out/train.txt" --vocab_size 2048 --output_dir "$out/tokenizer"
sed 's/"vocab_size": 256/"vocab_size": 2048/' examples/demo/config.json > "$out/config.json"
build/ztrain init-model --model_config "$out/config.json" --output_dir "$out/init" --seed 1

# Two ranks through the ZeRO engine: FSDP FULL_SHARD with the model loaded in
# bf16 and bf16 mixed precision, i.e. fp32 master weights and Adam state
# (the "aligned" mode); the plan and the per-rank memory are printed first.
# The text is tokenized once (cached); the held-out text is evaluated every 25
# steps, sharded over the ranks.
build/ztrain launch --config_file examples/configs/fsdp_full_shard_bf16.yaml train \
    --model "$out/init" --torch_dtype bfloat16 --tokenizer "$out/tokenizer" \
    --data "$out/train.txt" --eval_data "$out/eval.txt" --eval_steps 25 --per_device_eval_batch_size 8 \
    --output_dir "$out/model" --block_size 128 --per_device_train_batch_size 8 --max_steps 200 \
    --learning_rate 3e-3 --warmup_steps 20 --lr_scheduler_type cosine --weight_decay 0.1 \
    --shuffle --log_jsonl "$out/train.jsonl" --progress "$@"
build/ztrain plot "$out/train.jsonl" --output "$out/train.svg"

prompt="This program is free software"
echo
echo "== greedy continuation of \"$prompt\":"
printf '%s' "$prompt"
build/ztrain generate --model "$out/model" --tokenizer "$out/tokenizer" --prompt "$prompt" --max_new_tokens 48
echo
echo "== sampled (temperature 0.8, top_k 40, seed 1):"
printf '%s' "$prompt"
build/ztrain generate --model "$out/model" --tokenizer "$out/tokenizer" --prompt "$prompt" --max_new_tokens 48 \
    --temperature 0.8 --top_k 40 --seed 1
echo
echo "model saved to $out/model (Hugging Face format: config.json + model.safetensors), tokenizer in $out/tokenizer"
echo "per-step metrics in $out/train.jsonl, drawn in $out/train.svg"
echo "losses above: a \"step N/S: loss\" line is the mean over the steps since the previous such line"
echo "(Trainer's logging_steps, 500 by default: here the whole run); \"final loss\" is the last step's alone"
echo "demo took $(($(date +%s) - start)) s ($((built - start)) s of it setting up and building)"
