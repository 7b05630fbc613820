# Tables as data (contract §5, docs/text.md): Parquet files written by pyarrow
# (pq.write_table) and the Arrow files datasets.Dataset.save_to_disk writes (its
# directory, and one of its .arrow files) give exactly the ids of the same texts
# given as .txt and .jsonl (tokenize, train --data, --eval_data, eval), the
# prompt/completion columns give the same SFT run as the same JSON Lines records,
# and a missing or non-string column, a null, a broken file are refused (exit 2)
# by file and column.  pyarrow and datasets come from the virtual environment
# scripts/setup.sh makes (ARROW_VENV); without it, or with a ztrain built
# without Arrow's libraries, this test fails: it is a dependency, not an option.
. "$(dirname "$0")/lib.bash"
export ZTRAIN_CACHE_DIR="$TMP/cache" HF_HOME="$TMP/hf" HF_DATASETS_OFFLINE=1 HF_HUB_OFFLINE=1
venv=${ARROW_VENV:-/usr/local/lib/ztrain/arrow-venv}
apy=$venv/bin/python
py=/usr/bin/python3
tok=tests/fixtures/tokenizers/ztrain_trained # 400 tokens
"$apy" -c "import pyarrow, datasets" 2>/dev/null ||
    { fail "$venv lacks pyarrow and datasets: run scripts/setup.sh"; finish; }
"$ZTRAIN" env --measure false 2>/dev/null | grep -q "^table data:    Parquet and Arrow" ||
    { fail "this ztrain was built without Apache Arrow's libraries (scripts/setup.sh, then make)"; finish; }
# the fixture's lines as records in every format: r*.txt, d.jsonl, d.parquet (row
# groups of 7 rows, so a file is read group by group), large.parquet (large_string),
# the save_to_disk directory ds/ in 3 shards; SFT records as sft.jsonl, sft.parquet, sft_ds/;
# and the broken tables
"$apy" - "$TMP" <<'PY' || fail "writing the tables"
import json, sys
import pyarrow as pa, pyarrow.parquet as pq, datasets
d = sys.argv[1]
lines = open("tests/fixtures/text/multilingual.txt", encoding="utf-8").read().splitlines(keepends=True)
texts = [l for l in lines if l.strip()] * 3
texts.append('quotes " and \\ backslash\ttab and a {"json": [1, 2]} inside')
for i, t in enumerate(texts):
    open("%s/r%03d.txt" % (d, i), "w", encoding="utf-8").write(t)
with open(d + "/d.jsonl", "w") as f:
    for t in texts:
        f.write(json.dumps({"text": t}) + "\n")
