#!/usr/bin/env bash
# chat_tables.sh — TRL's conversational records as tables: the records of
# tests/fixtures/chat_data (messages, and prompt/completion lists of messages)
# written as Parquet (pyarrow) and as a save_to_disk Arrow directory (datasets)
# train on exactly the ids and loss mask of the same records as JSON Lines
# (which test_chat_data checks against TRL), with --assistant_only_loss too.
# pyarrow and datasets come from the virtual environment scripts/setup.sh makes.
. "$(dirname "$0")/lib.bash"
export ZTRAIN_CACHE_DIR="$TMP/cache" HF_HOME="$TMP/hf" HF_DATASETS_OFFLINE=1 HF_HUB_OFFLINE=1
venv=${ARROW_VENV:-/usr/local/lib/ztrain/arrow-venv}
fix=tests/fixtures/chat_data
"$venv/bin/python" - "$TMP" <<'PY' || fail "writing the tables"
import json, sys
import pyarrow as pa, pyarrow.parquet as pq, datasets
d = sys.argv[1]
for name in ("messages", "prompt_completion"):
    rows = [json.loads(l) for l in open("tests/fixtures/chat_data/%s.jsonl" % name, encoding="utf-8")]
    pq.write_table(pa.Table.from_pylist(rows), "%s/%s.parquet" % (d, name))
    datasets.Dataset.from_list(rows).save_to_disk("%s/%s_ds" % (d, name))
PY
# the cached ids of a run on $1 (the path the data line prints), its mask beside
ids_of() {
    "$ZTRAIN" train --model tests/fixtures/generate_chat --tokenizer $fix --max_steps 1 --block_size 16 \
        --per_device_train_batch_size 1 --data "$@" >"$TMP/out" 2>&1 || { fail "train --data $*: $(tail -2 "$TMP/out")"; return; }
    sed -n 's/^data: .*: \(\/[^;]*\.npy\); .*/\1/p' "$TMP/out"
}
for name in messages prompt_completion; do
    for flag in "" --assistant_only_loss; do
        want=$(ids_of $fix/$name.jsonl $flag)
        [ -n "$want" ] || { fail "$name.jsonl $flag: no cached ids in: $(cat "$TMP/out")"; continue; }
        for table in "$TMP/$name.parquet" "$TMP/${name}_ds"; do
            got=$(ids_of "$table" $flag)
            [ -n "$got" ] || { fail "$table $flag: no cached ids in: $(cat "$TMP/out")"; continue; }
            cmp -s "$want" "$got" || fail "$table $flag: ids differ from the JSON Lines records'"
            cmp -s "${want%.npy}.mask.npy" "${got%.npy}.mask.npy" || fail "$table $flag: loss mask differs"
        done
    done
done
exit $((fails > 0))
