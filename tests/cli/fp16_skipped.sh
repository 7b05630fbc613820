# fp16 where no step can be applied (issue 33 point 1): a model that overflows
# fp16 even unscaled (norm weights of 1e18, finite in fp32) skips every step; once
# the loss scale sits at its floor and still overflows, after more than
# --max_consecutive_skipped_steps skips in a row, the run stops with exit 1 and
# saves nothing (DeepSpeed stops at its minimum scale too).  A run that ends with
# skipped steps says how many were applied and how many skipped, and never
# "trained N steps" when none was applied.  Both faces.
. "$(dirname "$0")/lib.bash"
fix=tests/fixtures/gqa_tied
data=$fix/tokens.npy
train() { "$ZTRAIN" train --threads 1 --block_size 16 --per_device_train_batch_size 2 --data $data --progress false "$@"; }

mkdir -p "$TMP/big"; cp $fix/config.json "$TMP/big/"
/usr/bin/python3 - "$fix/model.safetensors" "$TMP/big/model.safetensors" <<'PY'
import json, struct, sys
src, dst = sys.argv[1:]
b = bytearray(open(src, 'rb').read())
n = struct.unpack('<Q', b[:8])[0]
h = json.loads(b[8:8 + n])
for name, t in h.items():
    if name.endswith('layernorm.weight'):
        s, e = (8 + n + o for o in t['data_offsets'])
        for o in range(s, e, 4):
            b[o:o + 4] = struct.pack('<f', 1e18)
open(dst, 'wb').write(b)
PY

# the default: 2^16 down to the floor 1 takes 17 skips (hysteresis 2), then more
# than 20 in a row at the floor stops the run at step 21
for face in "" "--use_deepspeed"; do
    out=$(train --model "$TMP/big" --max_steps 60 --mixed_precision fp16 $face --output_dir "$TMP/out$face" \
          --log_jsonl "$TMP/a$face.jsonl" 2>&1)
    rc=$?
    [ "$rc" -eq 1 ] || fail "fp16 all skipped ($face): exit $rc (want 1): $out"
    printf '%s\n' "$out" | grep -q "step 21: fp16 overflow with the loss scale at its floor (min_loss_scale 1); 21 steps skipped in a row, more than --max_consecutive_skipped_steps 20 allows; stopping" ||
        fail "fp16 all skipped ($face): no clear error: $out"
    printf '%s\n' "$out" | grep -q "^trained" && fail "fp16 all skipped ($face): printed trained: $out"
    [ -e "$TMP/out$face/model.safetensors" ] && fail "fp16 all skipped ($face): a model was saved"
    [ "$(wc -l <"$TMP/a$face.jsonl")" -eq 21 ] || fail "fp16 all skipped ($face): $(wc -l <"$TMP/a$face.jsonl") JSONL lines, want 21"
done
# the limit is configurable: 0 stops at the first overflow at the floor (step 18)
expect_exit 1 "step 18: fp16 overflow with the loss scale at its floor \(min_loss_scale 1\); 18 steps skipped in a row, more than --max_consecutive_skipped_steps 0 allows" -- \
    train --model "$TMP/big" --max_steps 60 --mixed_precision fp16 --max_consecutive_skipped_steps 0
expect_exit 2 "--max_consecutive_skipped_steps" -- train --model "$TMP/big" --max_steps 1 --max_consecutive_skipped_steps -1
# fewer steps than the floor needs: the run ends, and says that none was applied
out=$(train --model "$TMP/big" --max_steps 3 --mixed_precision fp16 2>&1)
rc=$?
[ "$rc" -eq 0 ] || fail "3 skipped steps: exit $rc: $out"
printf '%s\n' "$out" | grep -q "^trained" && fail "3 skipped steps: printed trained: $out"
printf '%s\n' "$out" | grep -q "ran 3 steps, none applied (3 skipped on fp16 overflow)" || fail "3 skipped steps: no count: $out"
# a healthy fp16 run: the first steps overflow at 2^16 as usual, then steps apply
out=$(train --model $fix --max_steps 4 --mixed_precision fp16 2>&1)
rc=$?
[ "$rc" -eq 0 ] || fail "healthy fp16: exit $rc: $out"
printf '%s\n' "$out" | grep -Eq "^trained 4 steps( \([0-9]+ applied, [0-9]+ skipped on fp16 overflow\))? in" || fail "healthy fp16: $out"
finish
