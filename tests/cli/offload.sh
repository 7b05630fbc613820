# Offload (docs/zero.md, Offload): on the emulated device, whose buffers the host
# cannot read, offload_optimizer / offload_param / fsdp_offload_params move the
# sharded state to host memory with AdamW on the host.  Held here:
#  - the same bits as the same plan without offload (losses, grad norms, the
#    lost-update audit in the JSONL, and model.safetensors) for DeepSpeed stages
#    1-3 and FSDP FULL_SHARD, fp32, bf16 and bf16 + Kahan, 1 and 2 ranks;
#  - the JSONL splits memory: offloaded state leaves memory_bytes for host_memory_bytes;
#  - checkpoints byte-identical with and without offload, resumed either way;
#  - the plan line says where the buffers live; on the CPU it is a reported no-op;
#  - refusals: stage 0 on a device, NVMe, and the memory gate's two limits.
. "$(dirname "$0")/lib.bash"
root=$(cd "$(dirname "$0")/../.." && pwd)
fix=$root/tests/fixtures/gqa_tied
common=(train --model "$fix" --data "$fix/tokens.npy" --block_size 16 --per_device_train_batch_size 2
        --learning_rate 1e-3 --warmup_steps 1 --weight_decay 0.1 --threads 1 --peak_gflops 1 --progress false)

# ds JSON for stage S with offload (off) or without (no); extra: more zero_optimization keys
ds_json() { # name stage off|no extra
    local o=""
    [ "$3" = off ] && o='"offload_optimizer": {"device": "cpu"},'
    [ "$3" = off ] && [ "$2" = 3 ] && o="$o \"offload_param\": {\"device\": \"cpu\"},"
    printf '{"zero_optimization": {%s "stage": %s%s}, "train_micro_batch_size_per_gpu": "auto", '\
'"gradient_accumulation_steps": "auto"}\n' "$o" "$2" "$4" > "$TMP/$1.json"
}
fsdp_yaml() { # name true|false
    printf 'distributed_type: FSDP\nfsdp_config:\n  fsdp_sharding_strategy: FULL_SHARD\n  fsdp_offload_params: %s\n' \
        "$2" > "$TMP/$1.yaml"
}
# run NAME NP ARGS...: train into $TMP/NAME (output dir, .jsonl, .log)
run() {
    local name=$1 np=$2
    shift 2
    local cmd=("$ZTRAIN")
    [ "$np" -gt 1 ] && cmd=("${mpi[@]}" -np "$np" "$ZTRAIN")
    "${cmd[@]}" "${common[@]}" --output_dir "$TMP/$name" --log_jsonl "$TMP/$name.jsonl" "$@" >"$TMP/$name.log" 2>&1 ||
        { fail "$name: $(tail -3 "$TMP/$name.log")"; return 1; }
}
# the numbers of a JSONL, one line per step
numbers() { grep -o '"\(loss\|grad_norm\|lost_update_fraction\|update_to_half_ulp\)": [^,]*' "$1"; }
same_bits() { # a b: same numbers and model
    local a=$1 b=$2
    [ -s "$TMP/$a.jsonl" ] && diff <(numbers "$TMP/$a.jsonl") <(numbers "$TMP/$b.jsonl") >/dev/null ||
        fail "$a vs $b: the JSONL numbers differ"
    cmp -s "$TMP/$a/model.safetensors" "$TMP/$b/model.safetensors" || fail "$a vs $b: model.safetensors differ"
}
# host_memory_bytes' "params" of the last step (0 when the key is missing)
host_params() { tail -1 "$1" | grep -o '"host_memory_bytes": {"params": [0-9]*' | grep -o '[0-9]*$' || echo 0; }

