# train --packing (TRL's packing with strategy bfd): documents bin-packed into the
# windows, positions restart at each, attention stays inside it (tests/test_packed.c
# holds the bins to TRL's pack_dataset and the loss and gradients to transformers
# running each example alone).  Here: the run says so, packs (other losses than
# --padding_free's windows), gives the same losses on 1 rank and on 2 (mpirun; the
# same global batch, shuffled) and on the emulated device; --packing_strategy
# bfd_split packs otherwise and wrapped is the default windows; and it is refused
# where it cannot hold.
. "$(dirname "$0")/lib.bash"
export ZTRAIN_CACHE_DIR="$TMP/cache"
# documents of many lengths, several to a window of 32, some longer (truncated)
document_run 5 7 60
args=(train --model "$TMP/init" --data "$TMP/d.jsonl" --tokenizer "$tok" --block_size 32 --max_steps 3
      --learning_rate 1e-3 --threads 1 --peak_gflops 1 --shuffle true --seed 3)
"$ZTRAIN" "${args[@]}" --per_device_train_batch_size 2 --packing --log_jsonl "$TMP/pk.log" > "$TMP/pk.out" 2>&1 ||
    fail "train --packing: $(tail -n 3 "$TMP/pk.out")"
grep -q "^packing: documents (each ends at eos id 2) are packed best-fit decreasing" "$TMP/pk.out" ||
    fail "no packing line: $(head -n 20 "$TMP/pk.out")"
"$ZTRAIN" "${args[@]}" --per_device_train_batch_size 2 --padding_free --log_jsonl "$TMP/pf.log" > /dev/null 2>&1 ||
    fail "train --padding_free"
[ -n "$(losses "$TMP/pk.log")" ] && [ "$(losses "$TMP/pk.log")" != "$(losses "$TMP/pf.log")" ] ||
    fail "--packing gave --padding_free's windows"
# 2 ranks, one window each: the same global batch, the same losses
"${mpi[@]}" -np 2 "$ZTRAIN" "${args[@]}" --per_device_train_batch_size 1 --packing --log_jsonl "$TMP/pk2.log" \
    > "$TMP/pk2.out" 2>&1 || fail "train --packing on 2 ranks: $(tail -n 3 "$TMP/pk2.out")"
/usr/bin/python3 - "$TMP/pk.log" "$TMP/pk2.log" <<'PY' || fail "2 ranks: other losses than 1 rank"
import json, sys
a = [json.loads(l)["loss"] for l in open(sys.argv[1]) if '"loss"' in l]
b = [json.loads(l)["loss"] for l in open(sys.argv[2]) if '"loss"' in l]
assert len(a) == len(b) == 3, (a, b)
assert all(abs(x - y) <= 1e-6 * abs(x) for x, y in zip(a, b)), (a, b)
PY
# the emulated device's exact kernels give the CPU's numbers
"$ZTRAIN" "${args[@]}" --per_device_train_batch_size 2 --packing --device emu --log_jsonl "$TMP/emu.log" \
    > "$TMP/emu.out" 2>&1 || fail "train --packing --device emu: $(tail -n 3 "$TMP/emu.out")"
[ "$(losses "$TMP/emu.log")" = "$(losses "$TMP/pk.log")" ] || fail "--device emu: other losses than the CPU's"
# --packing_strategy: bfd_split cuts the documents longer than the window (some are
# here) where bfd truncates them; wrapped is ztrain's default windows
"$ZTRAIN" "${args[@]}" --per_device_train_batch_size 2 --packing --packing_strategy bfd_split \
    --log_jsonl "$TMP/split.log" > "$TMP/split.out" 2>&1 || fail "--packing_strategy bfd_split: $(tail -n 3 "$TMP/split.out")"
grep -q "(bfd_split: a longer one cut into pieces)" "$TMP/split.out" || fail "no bfd_split line"
[ -n "$(losses "$TMP/split.log")" ] && [ "$(losses "$TMP/split.log")" != "$(losses "$TMP/pk.log")" ] ||
    fail "bfd_split packed as bfd does"
"$ZTRAIN" "${args[@]}" --per_device_train_batch_size 2 --packing --packing_strategy wrapped \
    --log_jsonl "$TMP/wr.log" > "$TMP/wr.out" 2>&1 || fail "--packing_strategy wrapped: $(tail -n 3 "$TMP/wr.out")"
"$ZTRAIN" "${args[@]}" --per_device_train_batch_size 2 --log_jsonl "$TMP/plain.log" > /dev/null 2>&1 ||
    fail "train without --packing"
[ -n "$(losses "$TMP/wr.log")" ] && [ "$(losses "$TMP/wr.log")" = "$(losses "$TMP/plain.log")" ] ||
    fail "wrapped is not the default windows"
# refusals, by name
expect_exit 2 '--packing_strategy: unknown "first_fit" \(expected bfd, bfd_split or wrapped\)' -- "$ZTRAIN" \
    "${args[@]}" --packing --packing_strategy first_fit
expect_exit 2 '--packing_strategy bfd: packing is off; add --packing true' -- "$ZTRAIN" "${args[@]}" \
    --packing_strategy bfd
expect_exit 2 '--packing needs --tokenizer' -- "$ZTRAIN" train --model tests/fixtures/gqa_tied \
    --data tests/fixtures/gqa_tied/tokens.npy --block_size 16 --max_steps 1 --packing
expect_exit 2 '--packing with --eos_between_documents false' -- "$ZTRAIN" "${args[@]}" --packing \
    --eos_between_documents false
expect_exit 2 '--packing with --eval_data: the evaluation does not pack' -- "$ZTRAIN" "${args[@]}" --packing \
    --eval_data "$TMP/d.jsonl"
expect_exit 2 '--packing: .*emu device.s fast kernels do not take positions' -- "$ZTRAIN" "${args[@]}" --packing \
    --device emu --kernels fast
expect_exit 2 '--packing: .*bf16-activation attention' -- "$ZTRAIN" "${args[@]}" --packing --bf16 --activations bf16
finish
