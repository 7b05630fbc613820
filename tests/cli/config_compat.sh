# Configs that Accelerate and DeepSpeed accept, read as they read them:
#  - DeepSpeed "auto" values that need the model (bucket sizes from hidden_size) are shown
#    as unresolved by `config validate` / `config show` without --model, and resolve with it;
#  - older Accelerate YAMLs: deprecated names are read under their current ones with a
#    warning naming the new key (fsdp_backward_prefetch_policy, fsdp_config keys without
#    the fsdp_ prefix, top-level fp16 and dynamo_backend); both names at once are refused.
. "$(dirname "$0")/lib.bash"
model=tests/fixtures/untied_odd   # hidden_size 72
ds=examples/configs/ds_zero3.json

out=$("$ZTRAIN" config validate --deepspeed_config_file $ds 2>"$TMP/err") || fail "validate $ds without --model: $(cat "$TMP/err")"
printf '%s' "$out" | grep -q "^valid: DEEPSPEED, ZeRO-3" || fail "validate printed: $out"
for key in reduce_bucket_size stage3_prefetch_bucket_size stage3_param_persistence_threshold; do
    printf '%s' "$out" | grep -q "unresolved until a model is given.*zero_optimization.$key (auto" ||
        fail "validate does not show $key as unresolved: $out"
done
out=$("$ZTRAIN" config show --deepspeed_config_file $ds 2>&1) || fail "show $ds without --model: $out"
[ "$(printf '%s' "$out" | grep -o "auto (unresolved: needs the model's hidden_size)" | wc -l)" -eq 3 ] ||
    fail "show does not mark the 3 sizes unresolved: $out"
# with the model they resolve as Accelerate resolves them: H*H, int(0.9*H*H), 10*H
out=$("$ZTRAIN" config show --deepspeed_config_file $ds --model $model 2>&1) || fail "show with --model: $out"
printf '%s' "$out" | grep -q "reduce_bucket_size 5184, allgather_bucket_size 500000000, stage3_prefetch_bucket_size 4665, stage3_param_persistence_threshold 720" ||
    fail "sizes not resolved from hidden_size 72: $out"
printf '%s' "$out" | grep -q unresolved && fail "unresolved with --model: $out"
# convert writes a config, so it still needs every value
expect_exit 2 "$ds: zero_optimization.reduce_bucket_size: \"auto\" is computed from the model's hidden_size" -- \
    "$ZTRAIN" config convert --deepspeed_config_file $ds --to fsdp

# deprecated Accelerate keys: accepted, warned about by their new names
cat >"$TMP/old_fsdp.yaml" <<'YAML'
compute_environment: LOCAL_MACHINE
distributed_type: FSDP
downcast_bf16: 'no'
dynamo_backend: 'NO'
fsdp_config:
  fsdp_auto_wrap_policy: TRANSFORMER_BASED_WRAP
  fsdp_backward_prefetch_policy: BACKWARD_POST
  fsdp_offload_params: false
  sharding_strategy: 1
  forward_prefetch: true
  fsdp_state_dict_type: FULL_STATE_DICT
  fsdp_transformer_layer_cls_to_wrap: LlamaDecoderLayer
machine_rank: 0
main_training_function: main
megatron_lm_config: {}
fp16: true
num_machines: 1
num_processes: 2
rdzv_backend: static
same_network: true
use_cpu: false
YAML
out=$("$ZTRAIN" config show --config_file "$TMP/old_fsdp.yaml" 2>"$TMP/err") || fail "old YAML refused: $(cat "$TMP/err")"
for want in "old_fsdp.yaml:7: fsdp_config.fsdp_backward_prefetch_policy is deprecated; read as fsdp_config.fsdp_backward_prefetch" \
            "old_fsdp.yaml:9: fsdp_config.sharding_strategy is deprecated; read as fsdp_config.fsdp_sharding_strategy" \
            "old_fsdp.yaml:16: fp16 is deprecated; read as mixed_precision: fp16" \
            "old_fsdp.yaml:4: dynamo_backend is deprecated; Accelerate reads it as dynamo_config.dynamo_backend"; do
    grep -q "^ztrain: warning: .*$want" "$TMP/err" || fail "no warning '$want': $(cat "$TMP/err")"
done
# and the values count: FULL_SHARD, forward prefetch on, BACKWARD_POST, fp16 compute
printf '%s' "$out" | grep -q "plan: FSDP, FULL_SHARD (ZeRO-3), 2 ranks" || fail "sharding_strategy 1 not read: $out"
printf '%s' "$out" | grep -q "prefetch forward on, backward BACKWARD_POST" ||
    fail "forward_prefetch / fsdp_backward_prefetch_policy not read: $out"
printf '%s' "$out" | grep -q "| fp16 |" || fail "fp16: true not read as mixed_precision fp16: $out"
# a current YAML warns about nothing
"$ZTRAIN" config validate --config_file examples/configs/fsdp_full_shard_bf16.yaml >/dev/null 2>"$TMP/err" || fail "validate"
[ -s "$TMP/err" ] && fail "a current YAML printed warnings: $(cat "$TMP/err")"
# both names of one key: refused, naming both
sed 's/  fsdp_offload_params: false/  fsdp_backward_prefetch: BACKWARD_PRE/' "$TMP/old_fsdp.yaml" >"$TMP/both.yaml"
expect_exit 2 "both.yaml:7: fsdp_config.fsdp_backward_prefetch_policy: is the old name of fsdp_config.fsdp_backward_prefetch, which is also given \(line 8\)" -- \
    "$ZTRAIN" config validate --config_file "$TMP/both.yaml"
# fp16 beside mixed_precision: mixed_precision wins, as in Accelerate
sed 's/^fp16: true/fp16: true\nmixed_precision: bf16/' "$TMP/old_fsdp.yaml" >"$TMP/mp.yaml"
out=$("$ZTRAIN" config show --config_file "$TMP/mp.yaml" 2>"$TMP/err") || fail "fp16 + mixed_precision: $(cat "$TMP/err")"
grep -q "fp16 is deprecated and ignored beside mixed_precision" "$TMP/err" || fail "no warning for fp16 beside mixed_precision: $(cat "$TMP/err")"
printf '%s' "$out" | grep -q "| fp16 |" && fail "fp16 overrode mixed_precision bf16: $out"
# a typo is still a typo
sed 's/fsdp_backward_prefetch_policy/fsdp_backward_prefetch_polcy/' "$TMP/old_fsdp.yaml" >"$TMP/typo.yaml"
expect_exit 2 "typo.yaml:7: fsdp_config.fsdp_backward_prefetch_polcy: unknown key" -- \
    "$ZTRAIN" config validate --config_file "$TMP/typo.yaml"
# a run trains with the old YAML, warning once (rank 0)
"$ZTRAIN" launch --num_processes 2 --threads_per_process 1 train --config_file "$TMP/old_fsdp.yaml" --model tests/fixtures/gqa_tied \
    --data tests/fixtures/gqa_tied/tokens.npy --block_size 16 --per_device_train_batch_size 1 --max_steps 1 \
    --peak_gflops 1000 --mixed_precision bf16 >"$TMP/out" 2>"$TMP/err" || fail "train with the old YAML: $(tail -3 "$TMP/err")"
[ "$(grep -c "fsdp_backward_prefetch_policy is deprecated" "$TMP/err")" -eq 1 ] || fail "expected one warning: $(cat "$TMP/err")"
finish
