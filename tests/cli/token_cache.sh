# The token cache is checked when read (issue 44, point 12): an entry records the
# SHA-256 of its files beside them, and one that no longer matches (overwritten
# with other ids of the same length, truncated, or without its digest) is
# tokenized again with a note, never trained on: the run equals the first one.
. "$(dirname "$0")/lib.bash"
export ZTRAIN_CACHE_DIR="$TMP/cache"
tok=tests/fixtures/tokenizers/ztrain_trained
sed 's/"vocab_size": 256/"vocab_size": 400/' tests/fixtures/gqa_tied/config.json > "$TMP/config.json"
"$ZTRAIN" init-model --model_config "$TMP/config.json" --output_dir "$TMP/init" --seed 5 >/dev/null || fail "init-model"
for i in 1 2 3; do cat tests/fixtures/text/multilingual.txt; done > "$TMP/text.txt"
run() { # run NAME: train 2 steps; the losses in $TMP/NAME.loss, stderr in $TMP/NAME.err
    "$ZTRAIN" train --model "$TMP/init" --tokenizer $tok --data "$TMP/text.txt" --block_size 16 \
        --per_device_train_batch_size 1 --max_steps 2 --threads 1 --logging_steps 1 --log_jsonl "$TMP/$1.jsonl" \
        > "$TMP/$1.out" 2> "$TMP/$1.err" || fail "$1: $(tail -2 "$TMP/$1.err")"
    python3 -c 'import json,sys; print([json.loads(l)["loss"] for l in open(sys.argv[1]) if "loss" in l])' \
        "$TMP/$1.jsonl" > "$TMP/$1.loss"
}
run first
entry=$(ls "$TMP"/cache/*.npy)
[ -f "$entry.sha256" ] || fail "no digest beside the entry: $(ls "$TMP/cache")"
run hit
grep -q "from the cache" "$TMP/hit.out" || fail "the second run did not use the cache"
grep -q "note:" "$TMP/hit.err" && fail "a sound entry was rebuilt: $(cat "$TMP/hit.err")"
# damage CASE COMMAND: damage the entry, then the run rebuilds it with a note and equals the first
damage() {
    local name=$1
    shift
    "$@"
    run "$name"
    grep -q "note: the token cache entry $entry does not match its digest" "$TMP/$name.err" ||
        fail "$name: no note: $(cat "$TMP/$name.err")"
    cmp -s "$TMP/first.loss" "$TMP/$name.loss" || fail "$name: trained on the damaged entry: $(cat "$TMP/$name.loss")"
}
same_length() {
    python3 - "$entry" <<'PY'
import sys
b = bytearray(open(sys.argv[1], "rb").read())
for i in range(len(b) - 400, len(b), 4):
    b[i:i + 4] = (7).to_bytes(4, "little")
open(sys.argv[1], "wb").write(b)
PY
}
damage overwritten same_length
damage truncated truncate -s -400 "$entry"
damage nodigest rm "$entry.sha256"
finish
