# bf16 products on a CPU without native bf16 (issue 18 point 3): `ztrain env` and the
# plan line say which path the CPU takes, and training under that path gives the
# losses of the native one.  DNNL_MAX_CPU_ISA=AVX2 makes any CPU look like one
# without AVX512-BF16 to oneDNN, and so to zt_matmul_has_native_bf16.
. "$(dirname "$0")/lib.bash"
root=$(cd "$(dirname "$0")/../.." && pwd)
fix=$root/tests/fixtures/gqa_tied
args=(train --model "$fix" --data "$fix/tokens.npy" --block_size 16 --per_device_train_batch_size 2 --max_steps 3
      --threads 2 --peak_gflops 1000 --progress false)
avx2_path="AVX2 kernel, converted while packing (no native bf16)"

out=$(DNNL_MAX_CPU_ISA=AVX2 "$ZTRAIN" env --measure false) || fail "env under AVX2: $out"
printf '%s\n' "$out" | grep -q "^onednn: .*(isa: AVX2)$" || fail "oneDNN ignored DNNL_MAX_CPU_ISA: $out"
printf '%s\n' "$out" | grep -qx "native bf16:   no" || fail "env under AVX2, native line: $out"
printf '%s\n' "$out" | grep -qx "bf16 products: $avx2_path" || fail "env under AVX2, path line: $out"

out=$(DNNL_MAX_CPU_ISA=AVX2 "$ZTRAIN" "${args[@]}" --mixed_precision bf16 --log_jsonl "$TMP/avx2.jsonl" 2>&1) ||
    fail "bf16 training under AVX2: $out"
printf '%s\n' "$out" | grep -q "^plan: .*, device cpu, comm mpi, bf16 products: $avx2_path$" ||
    fail "plan line under AVX2: $out"
# fp32 compute takes no bf16 path: the plan line says nothing about one
out=$(DNNL_MAX_CPU_ISA=AVX2 "$ZTRAIN" "${args[@]}" 2>&1) || fail "fp32 training under AVX2: $out"
printf '%s\n' "$out" | grep -q "^plan: .*, device cpu, comm mpi$" || fail "fp32 plan line: $out"

# Unrestricted, env and the plan line agree on this CPU's path, whichever it is
env_path=$("$ZTRAIN" env --measure false | sed -n 's/^bf16 products: //p')
[ -n "$env_path" ] || fail "env has no bf16 products line"
out=$("$ZTRAIN" "${args[@]}" --mixed_precision bf16 --log_jsonl "$TMP/cpu.jsonl" 2>&1) || fail "bf16 training: $out"
printf '%s\n' "$out" | grep -qF ", comm mpi, bf16 products: $env_path" || fail "plan line vs env ($env_path): $out"

# Both paths compute bf16 products with fp32 accumulation; only the order of the fp32
# additions differs, so the losses agree far inside bf16's resolution (3 steps).
/usr/bin/python3 - "$TMP/avx2.jsonl" "$TMP/cpu.jsonl" <<'PY' || fail "losses of the two paths differ"
import json, sys
a, b = ([json.loads(l)["loss"] for l in open(p)] for p in sys.argv[1:])
assert len(a) == len(b) == 3, (a, b)
for x, y in zip(a, b):
    assert abs(x - y) <= 1e-5 * max(1.0, abs(y)), (a, b)
PY
finish
