# Sizes are checked before anything is allocated (issue 17 point 4): absurd
# config.json sizes and batches are refused with exit 2 at once, stating the
# estimate (or its lower bound) and the limit (--max_memory, else the machine's
# available memory); a safetensors header over a sane bound relative to the file
# is refused unparsed.
. "$(dirname "$0")/lib.bash"
fix=tests/fixtures/gqa_tied
data=$fix/tokens.npy
train() { "$ZTRAIN" train --threads 1 --block_size 16 --per_device_train_batch_size 2 --max_steps 1 --data $data "$@"; }

# quick KEY VALUE: a copy of the fixture with one config.json size changed; the
# refusal must come within 5 s (the old behaviour allocated for tens of seconds)
quick() {
    rm -rf "$TMP/m"; mkdir -p "$TMP/m"; cp $fix/config.json $fix/model.safetensors "$TMP/m/"
    sed -i "s/\"$1\": [0-9]*/\"$1\": $2/" "$TMP/m/config.json"
    grep -q "\"$1\": $2" "$TMP/m/config.json" || fail "could not set $1"
}
check_fast() {
    local t0=$SECONDS
    expect_exit "$@"
    [ $((SECONDS - t0)) -le 5 ] || fail "took $((SECONDS - t0)) s: $*"
}
limit="more than the [0-9.]+ GB limit \(MemAvailable [0-9.]+ GB shared by 1 rank on this machine; --max_memory overrides\); refused before allocating"
quick hidden_size 1000000000
check_fast 2 "the run needs at least [0-9.]+ [GT]B per rank \(lower bound\), $limit" -- train --model "$TMP/m"
quick vocab_size 2000000000
check_fast 2 "the run needs at least [0-9.]+ [GT]B per rank" -- train --model "$TMP/m"
quick num_hidden_layers 1000000000
check_fast 2 "the run needs at least [0-9.]+ [GT]B per rank" -- train --model "$TMP/m"
quick num_hidden_layers 20000000
check_fast 2 "the run needs at least [0-9.]+ [GT]B per rank" -- train --model "$TMP/m"
# eval reads the same config.json: refused alike
check_fast 2 "the run needs at least [0-9.]+ [GT]B per rank" -- "$ZTRAIN" eval --model "$TMP/m" --data $data --block_size 16
# and generate (issue 33: it was exit 1 "out of memory" after trying to allocate)
check_fast 2 "the run needs at least [0-9.]+ [GT]B per rank .*refused before allocating" -- \
    "$ZTRAIN" generate --model "$TMP/m" --prompt hi --max_new_tokens 2
# the batch: a million sequences of 16 tokens need 16 GB of logits alone
check_fast 2 "the run needs at least 16.[0-9]+ GB per rank \(lower bound\), more than the 1.00 GB limit \(--max_memory\)" -- \
    train --model $fix --per_device_train_batch_size 1000000 --max_memory 1GB
# the exact estimate against a small limit; the same run fits a larger one
check_fast 2 "the run needs an estimated [0-9.]+ MB per rank \(estimate\), more than the 1.00 MB limit \(--max_memory\)" -- \
    train --model $fix --max_memory 1MB
train --model $fix --max_memory 1GB > /dev/null || fail "a run that fits 1 GB was refused"
check_fast 2 "the run needs at least [0-9.]+ KB per rank \(lower bound\), more than the 1.00 KB limit \(--max_memory\)" -- \
    "$ZTRAIN" generate --model $fix --prompt hi --max_new_tokens 2 --max_memory 1KB
"$ZTRAIN" generate --model $fix --prompt hi --max_new_tokens 2 --max_memory 1GB > /dev/null 2>&1 ||
    fail "a generation that fits 1 GB was refused"
expect_exit 2 "--max_memory: expected a size" -- train --model $fix --max_memory lots

# a 99.9 MB safetensors header over a file with no tensor data: refused unparsed
rm -rf "$TMP/m"; mkdir -p "$TMP/m"; cp $fix/config.json "$TMP/m/"
/usr/bin/python3 -c 'import struct,sys; f=open(sys.argv[1],"wb"); n=99900000; f.write(struct.pack("<Q",n)); f.write(b"{"); f.truncate(8+n)' "$TMP/m/model.safetensors"
check_fast 2 "$TMP/m/model.safetensors: header length 99900000 is over 8000000 bytes and larger than the 0 bytes of tensor data it describes.*refused unparsed" -- \
    train --model "$TMP/m"
finish
