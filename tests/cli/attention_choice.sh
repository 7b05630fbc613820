# Fast mode's attention choice on the plan line (kernels/attention_choice.h; docs/gpu.md,
# "Attention through cuDNN"): with bf16 activations under the fast kernels the plan line
# says which kernels run the attention and why; the emulated device runs the CPU's
# kernels, so it names the own kernels and the device; ZT_ATTENTION=own is said as the
# reason; a bad ZT_ATTENTION is refused (exit 2, naming it); runs whose model does not
# call the fast attention (exact kernels, fp32 activations) say nothing of it.
. "$(dirname "$0")/lib.bash"
root=$(cd "$(dirname "$0")/../.." && pwd)
fix=$root/tests/fixtures/gqa_tied
args=(train --model "$fix" --data "$fix/tokens.npy" --block_size 16 --per_device_train_batch_size 2 --max_steps 1
      --threads 1 --peak_gflops 1 --progress false --device emu --mixed_precision bf16)

plan() { # NAME ARGS...: the run's plan line (a failed run fails the test)
    local name=$1 out
    shift
    out=$("$ZTRAIN" "${args[@]}" --output_dir "$TMP/$name" "$@" 2>&1) || { fail "$name: $out"; return; }
    printf '%s\n' "$out" | grep '^plan: '
}
line=$(plan fast --kernels fast)
printf '%s' "$line" | grep -q ', bf16 products: [^;]*; attention own kernels (device emu)$' ||
    fail "fast, bf16 activations: the plan line: $line"
line=$(ZT_ATTENTION=own plan forced --kernels fast)
printf '%s' "$line" | grep -q '; attention own kernels (ZT_ATTENTION=own)$' || fail "ZT_ATTENTION=own: the plan line: $line"
line=$(ZT_ATTENTION=auto plan auto --kernels fast)
printf '%s' "$line" | grep -q '; attention own kernels (device emu)$' || fail "ZT_ATTENTION=auto: the plan line: $line"
for what in "exact|--kernels exact" "fp32|--kernels fast --activations fp32"; do
    IFS='|' read -r name flags <<<"$what"
    # shellcheck disable=SC2086  # the flags split into words
    line=$(plan "$name" $flags)
    case $line in *"; attention "*) fail "$name: the plan line names an attention it does not run: $line" ;; esac
done
ZT_ATTENTION=cudnn expect_exit 2 "ZT_ATTENTION=cudnn: expected auto .* or own" -- "$ZTRAIN" "${args[@]}" \
    --output_dir "$TMP/bad" --kernels fast
finish
