# model_agreement.sh — ranks given models that compute differently are refused
# before they train together (train/trainer.c's agreement check, through
# zt_llama_config_digest): two models that differ only in Llama 3.1's rope factor,
# or only in Qwen2's q/k/v biases.  Without the check each rank would step its own
# model and the run would average gradients of two different functions.
. "$(dirname "$0")/lib.bash"
args=(train --block_size 32 --per_device_train_batch_size 1 --max_steps 1 --threads 1 --peak_gflops 1)

# llama3_rope with rope_scaling.factor 16.0 instead of 8.0 (same weights)
fix=tests/fixtures/llama3_rope
mkdir -p "$TMP/factor16"
cp $fix/model.safetensors "$TMP/factor16/"
sed 's/"factor": 8.0/"factor": 16.0/' $fix/config.json >"$TMP/factor16/config.json"
grep -q '"factor": 16.0' "$TMP/factor16/config.json" || fail "the fixture's rope factor was not changed"
expect_exit 2 "rank 0: rank 1 and rank 0 resolved a different model config" -- \
    "${mpi[@]}" -np 1 "$ZTRAIN" "${args[@]}" --model $fix --data $fix/tokens.npy : \
    -np 1 "$ZTRAIN" "${args[@]}" --model "$TMP/factor16" --data $fix/tokens.npy

# qwen2_bias beside a Llama model of the same sizes, RoPE and norm (no biases)
fix=tests/fixtures/qwen2_bias
grep -Ev '"(max_window_layers|use_sliding_window|sliding_window)"' $fix/config.json |
    sed 's/Qwen2ForCausalLM/LlamaForCausalLM/; s/"qwen2"/"llama"/' >"$TMP/llama.json"
"$ZTRAIN" init-model --model_config "$TMP/llama.json" --output_dir "$TMP/nobias" >"$TMP/log" 2>&1 ||
    fail "init-model of the bias-free twin: $(cat "$TMP/log")"
expect_exit 2 "rank 0: rank 1 and rank 0 resolved a different model config" -- \
    "${mpi[@]}" -np 1 "$ZTRAIN" "${args[@]}" --model $fix --data $fix/tokens.npy : \
    -np 1 "$ZTRAIN" "${args[@]}" --model "$TMP/nobias" --data $fix/tokens.npy

# the same model on both ranks trains
"${mpi[@]}" -np 2 "$ZTRAIN" "${args[@]}" --model $fix --data $fix/tokens.npy >"$TMP/log" 2>&1 ||
    fail "the same model on 2 ranks: $(tail -3 "$TMP/log")"
finish
