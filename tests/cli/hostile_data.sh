# The last hostile data inputs (issue 44, points 7 and 8): a JSON Lines record
# with a key twice (pyarrow refuses it, Python's json takes the last, cJSON the
# first) is refused naming the file, the line and the key, nested objects
# included; invalid UTF-8 in a Parquet column is refused naming the file, the
# column and the row; a table too short for --block_size is reported under the
# --data the user gave, not the token cache it became.
. "$(dirname "$0")/lib.bash"
export ZTRAIN_CACHE_DIR="$TMP/cache"
tok=tests/fixtures/tokenizers/ztrain_trained
apy=/usr/local/lib/ztrain/arrow-venv/bin/python
tokenize() { "$ZTRAIN" tokenize --tokenizer $tok --output "$TMP/x.npy" --input "$@"; }

printf '{"text": "fine"}\n{"text": "first", "text": "second"}\n' > "$TMP/dup.jsonl"
expect_exit 2 'dup.jsonl: line 2: duplicate key "text"' -- tokenize "$TMP/dup.jsonl"
printf '\n{"text": "a", "meta": {"k": 1, "z": [{"q": 1, "q": 2}]}}\n' > "$TMP/nested.jsonl"
expect_exit 2 'nested.jsonl: line 2: duplicate key "q"' -- tokenize "$TMP/nested.jsonl"
printf '{"prompt": "p", "completion": "c", "prompt": "q"}\n' > "$TMP/sft.jsonl"
sed 's/"vocab_size": 256/"vocab_size": 400/' tests/fixtures/gqa_tied/config.json > "$TMP/config.json"
"$ZTRAIN" init-model --model_config "$TMP/config.json" --output_dir "$TMP/init" >/dev/null || fail "init-model"
train() { "$ZTRAIN" train --model "$TMP/init" --tokenizer $tok --block_size 16 --per_device_train_batch_size 1 \
          --max_steps 1 --threads 1 --data "$@"; }
expect_exit 2 'sft.jsonl: line 1: duplicate key "prompt"' -- train "$TMP/sft.jsonl"
# distinct keys that differ only in case are two keys
printf '{"text": "a b c", "Text": "x"}\n' > "$TMP/case.jsonl"
tokenize "$TMP/case.jsonl" > /dev/null 2>&1 || fail "keys differing in case refused"

HF_DATASETS_DISABLE_PROGRESS_BARS=1 $apy - "$TMP" <<'PY' || fail "writing the Parquet and Arrow files"
import sys, pyarrow as pa, pyarrow.parquet as pq
d = sys.argv[1]
data = b"good textbad \xff text"
offsets = pa.array([0, 9, 19], pa.int32()).buffers()[1]
bad = pa.Array.from_buffers(pa.string(), 2, [None, offsets, pa.py_buffer(data)])
pq.write_table(pa.table({"id": [1, 2], "text": bad}), d + "/bad_utf8.parquet")
pq.write_table(pa.table({"text": ["hi"]}), d + "/short.parquet")
import datasets
for name in ("ds", "ds_state"):
    datasets.Dataset.from_dict({"text": ["one text", "and another"]}).save_to_disk(d + "/" + name)
PY
expect_exit 2 'bad_utf8.parquet: column "text", row 1: byte offset 4 is not valid UTF-8 \(byte 0xFF\)' -- \
    tokenize "$TMP/bad_utf8.parquet"
expect_exit 2 "^ztrain: error: $TMP/short.parquet: [0-9]+ tokens? is too short for --block_size 16" -- \
    train "$TMP/short.parquet"
# a save_to_disk directory is read from its own files (point 14): a data file or
# state.json that is a symlink out of it is refused, as a "../" name is; a
# symlink that stays inside is read
tokenize "$TMP/ds" > /dev/null 2>&1 || fail "a sound save_to_disk directory refused"
f=$(cd "$TMP/ds" && ls data-*.arrow)
mv "$TMP/ds/$f" "$TMP/outside.arrow" && ln -s ../outside.arrow "$TMP/ds/$f"
expect_exit 2 "ds/$f: a symlink out of the save_to_disk directory" -- tokenize "$TMP/ds"
mkdir "$TMP/ds/sub" && mv "$TMP/outside.arrow" "$TMP/ds/sub/x.arrow" && ln -sf sub/x.arrow "$TMP/ds/$f"
tokenize "$TMP/ds" > /dev/null 2>&1 || fail "a symlink inside the save_to_disk directory refused"
mv "$TMP/ds_state/state.json" "$TMP/state.json" && ln -s ../state.json "$TMP/ds_state/state.json"
expect_exit 2 "ds_state/state.json: a symlink out of the save_to_disk directory" -- tokenize "$TMP/ds_state"
finish
