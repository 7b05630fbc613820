# Shuffling is on by default, seeded, as Trainer's RandomSampler is (issue 45,
# point 5; docs/contract.md §4): a run without --shuffle reads the same windows,
# step for step, as --shuffle true with the default seed 42, and not the in-order
# windows of --shuffle false; another --seed gives another order.  The order is
# seen through the per-step losses: the same model and windows give the same
# losses bit for bit, other windows other losses.
. "$(dirname "$0")/lib.bash"
m=tests/fixtures/gqa_tied
# run NAME FLAGS...: three steps, their losses in $TMP/NAME.jsonl
run() {
    local name=$1
    shift
    "$ZTRAIN" train --model "$m" --data "$m/tokens.npy" --block_size 16 --per_device_train_batch_size 2 \
        --max_steps 3 --learning_rate 1e-3 --threads 1 --progress false --output_dir "$TMP/$name" \
        --log_jsonl "$TMP/$name.jsonl" "$@" > "$TMP/$name.out" 2>&1 || fail "$name: $(tail -3 "$TMP/$name.out")"
}
losses() { grep -o '"loss": [^,}]*' "$TMP/$1.jsonl" 2>/dev/null | tr '\n' ' '; }
run default
run shuffled --shuffle true --seed 42
run inorder --shuffle false
run seed7 --seed 7
default=$(losses default)
[ "$(wc -w <<< "$default")" -eq 6 ] || fail "expected 3 losses, got: $default"
[ "$default" = "$(losses shuffled)" ] || fail "the default is not --shuffle true --seed 42: $default vs $(losses shuffled)"
[ "$default" != "$(losses inorder)" ] || fail "the default reads the windows in order (as --shuffle false): $default"
[ "$default" != "$(losses seed7)" ] || fail "--seed 7 gives the same order as the default seed: $default"
"$ZTRAIN" train --help | grep -- '--shuffle ' | grep -q 'default true' || fail "train --help does not say shuffling is on by default"
finish
