# train and eval on text with --tokenizer: the text is tokenized once into the
# cache (keyed by the content hash of text and tokenizer), a second run reads
# the cache, and the run equals one on the same ids given as .npy (contract §4's
# data order applies to the tokenized stream, shuffled here).  A tokenizer
# larger than the model's vocab_size, or --tokenizer with .npy data, exits 2.
. "$(dirname "$0")/lib.bash"
export ZTRAIN_CACHE_DIR="$TMP/cache"
for i in $(seq 8); do cat tests/fixtures/text/multilingual.txt; done > "$TMP/text.txt"
"$ZTRAIN" tokenizer train --input "$TMP/text.txt" --vocab_size 300 --output_dir "$TMP/tok" >/dev/null || fail "tokenizer train"
sed 's/"vocab_size": 256/"vocab_size": 320/' tests/fixtures/gqa_tied/config.json > "$TMP/config.json"
"$ZTRAIN" init-model --model_config "$TMP/config.json" --output_dir "$TMP/init" --seed 5 >/dev/null || fail "init-model"
args=(--model "$TMP/init" --block_size 16 --per_device_train_batch_size 2 --max_steps 3 --learning_rate 1e-3
      --shuffle --seed 7 --threads 1)
# metrics that do not depend on timing
metrics() { sed -E 's/"(tokens_per_sec_per_device|step_time_s|mfu|comm_[a-z_]*|peak[a-z_]*|mem[a-z_]*)": [^,}]*,? ?//g' "$1"; }

out=$("$ZTRAIN" train "${args[@]}" --data "$TMP/text.txt" --tokenizer "$TMP/tok" --log_jsonl "$TMP/text.jsonl" \
    --output_dir "$TMP/o1") || fail "train on text: $out"
printf '%s' "$out" | grep -q "tokenized with $TMP/tok (300 tokens in the vocabulary): $TMP/cache/" ||
    fail "no tokenization line: $out"
[ "$(ls "$TMP/cache" | grep -c "\.npy$")" -eq 1 ] || fail "expected one cache entry"
entry=$(ls "$TMP/cache" | grep "\.npy$")
"$ZTRAIN" tokenize --tokenizer "$TMP/tok" --input "$TMP/text.txt" --output "$TMP/ids.npy" 2>/dev/null || fail "tokenize"
cmp -s "$TMP/ids.npy" "$TMP/cache/$entry" || fail "cache entry differs from ztrain tokenize's ids"
"$ZTRAIN" train "${args[@]}" --data "$TMP/ids.npy" --log_jsonl "$TMP/ids.jsonl" --output_dir "$TMP/o2" >/dev/null ||
    fail "train on ids"
[ "$(metrics "$TMP/text.jsonl")" = "$(metrics "$TMP/ids.jsonl")" ] && [ -s "$TMP/ids.jsonl" ] ||
    fail "training on text differs from training on its ids: $(metrics "$TMP/text.jsonl") vs $(metrics "$TMP/ids.jsonl")"

# second run: from the cache, which is not rewritten
touch -d '2001-01-01' "$TMP/cache/$entry"
out=$("$ZTRAIN" train "${args[@]}" --data "$TMP/text.txt" --tokenizer "$TMP/tok" --output_dir "$TMP/o3") ||
    fail "second train: $out"
printf '%s' "$out" | grep -q "from the cache" || fail "second run did not use the cache: $out"
[ "$(stat -c %Y "$TMP/cache/$entry")" = "$(date -d 2001-01-01 +%s)" ] || fail "cache entry rewritten"
# changed text: a new key
printf 'one more line\n' >> "$TMP/text.txt"
"$ZTRAIN" train "${args[@]}" --data "$TMP/text.txt" --tokenizer "$TMP/tok" --output_dir "$TMP/o4" >/dev/null || fail "train 3"
[ "$(ls "$TMP/cache" | grep -c "\.npy$")" -eq 2 ] || fail "changed text did not get a new cache entry"

# eval on text equals eval on its ids
e1=$("$ZTRAIN" eval --model "$TMP/o1" --data "$TMP/text.txt" --tokenizer "$TMP/tok" --block_size 16 --threads 1 | tail -1)
"$ZTRAIN" tokenize --tokenizer "$TMP/tok" --input "$TMP/text.txt" --output "$TMP/ids2.npy" 2>/dev/null
e2=$("$ZTRAIN" eval --model "$TMP/o1" --data "$TMP/ids2.npy" --block_size 16 --threads 1 | tail -1)
[ -n "$e1" ] && [ "$e1" = "$e2" ] || fail "eval on text '$e1' differs from eval on ids '$e2'"

# two ranks: rank 0 fills a fresh cache, rank 1 reads it
mpi+=(-x ZTRAIN_CACHE_DIR)
ZTRAIN_CACHE_DIR="$TMP/cache2" "${mpi[@]}" -np 2 "$ZTRAIN" train "${args[@]}" --data "$TMP/text.txt" --tokenizer "$TMP/tok" --output_dir "$TMP/o5" >/dev/null 2>&1 ||
    fail "two ranks on text"
[ "$(ls "$TMP/cache2" | grep -c "\.npy$")" -eq 1 ] || fail "two ranks: expected one cache entry"

# refusals
"$ZTRAIN" init-model --model_config tests/fixtures/gqa_tied/config.json --output_dir "$TMP/small" >/dev/null
expect_exit 2 'vocabulary has 300 tokens, more than the model.s vocab_size 256' -- \
    "$ZTRAIN" train --model "$TMP/small" --data "$TMP/text.txt" --tokenizer "$TMP/tok" --max_steps 1 --block_size 16 --threads 1
expect_exit 2 'vocabulary has 300 tokens, more than the model.s vocab_size 256' -- \
    "$ZTRAIN" eval --model "$TMP/small" --data "$TMP/text.txt" --tokenizer "$TMP/tok" --block_size 16
expect_exit 2 'must be a .txt file' -- "$ZTRAIN" eval --model "$TMP/o1" --data "$TMP/ids.npy" --tokenizer "$TMP/tok" --block_size 16
expect_exit 2 'tokenizer.json: cannot open' -- "$ZTRAIN" eval --model "$TMP/o1" --data "$TMP/text.txt" --tokenizer "$TMP/none" --block_size 16
finish