ids = list(range(len(texts)))
pq.write_table(pa.table({"id": ids, "text": texts}), d + "/d.parquet", row_group_size=7)
pq.write_table(pa.table({"content": pa.array(texts, pa.large_string())}), d + "/large.parquet")
datasets.Dataset.from_dict({"id": ids, "text": texts}).save_to_disk(d + "/ds", num_shards=3)
cut = [len(t) // 3 for t in texts]
sft = {"prompt": [t[:c] for t, c in zip(texts, cut)], "completion": [t[c:] for t, c in zip(texts, cut)]}
with open(d + "/sft.jsonl", "w") as f:
    for p, c in zip(sft["prompt"], sft["completion"]):
        f.write(json.dumps({"prompt": p, "completion": c}) + "\n")
pq.write_table(pa.table(sft), d + "/sft.parquet", row_group_size=10)
datasets.Dataset.from_dict(sft).save_to_disk(d + "/sft_ds")
# refusals
pq.write_table(pa.table({"text": [1, 2]}), d + "/ints.parquet")
pq.write_table(pa.table({"text": ["a", None, "c"]}), d + "/nulls.parquet")
datasets.Dataset.from_dict({"text": ["a", "b", None]}).save_to_disk(d + "/nulls_ds")
raw = open(d + "/d.parquet", "rb").read()
open(d + "/cut.parquet", "wb").write(raw[: len(raw) // 2])
open(d + "/junk.arrow", "wb").write(b"not an arrow stream at all" * 4)
datasets.DatasetDict({"train": datasets.Dataset.from_dict({"text": texts})}).save_to_disk(d + "/dict")
PY
shards=$(ls "$TMP"/ds/data-*.arrow | wc -l)
[ "$shards" -eq 3 ] || fail "save_to_disk wrote $shards data files, not 3"
records=("$TMP"/r*.txt)
"$ZTRAIN" tokenize --tokenizer "$tok" --input "${records[@]}" --output "$TMP/txt.npy" 2>/dev/null || fail "tokenize .txt"
"$ZTRAIN" tokenize --tokenizer "$tok" --input "$TMP/d.jsonl" --output "$TMP/jsonl.npy" 2>/dev/null ||
    fail "tokenize .jsonl"
cmp -s "$TMP/txt.npy" "$TMP/jsonl.npy" || fail "the .jsonl ids differ from the .txt ids"
same_ids() { # same_ids NAME ARGS...: tokenize ARGS gives txt.npy's ids
    local name=$1
    shift
    "$ZTRAIN" tokenize --tokenizer "$tok" "$@" --output "$TMP/$name.npy" > "$TMP/$name.tok.out" 2>&1 ||
        { fail "tokenize $name: $(cat "$TMP/$name.tok.out")"; return; }
    cmp -s "$TMP/txt.npy" "$TMP/$name.npy" || fail "tokenize $name: other ids than the same texts as .txt"
}
same_ids parquet --input "$TMP/d.parquet"
same_ids large --input "$TMP/large.parquet" --text_field content
same_ids ds --input "$TMP/ds"
# one .arrow file of the directory is its rows alone; the three in order are all of them
same_ids shards --input "$TMP"/ds/data-00000-of-00003.arrow "$TMP"/ds/data-00001-of-00003.arrow \
    "$TMP"/ds/data-00002-of-00003.arrow
"$ZTRAIN" tokenize --tokenizer "$tok" --input "$TMP/d.parquet" --output "$TMP/eos_pq.npy" --append_eos 2>/dev/null &&
    "$ZTRAIN" tokenize --tokenizer "$tok" --input "${records[@]}" --output "$TMP/eos_txt.npy" --append_eos \
    2>/dev/null && cmp -s "$TMP/eos_pq.npy" "$TMP/eos_txt.npy" || fail "--append_eos: not one eos a row"

# train and eval: each table is the same run as the ids of the same texts
sed 's/"vocab_size": 256/"vocab_size": 400/' tests/fixtures/gqa_tied/config.json > "$TMP/config.json"
"$ZTRAIN" init-model --model_config "$TMP/config.json" --output_dir "$TMP/init" --seed 5 >/dev/null || fail "init-model"
args=(--model "$TMP/init" --block_size 16 --per_device_train_batch_size 2 --max_steps 3 --learning_rate 1e-3
      --shuffle --seed 7 --threads 1)
# the losses, gradient norms, learning rates and evaluations of a run's log
metrics() { grep -o '"\(step\|loss\|grad_norm\|lr\|eval_loss\|eval_tokens\)": [^,}]*' "$1"; }
same_run() { # same_run NAME REF ARGS...: the run's log equals REF's
    local name=$1 ref=$2
    shift 2
    "$ZTRAIN" train "${args[@]}" "$@" --log_jsonl "$TMP/$name.log" > "$TMP/$name.out" 2>&1 ||
        { fail "train $name: $(tail -3 "$TMP/$name.out")"; return; }
    [ -s "$TMP/$name.log" ] && [ "$(metrics "$TMP/$name.log")" = "$(metrics "$TMP/$ref.log")" ] ||
        fail "train $name differs from the run on $ref"
}
"$ZTRAIN" train "${args[@]}" --data "$TMP/txt.npy" --eval_data "$TMP/txt.npy" --log_jsonl "$TMP/ref.log" \
    > /dev/null || fail "train on ids"
same_run jsonl ref --data "$TMP/d.jsonl" --eval_data "$TMP/d.jsonl" --tokenizer "$tok"
same_run parquet ref --data "$TMP/d.parquet" --eval_data "$TMP/d.parquet" --tokenizer "$tok"
same_run ds ref --data "$TMP/ds" --eval_data "$TMP/ds" --tokenizer "$tok"
grep -q '"eval_loss"' "$TMP/ds.log" || fail "no evaluation of a table --eval_data"
same_run mixed ref --data "$TMP/ds/data-00000-of-00003.arrow" "$TMP/ds/data-00001-of-00003.arrow" \
    "$TMP/ds/data-00002-of-00003.arrow" --eval_data "$TMP/d.parquet" --tokenizer "$tok"
"$ZTRAIN" eval --model "$TMP/init" --data "$TMP/ds" --tokenizer "$tok" --block_size 16 > "$TMP/e1" ||
    fail "eval a save_to_disk directory"
"$ZTRAIN" eval --model "$TMP/init" --data "$TMP/txt.npy" --block_size 16 > "$TMP/e2" || fail "eval ids"
[ "$(grep '^eval loss' "$TMP/e1")" = "$(grep '^eval loss' "$TMP/e2")" ] || fail "eval of a table differs from its ids"

# supervised fine-tuning from the prompt and completion columns: the run on the
# same records as JSON Lines, loss on the completions only
"$ZTRAIN" train "${args[@]}" --data "$TMP/sft.jsonl" --tokenizer "$tok" --log_jsonl "$TMP/sft_ref.log" \
    > /dev/null || fail "train on prompt/completion JSON Lines"
same_run sft_parquet sft_ref --data "$TMP/sft.parquet" --tokenizer "$tok"
same_run sft_ds sft_ref --data "$TMP/sft_ds" --tokenizer "$tok"
grep -q "^loss: on the completions only" "$TMP/sft_ds.out" || fail "save_to_disk prompt/completion: no SFT line"
# several files of prompt/completion records, JSON Lines and a table: the run on
# the same records in one file
cat "$TMP/sft.jsonl" "$TMP/sft.jsonl" > "$TMP/sft2.jsonl"
"$ZTRAIN" train "${args[@]}" --data "$TMP/sft2.jsonl" --tokenizer "$tok" --log_jsonl "$TMP/sft2_ref.log" \
    > /dev/null || fail "train on prompt/completion JSON Lines, twice over"
same_run sft_join sft2_ref --data "$TMP/sft.jsonl" "$TMP/sft.parquet" --tokenizer "$tok"
grep -q "^loss: on the completions only" "$TMP/sft_join.out" || fail "joined prompt/completion: no SFT line"
expect_exit 2 'sft.parquet holds prompt/completion records and .*d.parquet plain text: they cannot be joined' -- \
    "$ZTRAIN" train "${args[@]}" --data "$TMP/sft.parquet" "$TMP/d.parquet" --tokenizer "$tok"

# refusals: exit 2, naming the file and the column
tk() { "$ZTRAIN" tokenize --tokenizer "$tok" --output "$TMP/x.npy" --input "$@"; }
expect_exit 2 'large.parquet: no column "text" \(its columns: content\); choose the text column with --text_field' -- \
    tk "$TMP/large.parquet"
# tokenize writes ids alone: prompt/completion tables are sent to train, which
# keeps their mask; one column chosen with --text_field is read as asked
expect_exit 2 'sft.parquet: prompt/completion records \("prompt" and "completion", no "text"\): tokenize writes ids alone.*train --data' -- \
    tk "$TMP/sft.parquet"
expect_exit 2 'sft_ds/?: prompt/completion records' -- tk "$TMP/sft_ds"
"$ZTRAIN" tokenize --tokenizer "$tok" --input "$TMP/sft.parquet" --text_field completion --output "$TMP/compl.npy" \
    2>/dev/null || fail "tokenize --text_field completion of a prompt/completion table"
expect_exit 2 'ints.parquet: column "text" is int64, not strings' -- tk "$TMP/ints.parquet"
expect_exit 2 'nulls.parquet: column "text", row 1 is null' -- tk "$TMP/nulls.parquet"
expect_exit 2 'nulls_ds/data-00000-of-00001.arrow: column "text", row 2 is null' -- tk "$TMP/nulls_ds"
expect_exit 2 'cut.parquet: not a readable Parquet file' -- tk "$TMP/cut.parquet"
expect_exit 2 'junk.arrow: not a readable Arrow IPC' -- tk "$TMP/junk.arrow"
expect_exit 2 'dict: a DatasetDict \(dataset_dict.json\): give one split.s directory, such as .*dict/train' -- \
    tk "$TMP/dict"
expect_exit 2 'no state.json' -- tk "$TMP/cache"
mkdir "$TMP/escape" && cp "$TMP"/ds/*.json "$TMP/escape/" &&
    sed -i 's/"data-00000-of-00003.arrow"/"..\/d.arrow"/' "$TMP/escape/state.json"
cp "$TMP/ds/data-00000-of-00003.arrow" "$TMP/d.arrow"
expect_exit 2 'escape/state.json: _data_files\[0\].filename: expected the name of a .arrow file in' -- tk "$TMP/escape"
expect_exit 2 'missing.parquet' -- tk "$TMP/missing.parquet"
mkfifo "$TMP/fifo.parquet"
expect_exit 2 'fifo.parquet.*FIFO' -- timeout 20 "$ZTRAIN" tokenize --tokenizer "$tok" --output "$TMP/x.npy" \
    --input "$TMP/fifo.parquet"
expect_exit 2 'ints.parquet: column "text" is int64' -- \
    "$ZTRAIN" train "${args[@]}" --data "$TMP/ints.parquet" --tokenizer "$tok"
expect_exit 2 'd.parquet holds text records \(a Parquet or Arrow table\): give --tokenizer' -- \
    "$ZTRAIN" train "${args[@]}" --data "$TMP/d.parquet"
[ -e "$TMP/x.npy" ] && fail "a refused table left an output file"
finish
