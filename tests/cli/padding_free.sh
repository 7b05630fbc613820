# train --padding_free (TRL's padding_free): positions restart at each document
# inside a window, attention stays inside it (tests/test_packed.c holds the model's
# loss and gradients to transformers running each example alone).  Here: the run
# says so, differs from the run with cross-talk, gives the same losses on 1 rank
# and on 2 (mpirun; the same global batch), and on the emulated device the CPU's;
# refused where it cannot hold.
. "$(dirname "$0")/lib.bash"
export ZTRAIN_CACHE_DIR="$TMP/cache"
# short documents, several to a window of 32
document_run 40 0 1
args=(train --model "$TMP/init" --data "$TMP/d.jsonl" --tokenizer "$tok" --block_size 32 --max_steps 3
      --learning_rate 1e-3 --threads 1 --peak_gflops 1)
"$ZTRAIN" "${args[@]}" --per_device_train_batch_size 2 --padding_free --log_jsonl "$TMP/pf.log" \
    --eval_data "$TMP/d.jsonl" > "$TMP/pf.out" 2>&1 ||
    fail "train --padding_free: $(tail -n 3 "$TMP/pf.out")"
grep -q "^padding-free: positions restart after each eos (id 2)" "$TMP/pf.out" || fail "no padding-free line"
"$ZTRAIN" "${args[@]}" --per_device_train_batch_size 2 --log_jsonl "$TMP/plain.log" --eval_data "$TMP/d.jsonl" \
    > /dev/null 2>&1 ||
    fail "train without --padding_free"
[ -n "$(losses "$TMP/pf.log")" ] && [ "$(losses "$TMP/pf.log")" != "$(losses "$TMP/plain.log")" ] ||
    fail "--padding_free changed nothing"
# --eval_data is read as training reads it: the eos -> next document targets do not count
/usr/bin/python3 - "$TMP/pf.log" "$TMP/plain.log" <<'PY' || fail "--padding_free: the evaluation is not padding-free"
import json, sys
ev = [[json.loads(l) for l in open(f) if '"eval_loss"' in l][-1] for f in sys.argv[1:]]
assert ev[0]["eval_tokens"] < ev[1]["eval_tokens"] and ev[0]["eval_loss"] != ev[1]["eval_loss"], ev
PY
# 2 ranks, one window each: the same global batch, the same losses
"${mpi[@]}" -np 2 "$ZTRAIN" "${args[@]}" --per_device_train_batch_size 1 --padding_free --log_jsonl "$TMP/pf2.log" \
    > "$TMP/pf2.out" 2>&1 || fail "train --padding_free on 2 ranks: $(tail -n 3 "$TMP/pf2.out")"
/usr/bin/python3 - "$TMP/pf.log" "$TMP/pf2.log" <<'PY' || fail "2 ranks: other losses than 1 rank"
import json, sys
a = [json.loads(l)["loss"] for l in open(sys.argv[1]) if '"loss"' in l]
b = [json.loads(l)["loss"] for l in open(sys.argv[2]) if '"loss"' in l]
assert len(a) == len(b) == 3, (a, b)
assert all(abs(x - y) <= 1e-6 * abs(x) for x, y in zip(a, b)), (a, b)
PY
expect_exit 2 '--padding_free needs --tokenizer' -- "$ZTRAIN" train --model tests/fixtures/gqa_tied \
    --data tests/fixtures/gqa_tied/tokens.npy --block_size 16 --max_steps 1 --padding_free
expect_exit 2 '--padding_free with --eos_between_documents false' -- "$ZTRAIN" "${args[@]}" --padding_free \
    --eos_between_documents false
# the emulated device (the host's kernels behind opaque buffers) gives the CPU's numbers;
# its fast table (captured steps) takes no positions and says so
"$ZTRAIN" "${args[@]}" --per_device_train_batch_size 2 --padding_free --device emu --log_jsonl "$TMP/emu.log" \
    > "$TMP/emu.out" 2>&1 || fail "train --padding_free --device emu: $(tail -n 3 "$TMP/emu.out")"
[ "$(losses "$TMP/emu.log")" = "$(losses "$TMP/pf.log")" ] || fail "--device emu: other losses than the CPU's"
expect_exit 2 'emu device.s fast kernels do not take positions' -- "$ZTRAIN" "${args[@]}" --padding_free --device emu \
    --kernels fast
finish
