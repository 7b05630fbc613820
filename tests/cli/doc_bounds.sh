# Document boundaries (docs/text.md, "Documents"): records from JSON Lines,
# Parquet, a save_to_disk directory and several files give the stream that the
# `tokenizers` package and TRL's rule give (tests/fixtures/tokenizers/post,
# tools/make_post_processor_fixtures.py): each record's encode(text) with the
# post_processor's special tokens, then eos unless it already ends with it.
# --add_special_tokens false and --eos_between_documents false each take their
# part away; train prints what is added once, and the token cache keys on both
# flags (another setting is another entry, never the old stream).
. "$(dirname "$0")/lib.bash"
export ZTRAIN_CACHE_DIR="$TMP/cache" HF_HOME="$TMP/hf" HF_DATASETS_OFFLINE=1 HF_HUB_OFFLINE=1
venv=${ARROW_VENV:-/usr/local/lib/ztrain/arrow-venv}
apy=$venv/bin/python
fx=tests/fixtures/tokenizers/post
"$apy" -c "import pyarrow, datasets" 2>/dev/null ||
    { fail "$venv lacks pyarrow and datasets: run scripts/setup.sh"; finish; }
# the records as JSON Lines (two files: the first three, the rest), Parquet and save_to_disk
"$apy" - "$TMP" "$fx/llama2_bos/expected.json" <<'PY' || fail "writing the records"
import json, sys
import datasets
d, exp = sys.argv[1], json.load(open(sys.argv[2], encoding="utf-8"))
recs = exp["records"]
for name, part in (("all", recs), ("a", recs[:3]), ("b", recs[3:])):
    with open("%s/%s.jsonl" % (d, name), "w", encoding="utf-8") as f:
        for r in part:
            f.write(json.dumps({"text": r}) + "\n")
ds = datasets.Dataset.from_dict({"text": recs})
ds.to_parquet(d + "/all.parquet")
ds.save_to_disk(d + "/ds", num_shards=2)
PY
# the stream key of expected.json (stream | stream_plain) equals the .npy
check() { # check NAME KEY NPY
    "$apy" - "$fx/$1/expected.json" "$2" "$3" <<'PY' || fail "$1: $3 is not the reference $2"
import json, sys
import numpy as np
exp, key, npy = sys.argv[1:]
assert np.load(npy).tolist() == json.load(open(exp, encoding="utf-8"))[key]
PY
}
for name in llama2_bos llama3_bos gpt2_bos_eos; do
    for input in all.jsonl all.parquet ds; do
        "$ZTRAIN" tokenize --tokenizer "$fx/$name" --input "$TMP/$input" --output "$TMP/$name.npy" \
            2> "$TMP/$name.err" || fail "$name: tokenize $input: $(cat "$TMP/$name.err")"
        check $name stream "$TMP/$name.npy"
    done
    "$ZTRAIN" tokenize --tokenizer "$fx/$name" --input "$TMP/a.jsonl" "$TMP/b.jsonl" --output "$TMP/$name.ab.npy" \
        2>/dev/null || fail "$name: tokenize two files"
    check $name stream "$TMP/$name.ab.npy"
    "$ZTRAIN" tokenize --tokenizer "$fx/$name" --input "$TMP/all.jsonl" --output "$TMP/$name.plain.npy" \
        --add_special_tokens false 2>/dev/null || fail "$name: tokenize --add_special_tokens false"
    check $name stream_plain "$TMP/$name.plain.npy"
done
grep -q '^documents: each is \[0 <ids> 0\]: the post_processor.s special tokens, eos 0 after it unless it already ends with eos$' \
    "$TMP/gpt2_bos_eos.err" || fail "tokenize's line: $(cat "$TMP/gpt2_bos_eos.err")"

# train: the line once at start-up, and the cached stream is the reference's;
# each flag gives an entry of its own
sed 's/"vocab_size": 256/"vocab_size": 1500/' tests/fixtures/gqa_tied/config.json > "$TMP/config.json"
"$ZTRAIN" init-model --model_config "$TMP/config.json" --output_dir "$TMP/init" --seed 5 >/dev/null || fail "init-model"
run() { # run NAME FLAGS...: one step on the llama2_bos records; its cache entry in $TMP/NAME.entry
    local name=$1
    shift
    "$ZTRAIN" train --model "$TMP/init" --data "$TMP/all.jsonl" --tokenizer "$fx/llama2_bos" --block_size 8 \
        --per_device_train_batch_size 1 --max_steps 1 --threads 1 "$@" > "$TMP/$name.out" 2>/dev/null ||
        fail "train $name: $(tail -n 3 "$TMP/$name.out")"
    grep -o "$TMP/cache/[0-9a-f]*\.npy" "$TMP/$name.out" | head -1 > "$TMP/$name.entry"
}
run on
[ "$(grep -c '^documents: ' "$TMP/on.out")" = 1 ] || fail "train: not one documents line: $(cat "$TMP/on.out")"
grep -q '^documents: each is \[1 <ids>\]: the post_processor.s special tokens, eos 2 after it' "$TMP/on.out" ||
    fail "train: the documents line: $(grep documents "$TMP/on.out")"
check llama2_bos stream "$(cat "$TMP/on.entry")"
run plain --add_special_tokens false
check llama2_bos stream_plain "$(cat "$TMP/plain.entry")"
grep -q 'no post_processor tokens (--add_special_tokens false)' "$TMP/plain.out" || fail "train: no --add_special_tokens false line"
run noeos --eos_between_documents false
grep -q 'no eos after it (--eos_between_documents false)' "$TMP/noeos.out" || fail "train: no --eos_between_documents false line"
[ "$(sort -u "$TMP/on.entry" "$TMP/plain.entry" "$TMP/noeos.entry" | wc -l)" = 3 ] ||
    fail "the cache served one entry for different document settings"
# an unsupported post-processor is refused where special tokens are asked for, not otherwise
mkdir -p "$TMP/bert"
"$apy" - "$fx/llama2_bos/tokenizer.json" "$TMP/bert/tokenizer.json" <<'PY'
import json, sys
j = json.load(open(sys.argv[1], encoding="utf-8"))
j["post_processor"] = {"type": "BertProcessing", "sep": ["</s>", 2], "cls": ["<s>", 1]}
json.dump(j, open(sys.argv[2], "w", encoding="utf-8"))
PY
cp "$fx/llama2_bos/tokenizer_config.json" "$TMP/bert/"
expect_exit 2 'post_processor: unsupported post-processor "BertProcessing".*--add_special_tokens false' -- \
    "$ZTRAIN" tokenize --tokenizer "$TMP/bert" --input "$TMP/all.jsonl" --output "$TMP/x.npy"
"$ZTRAIN" tokenize --tokenizer "$TMP/bert" --input "$TMP/all.jsonl" --output "$TMP/x.npy" --add_special_tokens false \
    2>/dev/null || fail "an unsupported post-processor refused with --add_special_tokens false"
finish