# ---- the same bits, offloaded or not, on the emulated device ----------------------------
# name np stage extra-flags | zero_optimization extras
cases=(
    "ds1_fp32 2 1 --gradient_accumulation_steps 2|"
    "ds2_bf16 2 2 --mixed_precision bf16|, \"reduce_bucket_size\": 1000, \"allgather_bucket_size\": 1000"
    "ds2_one 1 2 |"
    "ds3_fp32 2 3 |, \"stage3_param_persistence_threshold\": 0"
)
for c in "${cases[@]}"; do
    spec=${c%%|*} extra=${c#*|}
    read -r name np stage flags <<< "$spec"
    for mode in off no; do
        ds_json "$name.$mode" "$stage" "$mode" "$extra"
        # shellcheck disable=SC2086
        run "$name.$mode" "$np" --device emu --use_deepspeed --deepspeed_config_file "$TMP/$name.$mode.json" \
            --max_steps 3 $flags || continue 2
    done
    same_bits "$name.off" "$name.no"
    grep -q "^offload: master shard, m, v in pinned host memory, AdamW on the host's cores" "$TMP/$name.off.log" ||
        fail "$name: no offload line in the plan: $(grep '^plan\|^offload' "$TMP/$name.off.log")"
    [ "$(host_params "$TMP/$name.off.jsonl")" -gt 0 ] || fail "$name: host_memory_bytes.params is 0 with offload"
    [ "$(host_params "$TMP/$name.no.jsonl")" -eq 0 ] || fail "$name: host_memory_bytes.params without offload"
done
# FSDP FULL_SHARD, bf16 master with Kahan: fsdp_offload_params moves the shard and its compensation
for mode in true false; do
    fsdp_yaml "fsdp.$mode" "$mode"
    run "fsdp.$mode" 2 --device emu --config_file "$TMP/fsdp.$mode.yaml" --torch_dtype bfloat16 \
        --master_compensation kahan --max_steps 3
done
same_bits fsdp.true fsdp.false
grep -q "^offload: master shard, m, v, Kahan in pinned host memory.*parameter shard uploaded before each all-gather" \
    "$TMP/fsdp.true.log" || fail "fsdp: the offload line: $(grep '^offload' "$TMP/fsdp.true.log")"
# the device's params shrink by what moved to the host
dev_on=$(tail -1 "$TMP/fsdp.true.jsonl" | grep -o '"memory_bytes": {"params": [0-9]*' | grep -o '[0-9]*$')
dev_off=$(tail -1 "$TMP/fsdp.false.jsonl" | grep -o '"memory_bytes": {"params": [0-9]*' | grep -o '[0-9]*$')
[ -n "$dev_on" ] && [ "$dev_on" -eq $((dev_off - $(host_params "$TMP/fsdp.true.jsonl"))) ] ||
    fail "fsdp: device params $dev_on with offload, $dev_off without, host $(host_params "$TMP/fsdp.true.jsonl")"

# ---- checkpoints: byte-identical files, resumed either way ----------------------------------
# (the same command line both times, as trainer_state.json records it: one JSON path, rewritten)
ds_json ck.off 3 off ', "stage3_param_persistence_threshold": 0'
ds_json ck.no 3 no ', "stage3_param_persistence_threshold": 0'
for mode in off no; do
    cp "$TMP/ck.$mode.json" "$TMP/ck.json"
    run ck 2 --device emu --use_deepspeed --deepspeed_config_file "$TMP/ck.json" --max_steps 4 --save_steps 2 \
        --seed 7 && mv "$TMP/ck" "$TMP/ck.$mode"
done
[ -d "$TMP/ck.off/checkpoint-2/zero" ] || fail "no sharded checkpoint saved with offload"
d=$(same_checkpoint "$TMP/ck.off/checkpoint-2" "$TMP/ck.no/checkpoint-2") ||
    fail "checkpoint-2 differs with offload: $d"
for pair in "off no" "no off"; do
    read -r from to <<< "$pair"
    run "resume.$from.$to" 2 --device emu --use_deepspeed --deepspeed_config_file "$TMP/ck.$to.json" --max_steps 4 \
        --seed 7 --resume_from_checkpoint "$TMP/ck.$from/checkpoint-2" || continue
    grep -q "bit-exact" "$TMP/resume.$from.$to.log" || fail "resume $from -> $to: $(grep -i resum "$TMP/resume.$from.$to.log")"
    cmp -s "$TMP/resume.$from.$to/model.safetensors" "$TMP/ck.no/model.safetensors" ||
        fail "resume $from -> $to: the final model differs from the uninterrupted run's"
done

# ---- the CPU host: a reported no-op, the same run -------------------------------------------
ds_json cpu.off 2 off ""
ds_json cpu.no 2 no ""
run cpu.off 2 --use_deepspeed --deepspeed_config_file "$TMP/cpu.off.json" --max_steps 2
run cpu.no 2 --use_deepspeed --deepspeed_config_file "$TMP/cpu.no.json" --max_steps 2
same_bits cpu.off cpu.no
grep -q "^offload: to cpu requested; on this CPU host .* so nothing moves$" "$TMP/cpu.off.log" ||
    fail "cpu: the no-op is not reported: $(grep '^offload' "$TMP/cpu.off.log")"
[ "$(host_params "$TMP/cpu.off.jsonl")" -eq 0 ] || fail "cpu: host_memory_bytes with a no-op offload"
out=$("$ZTRAIN" config show --model "$fix" --use_deepspeed --deepspeed_config_file "$TMP/cpu.off.json" \
      --num_processes 2 2>&1) || fail "config show: $out"
printf '%s' "$out" | grep -q "^offload: to cpu requested; on this CPU host" || fail "config show (cpu): $out"
out=$("$ZTRAIN" config show --model "$fix" --use_deepspeed --deepspeed_config_file "$TMP/ds3_fp32.off.json" \
      --num_processes 2 --device emu 2>&1) || fail "config show: $out"
printf '%s' "$out" | grep -q "^offload: master shard, m, v in pinned host memory" || fail "config show (emu): $out"
printf '%s' "$out" | grep -Eq "^  host \(offload\) +[0-9.]+ MiB \(host_memory_bytes\): master" ||
    fail "config show (emu): no host bytes: $out"

# ---- refusals ---------------------------------------------------------------------------------
printf 'distributed_type: FSDP\nfsdp_config:\n  fsdp_sharding_strategy: NO_SHARD\n  fsdp_offload_params: true\n' \
    > "$TMP/noshard.yaml"
expect_exit 2 "offload to cpu on --device emu needs a sharded stage" -- \
    "$ZTRAIN" "${common[@]}" --max_steps 1 --device emu --config_file "$TMP/noshard.yaml"
printf '{"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "nvme", "nvme_path": "/nvme"}}}\n' \
    > "$TMP/nvme.json"
expect_exit 2 "zero_optimization.offload_optimizer.device.*NVMe offload \(ZeRO-Infinity\) is not supported: offload to cpu instead" -- \
    "$ZTRAIN" "${common[@]}" --max_steps 1 --use_deepspeed --deepspeed_config_file "$TMP/nvme.json"
# the gate: a device limit that only offload meets, then a host limit offload exceeds
dev=$(grep -Eo "^  device +[0-9.]+" <<< "$("$ZTRAIN" estimate-memory --model "$fix" --block_size 16 \
      --per_device_train_batch_size 2 --use_deepspeed --deepspeed_config_file "$TMP/ds3_fp32.off.json" \
      --num_processes 2 --device emu 2>&1)" | grep -Eo "[0-9.]+$")
[ -n "$dev" ] || fail "estimate-memory prints no device line"
limit=$(awk -v d="$dev" 'BEGIN { printf "%d", (d + 0.05) * 1048576 }') # above the offloaded need, below the rest
expect_exit 2 "it fits only with offload" -- "${mpi[@]}" -np 2 "$ZTRAIN" "${common[@]}" --max_steps 1 --device emu \
    --use_deepspeed --deepspeed_config_file "$TMP/ds3_fp32.no.json" --max_memory "$limit"
run gate.ok 2 --max_steps 1 --device emu --use_deepspeed --deepspeed_config_file "$TMP/ds3_fp32.off.json" \
    --max_memory "$limit"
expect_exit 2 "the offloaded state needs an estimated .* of host memory per rank, more than the host limit" -- \
    "${mpi[@]}" -np 2 "$ZTRAIN" "${common[@]}" --max_steps 1 --device emu --use_deepspeed \
    --deepspeed_config_file "$TMP/ds3_fp32.off.json" --max_host_memory 1000
finish
