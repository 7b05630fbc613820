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
printf '%s\n' "$out" | grep -q "^plan: .*, device cpu, comm mpi, kernels exact, step sync, activations fp32, graphs off, bf16 products: $avx2_path$" ||
    fail "plan line under AVX2: $out"
# fp32 compute takes no bf16 path: the plan line says nothing about one
out=$(DNNL_MAX_CPU_ISA=AVX2 "$ZTRAIN" "${args[@]}" 2>&1) || fail "fp32 training under AVX2: $out"
printf '%s\n' "$out" | grep -q "^plan: .*, device cpu, comm mpi, kernels exact, step sync, activations fp32, graphs off$" || fail "fp32 plan line: $out"

# Unrestricted, env and the plan line agree on this CPU's path, whichever it is
env_path=$("$ZTRAIN" env --measure false | sed -n 's/^bf16 products: //p')
[ -n "$env_path" ] || fail "env has no bf16 products line"
out=$("$ZTRAIN" "${args[@]}" --mixed_precision bf16 --log_jsonl "$TMP/cpu.jsonl" 2>&1) || fail "bf16 training: $out"
printf '%s\n' "$out" | grep -qF ", comm mpi, kernels exact, step sync, activations fp32, graphs off, bf16 products: $env_path" || fail "plan line vs env ($env_path): $out"

# Both paths compute bf16 products with fp32 accumulation; only the order of the fp32
# additions differs (oneDNN's AMX kernels sum pairs of k in tiles, the AVX2 kernel one
# k at a time).  Each product's output is rounded to bf16 before the next consumes it,
# so that order still flips the bf16 rounding of the few outputs lying near a midpoint.
# Step 0 is the forward alone: the paths agreed within 1e-8 (AVX-512 BF16) and 7e-7
# (AMX) relative, while fp32 products instead of bf16 ones move it by 2.4e-5; 5e-6
# tells the two apart.  Later steps follow Adam's first update, lr * g / |g|: a
# gradient entry near zero whose sign differs moves a weight by 2 lr, so they agree
# less (1.3e-5 on AMX) and are held to 1e-4, which still catches a wrong product.
/usr/bin/python3 - "$TMP/avx2.jsonl" "$TMP/cpu.jsonl" <<'PY' || fail "losses of the two paths differ"
import json, sys
a, b = ([json.loads(l)["loss"] for l in open(p)] for p in sys.argv[1:])
assert len(a) == len(b) == 3, (a, b)
for step, (x, y) in enumerate(zip(a, b)):
    assert abs(x - y) <= (5e-6 if step == 0 else 1e-4) * abs(y), (step, a, b)
PY
finish
