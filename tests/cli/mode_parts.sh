# The mode's named parts (plan.h; docs/gpu.md, "Kernel modes"): --kernels fast is the
# preset of the step, the activations and the graphs, and each part can be set alone
# for diagnosis (--step, --activations, --cuda_graphs): the plan line names each part;
# a part set alone takes effect (the asynchronous step under exact kernels keeps
# exact mode's bits, on the emulated device whose tables run the CPU's kernels; bf16
# activations under exact kernels change the numbers, and leave the plan's other parts
# alone); the pairs that cannot run are refused, exit 2, naming the flag.
. "$(dirname "$0")/lib.bash"
root=$(cd "$(dirname "$0")/../.." && pwd)
fix=$root/tests/fixtures/gqa_tied
args=(train --model "$fix" --data "$fix/tokens.npy" --block_size 16 --per_device_train_batch_size 2 --max_steps 3
      --threads 1 --peak_gflops 1 --progress false --weight_decay 0.1 --save_steps 3)

expect_exit 2 "--step 'later': expected sync or async" -- "$ZTRAIN" "${args[@]}" --output_dir "$TMP/x" --device emu --step later
expect_exit 2 "--step async needs a device" -- "$ZTRAIN" "${args[@]}" --output_dir "$TMP/x" --step async
expect_exit 2 "--activations bf16 needs bf16 compute \(got fp32\)" -- "$ZTRAIN" "${args[@]}" --output_dir "$TMP/x" --activations bf16

run() { # NAME PLAN-LINE-PATTERN ARGS...
    local name=$1 want=$2; shift 2
    local out
    out=$("$ZTRAIN" "${args[@]}" --output_dir "$TMP/$name" --log_jsonl "$TMP/$name.jsonl" "$@" 2>&1) ||
        { fail "$name: $out"; return; }
    printf '%s' "$out" | grep -q "^plan: .*, $want" || fail "$name: the plan line: $(printf '%s' "$out" | grep plan:)"
}
run exact "kernels exact, step sync, activations fp32, graphs off$" --device emu
run async "kernels exact, step async, activations fp32, graphs on$" --device emu --step async
run fast_sync "kernels fast, step sync, activations fp32, graphs off$" --device emu --kernels fast --step sync
d=$(same_checkpoint "$TMP/exact/checkpoint-3" "$TMP/async/checkpoint-3") || fail "--step async alone: $d"
d=$(same_checkpoint "$TMP/exact/checkpoint-3" "$TMP/fast_sync/checkpoint-3") || fail "--step sync under fast: $d"

run bf16 "kernels exact, step sync, activations fp32, graphs off, bf16 products" --mixed_precision bf16
run act16 "kernels exact, step sync, activations bf16, graphs off, bf16 products" --mixed_precision bf16 --activations bf16
run fast16 "kernels fast, step async, activations fp32, graphs on, bf16 products" --device emu --kernels fast \
    --mixed_precision bf16 --activations fp32
/usr/bin/python3 - "$TMP" <<'PY' || fail "the activations part: $?"
import json, sys
loss = {k: [json.loads(l)['loss'] for l in open(f'{sys.argv[1]}/{k}.jsonl')] for k in ('bf16', 'act16', 'fast16')}
assert loss['act16'] != loss['bf16'], loss      # bf16 activations round qkv, the attention and gu
assert all(abs(a - b) < 0.05 * abs(a) for a, b in zip(loss['act16'], loss['bf16'])), loss  # by bf16's error
assert loss['fast16'] != loss['act16'], loss   # fp32 activations under the fast preset: not the bf16 ones
PY
finish
