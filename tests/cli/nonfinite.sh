# Non-finite numbers are named, never trained on silently (issue 17 point 2):
# an inf or NaN weight is refused at load (exit 2, tensor and index); a run whose
# loss or gradient goes non-finite outside fp16 loss scaling stops naming the
# step and the first unit (exit 1), or skips at most --skip_nonfinite_steps N in
# a row; eval never prints a nan loss with exit 0; every JSONL line is strict
# JSON, with null and a "nonfinite" flag for the values JSON cannot hold.
. "$(dirname "$0")/lib.bash"
fix=tests/fixtures/gqa_tied
data=$fix/tokens.npy
train() { "$ZTRAIN" train --threads 1 --block_size 16 --per_device_train_batch_size 2 --data $data "$@"; }

# poison DIR TENSOR INDEX VALUE: a copy of the fixture with one F32 value replaced
# (VALUE "all=X" sets every element of the tensor)
poison() {
    mkdir -p "$1"; cp $fix/config.json "$1/"
    /usr/bin/python3 - "$fix/model.safetensors" "$1/model.safetensors" "$2" "$3" "$4" <<'PY'
import json, struct, sys
src, dst, name, index, value = sys.argv[1:]
b = bytearray(open(src, 'rb').read())
n = struct.unpack('<Q', b[:8])[0]
t = json.loads(b[8:8 + n])[name]
assert t['dtype'] == 'F32'
s, e = (8 + n + o for o in t['data_offsets'])
idx = range(s, e, 4) if value.startswith('all=') else [s + 4 * int(index)]
for o in idx:
    b[o:o + 4] = struct.pack('<f', float(value.removeprefix('all=')))
open(dst, 'wb').write(b)
PY
}

# non-finite weights at load, for train and eval
poison "$TMP/nan" model.layers.1.mlp.down_proj.weight 200 nan   # shape [64, 172]: [1, 28]
expect_exit 2 "$TMP/nan/model.safetensors: tensor model.layers.1.mlp.down_proj.weight holds a non-finite value \(nan\) at index \[1, 28\] \(flat 200\)" -- \
    train --model "$TMP/nan" --max_steps 1
expect_exit 2 "tensor model.layers.1.mlp.down_proj.weight holds a non-finite value \(nan\) at index \[1, 28\]" -- \
    "$ZTRAIN" eval --model "$TMP/nan" --data $data --block_size 16
poison "$TMP/inf" model.norm.weight 5 -inf
expect_exit 2 "tensor model.norm.weight holds a non-finite value \(inf\) at index \[5\]" -- train --model "$TMP/inf" --max_steps 1

# finite weights so large that the forward overflows: the loss and gradient are NaN
poison "$TMP/big" model.layers.0.input_layernorm.weight 0 all=3e38
expect_exit 1 "step 1: an inf or NaN in the gradient, first \(in model order\) in unit 0 \(embeddings, final norm, lm_head\) \(loss nan\); stopping" -- \
    train --model "$TMP/big" --max_steps 4 --output_dir "$TMP/out1" --log_jsonl "$TMP/a.jsonl"
[ -e "$TMP/out1/model.safetensors" ] && fail "a stopped run saved a model"
# skipping: at most 2 in a row, then it stops at step 3
out=$(train --model "$TMP/big" --max_steps 4 --skip_nonfinite_steps 2 --log_jsonl "$TMP/b.jsonl" 2>&1 >/dev/null)
rc=$?
[ "$rc" -eq 1 ] || fail "skip 2: exit $rc"
printf '%s\n' "$out" | grep -q "step 2: an inf or NaN .* step skipped (2 in a row, at most 2 by --skip_nonfinite_steps)" ||
    fail "skip 2: no warning for step 2: $out"
printf '%s\n' "$out" | grep -q "step 3: .*3 steps in a row, more than --skip_nonfinite_steps 2 allows" ||
    fail "skip 2: no stop at step 3: $out"
# the stop message lists what the run did save (issue 44, point 10), not "nothing"
out=$(train --model "$TMP/big" --max_steps 4 --skip_nonfinite_steps 2 --save_steps 1 --output_dir "$TMP/out2" 2>&1)
printf '%s\n' "$out" | grep -q "stopping (this run saved 2 checkpoints, checkpoint-1 to checkpoint-2 in $TMP/out2 (the newest: $TMP/out2/checkpoint-2))" ||
    fail "the stop message does not list the saved checkpoints: $out"
[ -d "$TMP/out2/checkpoint-2" ] || fail "checkpoint-2 was not saved"
# the JSONL: strict JSON (NaN/Infinity refused), null plus the flag for the bad values
/usr/bin/python3 - "$TMP/a.jsonl" "$TMP/b.jsonl" <<'PY' || fail "JSONL check"
import json, sys
def strict(c): raise ValueError('non-JSON constant ' + c)
for path, want in zip(sys.argv[1:], (1, 3)):
    rows = [json.loads(l, parse_constant=strict) for l in open(path)]
    assert len(rows) == want, (path, len(rows))
    for r in rows:
        assert r['loss'] is None and r['grad_norm'] is None, r
        assert r['nonfinite'] == {'loss': 'nan', 'grad_norm': 'nan'}, r
        assert r['skipped'] == 1, r
PY
# a healthy run's JSONL has no flag and numbers everywhere
train --model $fix --max_steps 2 --log_jsonl "$TMP/c.jsonl" > /dev/null || fail "healthy run failed"
/usr/bin/python3 -c '
import json, sys
def strict(c): raise ValueError(c)
for l in open(sys.argv[1]):
    r = json.loads(l, parse_constant=strict)
    assert "nonfinite" not in r and isinstance(r["loss"], float) and isinstance(r["grad_norm"], float), r
' "$TMP/c.jsonl" || fail "healthy JSONL"

# on two ranks (FSDP full shard): every rank stops, rank 0 names the step once
out=$(timeout 120 "${mpi[@]}" -np 2 "$ZTRAIN" train --threads 1 --block_size 16 --per_device_train_batch_size 1 \
      --data $data --model "$TMP/big" --max_steps 3 --use_fsdp 2>&1 >/dev/null)
rc=$?
[ "$rc" -ne 0 ] || fail "2 ranks: exit 0"
[ "$(printf '%s\n' "$out" | grep -c "step 1: an inf or NaN in the gradient")" -eq 1 ] ||
    fail "2 ranks: want one message from rank 0: $out"

# eval on the overflowing model: no nan with exit 0
expect_exit 1 "the mean loss over [0-9]+ tokens of .* is nan: the forward overflowed .*no loss or perplexity" -- \
    "$ZTRAIN" eval --model "$TMP/big" --data $data --block_size 16
finish
