# estimate-memory sees fast mode's bf16 activations (docs/gpu.md, "Kernel modes"): with
# bf16 compute, fast kernels hold qkv, the attention output and gate|up in bf16.  On the
# 1B model of tests/gpu/llama_1b (N = T = 2048 rows, Dqkv 3072, Dq 2048, F 8192,
# V 32000, 16 layers) each layer held saves
#   2 N Dqkv + 4 N Dq + 4 N F = 96,468,992 bytes (92 MiB)
# (qkv and gate|up halved, the fp32 attention output gone, its bf16 copy kept): 16
# layers 1472 MiB, and with gradient checkpointing (one layer's intermediates held)
# 92 MiB; and once, the backward's fp32 dqkv, 4 N Dqkv = 24 MiB (the attention's
# backward writes the bf16 dqkv itself; Llama has no q/k/v bias to sum it for).  Fast mode's training also holds no (N, V) logits (N V (4 + 2) bytes, less the
# device double of its loss; V < 16 C, so no transposed lm-head result either), which
# is all that fp32 compute drops.  `--device cuda` is fast by default, ztrain_kernels:
# exact (or --kernels exact) is not.  With bf16 operands fast mode's attention scratch
# is larger (backend.h's zt_attention_fast_scratch_bytes: D, 4 nh N bytes, the rotated q
# and dO in bf16, 2 nh N hd bytes each, then the backward's per-query-head partial dk and
# dv, 8 nh N hd bytes, 32 heads over 8: 50,593,792 bytes, where the exact rule's packed k
# and v take 2 (2 nkv N hd + 4 nkv N/2 hd) = 8,388,608): 42,205,184 bytes (40.25 MiB) less
# saved, once.
. "$(dirname "$0")/lib.bash"
root=$(cd "$(dirname "$0")/../.." && pwd)
cfg=$root/tests/gpu/llama_1b/config.json
printf 'distributed_type: NO\nnum_processes: 1\nztrain_kernels: exact\n' > "$TMP/exact.yaml"

act_mib() { # activations in MiB from estimate-memory's breakdown
    local out
    out=$("$ZTRAIN" estimate-memory --model_config "$cfg" --block_size 2048 --per_device_train_batch_size 1 \
          --device cuda "$@" 2>&1) || { fail "estimate-memory $*: $out"; echo 0; return; }
    printf '%s\n' "$out" | awk '/^  activations/ {print $2}'
}
check() { # exact_mib fast_mib want_bytes what
    python3 -c "import sys; e, f, w = float('$1'), float('$2'), $3 / 2**20; sys.exit(abs((e - f) - w) > 0.011)" ||
        fail "$4: fast saves $(python3 -c "print(f'{$1 - $2:.2f}')") MiB ($1 -> $2), want $(python3 -c "print(f'{$3 / 2**20:.2f}')")"
}
N=2048
layer=$((2 * N * 3072 + 4 * N * 2048 + 4 * N * 8192))
logits=$((N * 32000 * 6 - 8))
scratch=$((4 * 32 * N + 2 * 2 * 32 * N * 64 + 8 * 32 * N * 64 - 2 * (2 * 8 * N * 64 + 4 * 8 * (N / 2) * 64)))
for ck in false true; do
    held=16
    [ $ck = true ] && held=1
    fast=$(act_mib --mixed_precision bf16 --gradient_checkpointing $ck)
    exact=$(act_mib --mixed_precision bf16 --gradient_checkpointing $ck --config_file "$TMP/exact.yaml")
    check "$exact" "$fast" $((held * layer + 4 * N * 3072 + logits - scratch)) "bf16, checkpointing $ck"
    fast=$(act_mib --mixed_precision no --gradient_checkpointing $ck --kernels fast)
    exact=$(act_mib --mixed_precision no --gradient_checkpointing $ck --kernels exact)
    check "$exact" "$fast" $((N * 32000 * 4 - 8)) "fp32 (no bf16 activations), checkpointing $ck"
done
finish
