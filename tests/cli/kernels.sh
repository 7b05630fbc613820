# --kernels exact|fast and the Accelerate YAML's ztrain_kernels key (docs/gpu.md,
# "Kernel modes"): the plan line says the mode; the CPU refuses fast (exit 2, naming
# the flag or the key); the emulated device runs fast mode (the asynchronous step)
# with the numbers of exact mode in fp32, within bf16 error of them in bf16.  The waits inside a fast step are counted by
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

# fast mode on the emulated device runs the CPU's kernels and the asynchronous step's
# host logic: in fp32 the same losses, norms and audit as exact mode; in bf16 it also
# keeps bf16 activations (qkv, the attention output, gate|up: docs/gpu.md), so its
# losses and norms are within bf16 error (2^-8 relative) of exact mode's, not its bits
# (the lost-update audit counts single elements whose updates round away, so it is only
# compared where the numbers are the same)
same() { # exact.jsonl fast.jsonl what [bf16]
    python3 - "$1" "$2" "${4:-}" <<'PY' || fail "fast and exact differ on emu: $3"
import json, sys
a, b = ([json.loads(l) for l in open(p)] for p in sys.argv[1:3])
bf16 = sys.argv[3] == "bf16"
assert len(a) == len(b) == 3, (len(a), len(b))
for x, y in zip(a, b):
    assert x["skipped"] == y["skipped"], (x["step"], x["skipped"], y["skipped"])
    for k in ("loss", "grad_norm") if bf16 else ("loss", "grad_norm", "lost_update_fraction", "update_to_half_ulp"):
        # bf16 activations: the loss within 2^-8; the norm within 2^-6 (each gradient
        # has passed through up to four bf16 roundings: test_async_step.c)
        ok = abs(x[k] - y[k]) <= abs(x[k]) / (64 if k == "grad_norm" else 256) if bf16 else x[k] == y[k]
        assert ok, (x["step"], k, x[k], y[k])
    if bf16: # the bf16 activations were used: fast is not exact's bits
        assert any(u["loss"] != v["loss"] for u, v in zip(a, b)), "fast mode's losses are exact mode's bits"
PY
}
same "$TMP/exact.jsonl" "$TMP/fast.jsonl" "1 rank, bf16" bf16
for k in exact fast; do
    out=$("$ZTRAIN" "${args[@]}" --device emu --mixed_precision no --kernels $k --log_jsonl "$TMP/f32_$k.jsonl" 2>&1) ||
        fail "fp32, $k: $out"
done
same "$TMP/f32_exact.jsonl" "$TMP/f32_fast.jsonl" "1 rank, fp32"
# 2 ranks, FSDP: the verdict is agreed over the ranks before AdamW (async_step.c)
for k in exact fast; do
    out=$("${mpi[@]}" -np 2 "$ZTRAIN" "${args[@]}" --device emu --use_fsdp --kernels $k \
          --log_jsonl "$TMP/fsdp2_$k.jsonl" 2>&1) || fail "2 ranks, $k: $out"
done
same "$TMP/fsdp2_exact.jsonl" "$TMP/fsdp2_fast.jsonl" "2 ranks, FSDP, bf16" bf16

# 20 steps, fast against exact: fast mode's training pass takes the fused lm-head
# cross-entropy (lmhead_xent) and the residual products (matmul_out); losses and norms
# within bf16 error (2^-8 relative).  On the emulated device both run the CPU's kernels
# and the chunk holds every row here; what differs is fast mode's bf16 activations
# (tests/test_act16.c); tests/test_fused.c crosses chunk boundaries.
args20=("${args[@]}")
args20[10]=20 # --max_steps
for k in exact fast; do
    out=$("$ZTRAIN" "${args20[@]}" --device emu --kernels $k --log_jsonl "$TMP/s20_$k.jsonl" 2>&1) ||
        fail "20 steps, $k: $out"
done
python3 - "$TMP/s20_exact.jsonl" "$TMP/s20_fast.jsonl" <<'PY' || fail "20 steps: fast and exact beyond bf16 error"
import json, sys
a, b = ([json.loads(l) for l in open(p)] for p in sys.argv[1:3])
assert len(a) == len(b) == 20, (len(a), len(b))
for x, y in zip(a, b):
    for k in ("loss", "grad_norm"):
        tol = 2.0 ** -6 if k == "grad_norm" else 2.0 ** -8  # the norm: test_async_step.c
        assert abs(x[k] - y[k]) <= tol * abs(x[k]), (x["step"], k, x[k], y[k])
PY

# estimate-memory and the memory gate: fast mode's training holds no (N, V) logits, so
# its activations are smaller by their fp32 and bf16 copies, N V (4 + 2) bytes (less
# the device double of the loss): at N = 8 x 128, V = 256, 1.5 MiB; and with bf16
# compute it keeps qkv, the attention output and gate|up in bf16, 2 N (Dqkv + 2 Dq + 2F)
# bytes less a layer (Dqkv 128, Dq 64, F 172, 2 layers: 2.34 MiB; act16_memory.sh), and
# no fp32 dqkv (the attention's backward writes the bf16 one): 4 N Dqkv, 0.5 MiB
mem=(estimate-memory --model "$fix" --device emu --block_size 128 --per_device_train_batch_size 8 --mixed_precision bf16)
for k in exact fast; do
    "$ZTRAIN" "${mem[@]}" --kernels $k > "$TMP/mem_$k.txt" 2>&1 || fail "estimate-memory --kernels $k: $(cat "$TMP/mem_$k.txt")"
done
python3 - "$TMP/mem_exact.txt" "$TMP/mem_fast.txt" <<'PY' || fail "estimate-memory: fast mode does not drop the logits"
import re, sys
e, f = (float(re.search(r"activations\s+([0-9.]+) MiB", open(p).read()).group(1)) for p in sys.argv[1:3])
N = 8 * 128
want = (N * 256 * 6 - 8 + 2 * 2 * N * (128 + 2 * 64 + 2 * 172) + 4 * N * 128) / 2**20
assert abs((e - f) - want) <= 0.011, (e, f, want)
PY
# a limit between the two estimates: exact mode is refused before allocating, fast runs
gate=(train --model "$fix" --data "$fix/tokens.npy" --device emu --block_size 64 --per_device_train_batch_size 16
      --mixed_precision bf16 --max_steps 1 --max_memory 13.5MB --progress false --threads 1 --peak_gflops 1)
expect_exit 2 "needs an estimated 14.3. MB per rank .*13.50 MB limit" -- "$ZTRAIN" "${gate[@]}" --kernels exact
out=$("$ZTRAIN" "${gate[@]}" --kernels fast --output_dir "$TMP/gate_fast" 2>&1) ||
    fail "fast mode under the limit exact mode exceeds: $out"
finish
