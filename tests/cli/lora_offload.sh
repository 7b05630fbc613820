# LoRA with offloaded state (issue 46; docs/lora.md): on the emulated device, whose
# buffers the host cannot read, DeepSpeed's offload_optimizer (and offload_param at
# stage 3) and FSDP's fsdp_offload_params move the adapters' master, m and v to host
# memory with AdamW on the host's cores, and the frozen base's shard with them; the
# host's unit loops pass the frozen units by.  Held: the same losses, grad norms and
# lost-update audit, bit for bit, and the same adapters (adapter_model.safetensors
# byte for byte) as the same plan without offload, at stages 1-3 and under FULL_SHARD,
# fp32 and aligned bf16, 1 and 2 ranks; and the offloaded run's host memory holds the
# state (host_memory_bytes' params above zero).  The delayed parameter update
# (--offload_delayed_update, stage 3, bf16: the host's compute-dtype copies swap sets each
# step, the frozen units' remade from their masters when gathered): steps 1 and 2 compute
# at the initial adapters (a learning rate 0 run's losses), step 3 not, and steps 3-4 stay
# within 1 % of the undelayed run's (a stale base would be far off).
. "$(dirname "$0")/lib.bash"
fix=tests/fixtures/gqa_tied
common=(train --model $fix --data $fix/tokens.npy --block_size 16 --per_device_train_batch_size 1 --max_steps 3
        --learning_rate 1e-3 --threads 1 --peak_gflops 1000 --device emu --use_peft --lora_r 4 --lora_alpha 8
        --lora_target_modules all-linear)
ds_json() { # name stage off|no
    local o=""
    [ "$3" = off ] && o='"offload_optimizer": {"device": "cpu"},'
    [ "$3" = off ] && [ "$2" = 3 ] && o="$o \"offload_param\": {\"device\": \"cpu\"},"
    printf '{"zero_optimization": {%s "stage": %s}, "train_micro_batch_size_per_gpu": "auto", '\
'"gradient_accumulation_steps": "auto"}\n' "$o" "$2" > "$TMP/$1.json"
}
run() { # name np args...
    local name=$1 np=$2
    shift 2
    local cmd=("$ZTRAIN")
    [ "$np" -gt 1 ] && cmd=("${mpi[@]}" -np "$np" "$ZTRAIN")
    "${cmd[@]}" "${common[@]}" --output_dir "$TMP/$name" --log_jsonl "$TMP/$name.jsonl" "$@" >"$TMP/$name.log" 2>&1 ||
        { fail "$name: $(tail -3 "$TMP/$name.log")"; return 1; }
}
numbers() { grep -o '"\(loss\|grad_norm\|lost_update_fraction\|update_to_half_ulp\)": [^,]*' "$1"; }
host_params() { tail -1 "$1" | grep -o '"host_memory_bytes": {"params": [0-9]*' | grep -o '[0-9]*$' || echo 0; }
same() { # a b
    [ "$(numbers "$TMP/$1.jsonl" | wc -l)" -eq 12 ] && diff <(numbers "$TMP/$1.jsonl") <(numbers "$TMP/$2.jsonl") \
        >/dev/null || fail "$1 vs $2: the JSONL numbers differ: $(numbers "$TMP/$1.jsonl" | head -4)"
    cmp -s "$TMP/$1/adapter_model.safetensors" "$TMP/$2/adapter_model.safetensors" || fail "$1 vs $2: adapters differ"
    [ "$(host_params "$TMP/$1.jsonl")" -gt 0 ] || fail "$1: host_memory_bytes.params is 0 with offload"
}
cases=("ds1 2 1" "ds2 1 2 --torch_dtype bfloat16 --mixed_precision bf16" "ds3 2 3")
for c in "${cases[@]}"; do
    read -r name np stage flags <<< "$c"
    for mode in off no; do
        ds_json "$name.$mode" "$stage" "$mode"
        # shellcheck disable=SC2086
        run "$name.$mode" "$np" --use_deepspeed --deepspeed_config_file "$TMP/$name.$mode.json" $flags || continue 2
    done
    same "$name.off" "$name.no"
done
for mode in true false; do
    printf 'distributed_type: FSDP\nfsdp_config:\n  fsdp_sharding_strategy: FULL_SHARD\n  fsdp_offload_params: %s\n' \
        "$mode" > "$TMP/fsdp.$mode.yaml"
    run "fsdp.$mode" 2 --config_file "$TMP/fsdp.$mode.yaml" --torch_dtype bfloat16 --mixed_precision bf16
done
same fsdp.true fsdp.false
printf '{"zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu"}, "offload_param": {"device": "cpu"}, '\
'"stage3_param_persistence_threshold": 0}, "train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto"}\n' \
    > "$TMP/dpu.json"
dpu=(--use_deepspeed --deepspeed_config_file "$TMP/dpu.json" --max_steps 4 --torch_dtype bfloat16 --mixed_precision bf16)
run dpu 1 "${dpu[@]}" --offload_delayed_update
run still 1 "${dpu[@]}" --learning_rate 0
run plain 1 "${dpu[@]}"
loss() { grep "\"step\": $2," "$TMP/$1.jsonl" | grep -o '"loss": [^,]*' | awk '{print $2}'; } # NAME STEP
for s in 1 2; do
    [ -n "$(loss dpu $s)" ] && [ "$(loss dpu $s)" = "$(loss still $s)" ] ||
        fail "step $s: $(loss dpu $s) with the delayed update, $(loss still $s) at the initial adapters"
done
[ "$(loss dpu 3)" != "$(loss still 3)" ] || fail "step 3 still at the initial adapters: $(loss dpu 3)"
for s in 3 4; do
    awk -v a="$(loss dpu $s)" -v b="$(loss plain $s)" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a != "" && d <= 0.01 * b) }' ||
        fail "step $s: $(loss dpu $s) with the delayed update, $(loss plain $s) without"
done
finish
