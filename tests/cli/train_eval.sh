# The happy path of the command line: init-model, train with JSONL metrics and a
# Hugging Face output directory, eval, env.
. "$(dirname "$0")/lib.bash"
cfg=tests/fixtures/gqa_tied/config.json
"$ZTRAIN" init-model --model_config "$cfg" --output_dir "$TMP/init" --seed 3 --torch_dtype bf16 >/dev/null ||
    fail "init-model"
[ -f "$TMP/init/config.json" ] && [ -f "$TMP/init/model.safetensors" ] || fail "init-model wrote no model"
grep -Eq '"torch_dtype":[[:space:]]*"bfloat16"' "$TMP/init/config.json" || fail "init-model dtype not recorded"
printf 'The quick brown fox jumps over the lazy dog. %.0s' $(seq 60) > "$TMP/text.txt"
"$ZTRAIN" train --model "$TMP/init" --data "$TMP/text.txt" --output_dir "$TMP/out" --block_size 32 \
    --per_device_train_batch_size 2 --max_steps 3 --learning_rate 1e-3 --log_jsonl "$TMP/log.jsonl" \
    --torch_dtype auto --mixed_precision bf16 --save_steps 2 --threads 1 > "$TMP/train.out" || fail "train"
[ "$(wc -l < "$TMP/log.jsonl")" -eq 3 ] || fail "expected 3 JSONL lines"
for key in step loss grad_norm lr tokens_per_sec_per_device step_time_s mfu comm_bytes comm_wait_s comm_progress_s; do
    grep -q "\"$key\": " "$TMP/log.jsonl" || fail "JSONL lacks $key"
done
[ -f "$TMP/out/model.safetensors" ] && [ -f "$TMP/out/config.json" ] || fail "no final model"
[ -f "$TMP/out/checkpoint-2/model.safetensors" ] || fail "no checkpoint-2"
grep -Fq "| bf16 | bf16 | fp32 | bf16 | bf16 | fp32 |" "$TMP/train.out" || fail "plan not printed"
grep -q "model saved to $TMP/out" "$TMP/train.out" || fail "save location not printed"
out=$("$ZTRAIN" eval --model "$TMP/out" --data "$TMP/text.txt" --block_size 32 --per_device_eval_batch_size 2 --max_batches 2) ||
    fail "eval"
printf '%s' "$out" | grep -Eq '^eval loss [0-9.]+ over 128 tokens' || fail "eval output: $out"
out=$("$ZTRAIN" env --threads 1) || fail "env"
for key in ztrain mpi onednn "cpu features" "peak fp32 matmul" "peak bf16 matmul"; do
    printf '%s' "$out" | grep -q "^$key" || fail "env lacks $key"
done
# sharded save (HF max_shard_size) and loading it back: training continues from it
"$ZTRAIN" init-model --model_config "$cfg" --output_dir "$TMP/sharded" --max_shard_size 100KB >/dev/null ||
    fail "sharded init-model"
[ -f "$TMP/sharded/model.safetensors.index.json" ] || fail "no index for a sharded save"
[ "$(ls "$TMP/sharded"/model-*-of-*.safetensors | wc -l)" -ge 4 ] || fail "expected several shards"
[ -f "$TMP/sharded/model.safetensors" ] && fail "a sharded save left model.safetensors"
"$ZTRAIN" train --model "$TMP/sharded" --data "$TMP/text.txt" --output_dir "$TMP/sharded_out" --block_size 32 \
    --per_device_train_batch_size 2 --max_steps 1 --threads 1 --max_shard_size 1GB >/dev/null || fail "train from shards"
[ -f "$TMP/sharded_out/model.safetensors" ] || fail "unsharded save after training"
expect_exit 2 "--max_shard_size" -- "$ZTRAIN" init-model --model_config "$cfg" --output_dir "$TMP/x" --max_shard_size 5XB
"$ZTRAIN" train --help | grep -q -- "--gradient_checkpointing" || fail "train --help"
finish
