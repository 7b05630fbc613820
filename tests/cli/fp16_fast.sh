# fp16's loss scale in fast mode (docs/gpu.md, "The asynchronous step"): the
# device keeps the scale and its growth counter in the step's scalars, the verdict
# divides it out and updates it with the step's overflow (DeepSpeed's rule,
# engine/loss_scale.c), and the host learns it at the step's readback; the
# backward forms its gradient scale on the device too, so fp16 runs ahead of the
# device and is captured as a graph (docs/gpu.md, "Running ahead").  On the
# emulated device a run with overflows (2^20 at first, window 2, hysteresis 2: it
# skips, halves, grows and skips again) logs exact mode's (synchronous) losses,
# norms, learning rates, scales and skips, and saves the same checkpoints (the
# scaler's state after the step), graphed (the plan's `graphs on`) and not; a model
# that overflows even unscaled stops at the floor on the same step with the same
# words and the same records, and saves nothing.
. "$(dirname "$0")/lib.bash"
fix=tests/fixtures/gqa_tied
train() { "$ZTRAIN" train --threads 1 --block_size 16 --per_device_train_batch_size 2 --data $fix/tokens.npy \
          --progress false --device emu "$@"; }
cat >"$TMP/ds.json" <<'JSON'
{"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 1, "zero_optimization": {"stage": 1},
 "fp16": {"enabled": true, "loss_scale_window": 2, "hysteresis": 2, "initial_scale_power": 20}}
JSON
# mode: exact, fast (graphs auto: on), plain (fast, graphs off: running ahead only)
mode() { case $1 in exact) echo --kernels exact ;; fast) echo --kernels fast ;;
         plain) echo --kernels fast --cuda_graphs off ;; esac; }
for k in exact fast plain; do
    train --model $fix --max_steps 12 --deepspeed "$TMP/ds.json" $(mode $k) --save_steps 5 \
        --output_dir "$TMP/$k" --log_jsonl "$TMP/$k.jsonl" >"$TMP/$k.txt" 2>&1 || fail "$k: $(cat "$TMP/$k.txt")"
done
grep -q "^plan: .*kernels fast, step async, activations [a-z0-9]*, graphs on" "$TMP/fast.txt" || fail "fp16 fast: not graphed: $(grep plan: "$TMP/fast.txt")"
grep -Eq "^plan: .*kernels fast, step async, activations [a-z0-9]*, graphs off(,|$)" "$TMP/plain.txt" || fail "fp16 plain: $(grep plan: "$TMP/plain.txt")"
for k in fast plain; do
/usr/bin/python3 - "$TMP/exact" "$TMP/$k" <<'PY' || fail "fast mode's fp16 run ($k) differs from exact mode's"
import json, os, sys
a, b = sys.argv[1:3]
ra, rb = ([json.loads(l) for l in open(d + '.jsonl')] for d in (a, b))
assert len(ra) == len(rb) == 12
for x, y in zip(ra, rb):
    for k in ('step', 'loss', 'grad_norm', 'lr', 'loss_scale', 'skipped'):
        assert x[k] == y[k], (x['step'], k, x[k], y[k])
# the run did what it is here for: skips, a halving, a growth
scales = [r['loss_scale'] for r in rb]
assert sum(r['skipped'] for r in rb) >= 4 and min(scales) < scales[0] and scales[-1] > min(scales), scales

PY
d=$(same_checkpoint "$TMP/exact" "$TMP/$k" checkpoint-5 checkpoint-10 checkpoint-12) ||
    fail "fast mode's fp16 run ($k): its checkpoints differ from exact mode's: $d"
grep -q "skipped on fp16 overflow" "$TMP/$k.txt" || fail "$k: no skips reported: $(cat "$TMP/$k.txt")"
done
# two ranks (ZeRO-1): the verdict is agreed over the shard group, then the scale updated
for k in exact fast; do
    "${mpi[@]}" -np 2 "$ZTRAIN" train --threads 1 --block_size 16 --per_device_train_batch_size 2 \
        --data $fix/tokens.npy --progress false --device emu --model $fix --max_steps 8 --deepspeed "$TMP/ds.json" \
        --kernels $k --log_jsonl "$TMP/two_$k.jsonl" >"$TMP/two_$k.txt" 2>&1 || fail "2 ranks $k: $(cat "$TMP/two_$k.txt")"
done
/usr/bin/python3 - "$TMP/two_exact.jsonl" "$TMP/two_fast.jsonl" <<'PY' || fail "2 ranks: fast differs from exact"
import json, sys
ra, rb = ([json.loads(l) for l in open(f)] for f in sys.argv[1:3])
assert len(ra) == len(rb) == 8 and sum(r['skipped'] for r in rb) >= 2
for x, y in zip(ra, rb):
    for k in ('loss', 'grad_norm', 'lr', 'loss_scale', 'skipped'):
        assert x[k] == y[k], (x['step'], k, x[k], y[k])
PY

# the floor: norm weights of 1e18 overflow fp16 even unscaled; from 2^16 the floor
# 1 takes 17 skips, and the 18th, at the floor and more than 2 in a row, stops
mkdir -p "$TMP/big"; cp $fix/config.json "$TMP/big/"
/usr/bin/python3 - "$fix/model.safetensors" "$TMP/big/model.safetensors" <<'PY'
import json, struct, sys
src, dst = sys.argv[1:]
b = bytearray(open(src, 'rb').read())
n = struct.unpack('<Q', b[:8])[0]
for name, t in json.loads(b[8:8 + n]).items():
    if name.endswith('layernorm.weight'):
        s, e = (8 + n + o for o in t['data_offsets'])
        for o in range(s, e, 4):
            b[o:o + 4] = struct.pack('<f', 1e18)
open(dst, 'wb').write(b)
PY
# Running ahead, step 19's passes are queued when step 18's readback stops the run
# (its update is not): the same exit, words and records as the synchronous run's,
# and nothing saved (no checkpoint is due before step 40, no final model)
for k in exact fast plain; do
    expect_exit 1 "step 18: fp16 overflow with the loss scale at its floor \(min_loss_scale 1\); 18 steps skipped in a row, more than --max_consecutive_skipped_steps 2 allows" -- \
        train --model "$TMP/big" --max_steps 40 --mixed_precision fp16 --max_consecutive_skipped_steps 2 \
        $(mode $k) --save_steps 20 --output_dir "$TMP/floor_$k" --log_jsonl "$TMP/floor_$k.jsonl"
    [ -z "$(ls -A "$TMP/floor_$k" 2>/dev/null)" ] || fail "floor $k: saved $(ls "$TMP/floor_$k")"
done
for k in fast plain; do
    /usr/bin/python3 - "$TMP/floor_exact.jsonl" "$TMP/floor_$k.jsonl" <<'PY' || fail "floor $k: other records"
import json, sys
ra, rb = ([json.loads(l) for l in open(f)] for f in sys.argv[1:3])
assert [r['step'] for r in ra] == [r['step'] for r in rb] == list(range(1, 19)), [r['step'] for r in rb]
for x, y in zip(ra, rb):
    for k in ('loss', 'grad_norm', 'lr', 'loss_scale', 'skipped', 'nonfinite'):
        assert x.get(k) == y.get(k), (x['step'], k, x.get(k), y.get(k))
PY
done
finish
