# estimate-memory sees fast mode's bf16 activations (docs/gpu.md, "Kernel modes"): with
# bf16 compute, --device cuda (fast by default) or ztrain_kernels: fast holds qkv, the
# attention output and gate|up in bf16.  On the 1B model of tests/gpu/llama_1b (N = T =
# 2048 rows, Dqkv 3072, Dq 2048, F 8192, 16 layers) each layer held saves
#   2 N Dqkv + 4 N Dq + 4 N F = 96,468,992 bytes
# (qkv and gate|up halved, the fp32 attention output gone, its bf16 copy kept), and the
# landing of a product before its rounding (the backward's dact widened from F to 2F
# columns) costs 4 N F = 67,108,864 bytes once: 16 layers save 1408.00 MiB, and with
# gradient checkpointing (one layer's intermediates held) 28.00 MiB.  fp32 compute
# keeps fp32 activations in both modes.
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
saved() { python3 -c "print(f'{$1 - $2:.2f}')"; }

for ck in false true; do
    fast=$(act_mib --mixed_precision bf16 --gradient_checkpointing $ck)
    exact=$(act_mib --mixed_precision bf16 --gradient_checkpointing $ck --config_file "$TMP/exact.yaml")
    want=1408.00
    [ $ck = true ] && want=28.00
    got=$(saved "$exact" "$fast")
    [ "$got" = "$want" ] || fail "bf16, checkpointing $ck: fast saves $got MiB ($exact -> $fast), want $want"
    f32=$(act_mib --mixed_precision no --gradient_checkpointing $ck)
    e32=$(act_mib --mixed_precision no --gradient_checkpointing $ck --config_file "$TMP/exact.yaml")
    [ "$f32" = "$e32" ] || fail "fp32, checkpointing $ck: fast $f32 MiB, exact $e32 MiB (want the same)"
done
finish
