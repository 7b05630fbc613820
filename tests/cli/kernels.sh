# --kernels exact|fast and the Accelerate YAML's ztrain_kernels key (docs/gpu.md,
# "Kernel modes"): the plan line says the mode; the CPU refuses fast (exit 2, naming
# the flag or the key); the emulated device runs fast mode (the asynchronous step)
# with the numbers of exact mode.  The waits inside a fast step are counted by
# tests/test_async_step.c.
. "$(dirname "$0")/lib.bash"
root=$(cd "$(dirname "$0")/../.." && pwd)
fix=$root/tests/fixtures/gqa_tied
args=(train --model "$fix" --data "$fix/tokens.npy" --block_size 16 --per_device_train_batch_size 2 --max_steps 3
      --threads 1 --peak_gflops 1 --progress false --mixed_precision bf16 --weight_decay 0.1)

expect_exit 2 "--kernels fast needs a device \(--device cuda\)" -- "$ZTRAIN" "${args[@]}" --kernels fast
expect_exit 2 "--kernels 'quick': expected exact or fast" -- "$ZTRAIN" "${args[@]}" --device emu --kernels quick
printf 'distributed_type: NO\nnum_processes: 1\nztrain_kernels: fast\n' > "$TMP/fast.yaml"
expect_exit 2 "--kernels fast needs a device" -- "$ZTRAIN" "${args[@]}" --config_file "$TMP/fast.yaml"
printf 'distributed_type: NO\nnum_processes: 1\nztrain_kernels: turbo\n' > "$TMP/bad.yaml"
expect_exit 2 "ztrain_kernels: 'turbo' is not allowed \(allowed: exact \| fast\)" -- \
    "$ZTRAIN" "${args[@]}" --device emu --config_file "$TMP/bad.yaml"

# the plan line: exact by default off a GPU; the key and the flag (which wins) set it
out=$("$ZTRAIN" "${args[@]}" --device emu --log_jsonl "$TMP/exact.jsonl" 2>&1) || fail "emu exact: $out"
printf '%s' "$out" | grep -q "^plan: .*, device emu, comm auto, kernels exact" || fail "emu plan line: $out"
out=$("$ZTRAIN" "${args[@]}" --device emu --config_file "$TMP/fast.yaml" --log_jsonl "$TMP/fast.jsonl" 2>&1) ||
    fail "emu fast by the key: $out"
printf '%s' "$out" | grep -q "^plan: .*, device emu, comm auto, kernels fast" || fail "fast plan line: $out"
out=$("$ZTRAIN" "${args[@]}" --device emu --config_file "$TMP/fast.yaml" --kernels exact 2>&1) ||
    fail "the flag over the key: $out"
printf '%s' "$out" | grep -q "^plan: .*, kernels exact" || fail "the flag does not win over the key: $out"

# fast mode on the emulated device runs the CPU's kernels: the same losses, norms and audit
same() { # exact.jsonl fast.jsonl what
    python3 - "$1" "$2" <<'PY' || fail "fast and exact differ on emu: $3"
import json, sys
a, b = ([json.loads(l) for l in open(p)] for p in sys.argv[1:3])
assert len(a) == len(b) == 3, (len(a), len(b))
for x, y in zip(a, b):
    for k in ("loss", "grad_norm", "lost_update_fraction", "update_to_half_ulp", "skipped"):
        assert x[k] == y[k], (x["step"], k, x[k], y[k])
PY
}
same "$TMP/exact.jsonl" "$TMP/fast.jsonl" "1 rank"
# 2 ranks, FSDP: the verdict is agreed over the ranks before AdamW (async_step.c)
for k in exact fast; do
    out=$("${mpi[@]}" -np 2 "$ZTRAIN" "${args[@]}" --device emu --use_fsdp --kernels $k \
          --log_jsonl "$TMP/fsdp2_$k.jsonl" 2>&1) || fail "2 ranks, $k: $out"
done
same "$TMP/fsdp2_exact.jsonl" "$TMP/fsdp2_fast.jsonl" "2 ranks, FSDP"
finish
