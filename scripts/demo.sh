#!/usr/bin/env bash
# scripts/demo.sh — the main job: set up, build, and fine-tune a real pretrained model,
# SmolLM2-135M-Instruct (installed by scripts/setup.sh as one GGUF file), on real English
# text (the licence texts Debian ships in base-files) on two MPI ranks.  It prints the
# held-out loss and the model's greedy continuation of a prompt before and after, and
# draws the run (out/demo/train.svg).
# Extra arguments are passed to `ztrain train` (e.g. --max_steps 10); ZT_DEMO_OUT names the
# output directory (default out/demo).
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
scripts/setup.sh
make -j"$(nproc)" build/ztrain >/dev/null
built=$(date +%s) # the setup and build are part of the demo's time, and said apart at the end
out=${ZT_DEMO_OUT:-out/demo} # where it writes (tests/cli/demo.sh points it elsewhere)
rm -rf "$out"
mkdir -p "$out"
export ZTRAIN_CACHE_DIR="$out/cache" # the tokenized text, keyed by content hash
gguf=${ZT_SMOLLM2_GGUF:-/usr/local/lib/ztrain/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf}

# The pretrained model, from llama.cpp's format to a Hugging Face directory (config.json,
# fp32 safetensors, tokenizer.json with its chat template): 135M parameters, 30 layers.
build/ztrain convert --from gguf "$gguf" --output_dir "$out/base"

# Real text: 90% for training, the last 10% held out.
corpus="$out/corpus.txt"
find /usr/share/common-licenses -maxdepth 1 -type f | sort | xargs cat > "$corpus"
total=$(stat -c %s "$corpus")
held=$((total / 10))
head -c $((total - held)) "$corpus" > "$out/train.txt"
tail -c "$held" "$corpus" > "$out/eval.txt"
echo "data: $((total - held)) training bytes, $held held-out bytes from /usr/share/common-licenses"

prompt="This program is free software"
show() { # the held-out loss and the greedy continuation of MODEL, titled WHEN
    echo
    echo "== $2: held-out loss, and the greedy continuation of \"$prompt\""
    build/ztrain eval --model "$1" --tokenizer "$out/base" --data "$out/eval.txt" --block_size 128 | grep '^eval loss'
    printf '%s' "$prompt"
    build/ztrain generate --model "$1" --tokenizer "$out/base" --prompt "$prompt" --max_new_tokens 32 2>/dev/null
    echo
}
show "$out/base" "before fine-tuning"

# Two ranks through the ZeRO engine: FSDP FULL_SHARD with the model loaded in bf16 and
# bf16 mixed precision, i.e. fp32 master weights and Adam state (the "aligned" mode); the
# plan and the per-rank memory are printed first, then a progress bar.  60 steps of
# 2 x 2 sequences of 128 tokens (0.65 epoch), sized to keep the demo within 5 minutes on
# 2 cores (README).
echo
build/ztrain launch --config_file examples/configs/fsdp_full_shard_bf16.yaml train \
    --model "$out/base" --torch_dtype bfloat16 --mixed_precision bf16 --tokenizer "$out/base" \
    --data "$out/train.txt" --output_dir "$out/model" --block_size 128 --per_device_train_batch_size 2 \
    --max_steps 60 --learning_rate 1e-4 --warmup_steps 6 --lr_scheduler_type cosine --weight_decay 0.1 \
    --shuffle --log_jsonl "$out/train.jsonl" --progress "$@"
build/ztrain plot "$out/train.jsonl" --output "$out/train.svg"
show "$out/model" "after fine-tuning"

echo
echo "model saved to $out/model (Hugging Face format: config.json + model.safetensors + tokenizer)"
echo "per-step metrics in $out/train.jsonl, drawn in $out/train.svg"
echo "losses above: a \"step N/S: loss\" line is the mean over the steps since the previous such line"
echo "(Trainer's logging_steps, 500 by default: here the whole run); \"final loss\" is the last step's alone"
echo "demo took $(($(date +%s) - start)) s ($((built - start)) s of it setting up and building)"
