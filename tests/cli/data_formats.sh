# Data as users keep it (contract §5): JSON Lines records with a text field
# (--text_field, default text), each record a document, give the same ids as the
# same texts given as .txt files; several --data files are one stream in the
# order given.  Broken records are refused by file and line, never tokenized as
# JSON syntax; JSON Lines without --tokenizer is refused.  TRL's prompt/completion
# records train with the loss on the completions only, from one file or several.
. "$(dirname "$0")/lib.bash"
export ZTRAIN_CACHE_DIR="$TMP/cache"
py=/usr/bin/python3
tok=tests/fixtures/tokenizers/ztrain_trained # 400 tokens
# the fixture's lines as records: d.jsonl as Python's json (and so datasets' to_json)
# writes it, \u escapes for non-ASCII, and the same texts as r0.txt, r1.txt, ...
$py - "$TMP" <<'PY'
import json, sys
d = sys.argv[1]
lines = open("tests/fixtures/text/multilingual.txt", encoding="utf-8").read().splitlines(keepends=True)
texts = [l for l in lines if l.strip()] * 3
texts.append('quotes " and \\ backslash\ttab and a {"json": [1, 2]} inside')
with open(d + "/d.jsonl", "w") as f:
    for i, t in enumerate(texts):
        f.write(json.dumps({"id": i, "text": t, "meta": {"n": [i]}}) + "\n")
        if i == 3:
            f.write("\n")  # a blank line is skipped
with open(d + "/content.jsonl", "w") as f:
    for t in texts:
        f.write(json.dumps({"content": t}, ensure_ascii=False) + "\n")
for i, t in enumerate(texts):
    open("%s/r%03d.txt" % (d, i), "w", encoding="utf-8").write(t)
PY
records=("$TMP"/r*.txt)
"$ZTRAIN" tokenize --tokenizer "$tok" --input "${records[@]}" --output "$TMP/txt.npy" 2>/dev/null || fail "tokenize .txt"
"$ZTRAIN" tokenize --tokenizer "$tok" --input "$TMP/d.jsonl" --output "$TMP/jsonl.npy" 2>/dev/null ||
    fail "tokenize .jsonl"
cmp -s "$TMP/txt.npy" "$TMP/jsonl.npy" || fail "tokenize: the JSON Lines records' ids differ from the same texts as .txt"
"$ZTRAIN" tokenize --tokenizer "$tok" --input "${records[@]}" --output "$TMP/txt_eos.npy" --append_eos 2>/dev/null ||
    fail "tokenize .txt --append_eos"
"$ZTRAIN" tokenize --tokenizer "$tok" --input "$TMP/d.jsonl" --output "$TMP/jsonl_eos.npy" --append_eos 2>/dev/null ||
    fail "tokenize .jsonl --append_eos"
cmp -s "$TMP/txt_eos.npy" "$TMP/jsonl_eos.npy" || fail "--append_eos: not one eos a record"
# eos after each document is the default (TRL's SFT); --append_eos (older scripts)
# asks for what is done anyway, and --eos_between_documents false takes it away:
# one id fewer a record, the eos
cmp -s "$TMP/txt.npy" "$TMP/txt_eos.npy" || fail "--append_eos changed the default ids"
"$ZTRAIN" tokenize --tokenizer "$tok" --input "$TMP/d.jsonl" --output "$TMP/jsonl_noeos.npy" \
    --eos_between_documents false 2>/dev/null || fail "tokenize --eos_between_documents false"
$py - "$TMP/jsonl.npy" "$TMP/jsonl_noeos.npy" "${#records[@]}" <<'PY' || fail "--eos_between_documents false: not the ids less one eos a record"
import sys, numpy as np
a, b, n = np.load(sys.argv[1]).tolist(), np.load(sys.argv[2]).tolist(), int(sys.argv[3])
eos = a[-1]
assert len(a) == len(b) + n and a.count(eos) == b.count(eos) + n
PY
# another field, and UTF-8 written as is
"$ZTRAIN" tokenize --tokenizer "$tok" --input "$TMP/content.jsonl" --text_field content --output "$TMP/content.npy" \
    2>/dev/null || fail "tokenize --text_field content"
cmp -s "$TMP/txt.npy" "$TMP/content.npy" || fail "--text_field content: other ids"
expect_exit 2 'content.jsonl: line 1 has no "text" \(the text field; choose another with --text_field\)' -- \
    "$ZTRAIN" tokenize --tokenizer "$tok" --input "$TMP/content.jsonl" --output "$TMP/x.npy"
# broken records name the file and the line
printf '{"text": "fine"}\n{"text": "cut\n' > "$TMP/bad.jsonl"
expect_exit 2 'bad.jsonl: line 2 is not valid JSON' -- "$ZTRAIN" tokenize --tokenizer "$tok" --input "$TMP/bad.jsonl" \
    --output "$TMP/x.npy"
printf '{"text": "fine"}\n["text"]\n' > "$TMP/arr.jsonl"
expect_exit 2 'arr.jsonl: line 2 is not a JSON object' -- "$ZTRAIN" tokenize --tokenizer "$tok" \
    --input "$TMP/arr.jsonl" --output "$TMP/x.npy"
printf '{"text": 3}\n' > "$TMP/num.jsonl"
expect_exit 2 'num.jsonl: line 1: "text" is not a string' -- "$ZTRAIN" tokenize --tokenizer "$tok" \
    --input "$TMP/num.jsonl" --output "$TMP/x.npy"
printf '\n\n' > "$TMP/empty.jsonl"
expect_exit 2 'empty.jsonl: no records' -- "$ZTRAIN" tokenize --tokenizer "$tok" --input "$TMP/empty.jsonl" \
    --output "$TMP/x.npy"
[ -e "$TMP/x.npy" ] && fail "a refused input left an output file"

# train: .jsonl under --tokenizer is the same run as its ids; several --data files
# are one stream, as the joined file is
sed 's/"vocab_size": 256/"vocab_size": 400/' tests/fixtures/gqa_tied/config.json > "$TMP/config.json"
"$ZTRAIN" init-model --model_config "$TMP/config.json" --output_dir "$TMP/init" --seed 5 >/dev/null || fail "init-model"
args=(--model "$TMP/init" --block_size 16 --per_device_train_batch_size 2 --max_steps 3 --learning_rate 1e-3
      --shuffle --seed 7 --threads 1)
metrics() { sed -E 's/"(tokens_per_sec_per_device|step_time_s|mfu|comm_[a-z_]*|peak[a-z_]*|mem[a-z_]*)": [^,}]*,? ?//g' "$1"; }
same_run() { # same_run NAME ARGS... -- the run equals the one on $TMP/ref.npy
    local name=$1
    shift
    "$ZTRAIN" train "${args[@]}" "$@" --log_jsonl "$TMP/$name.log" > "$TMP/$name.out" || { fail "train $name"; return; }
    [ -s "$TMP/$name.log" ] && [ "$(metrics "$TMP/$name.log")" = "$(metrics "$TMP/ref.log")" ] ||
        fail "train $name differs from the run on the same ids"
}
"$ZTRAIN" train "${args[@]}" --data "$TMP/jsonl.npy" --log_jsonl "$TMP/ref.log" > /dev/null || fail "train on ids"
same_run jsonl --data "$TMP/d.jsonl" --tokenizer "$tok"
grep -q "tokenized with $tok" "$TMP/jsonl.out" || fail "train .jsonl: no tokenization line"
# the 3 x 18 records as two files, d.jsonl's first 20 records and the rest
head -n 21 "$TMP/d.jsonl" > "$TMP/a.jsonl"
tail -n +22 "$TMP/d.jsonl" > "$TMP/b.jsonl"
same_run two_jsonl --data "$TMP/a.jsonl" "$TMP/b.jsonl" --tokenizer "$tok"
grep -q "data: 2 files, .* tokens in all, joined in the order given" "$TMP/two_jsonl.out" || fail "no join line"
# ids files: --data A B and --data A --data B
$py -c "
import numpy as np, sys
a = np.load('$TMP/jsonl.npy'); k = len(a) // 3
np.save('$TMP/p1.npy', a[:k].astype(np.int64)); a[k:].astype(np.uint16).tofile('$TMP/p2.bin')" || fail "split ids"
same_run two_ids --data "$TMP/p1.npy" "$TMP/p2.bin"
same_run repeated --data "$TMP/p1.npy" --data "$TMP/p2.bin"
# the checkpoint's trainer_state.json records the command line, every --data file in it
"$ZTRAIN" train "${args[@]}" --data "$TMP/p1.npy" "$TMP/p2.bin" --output_dir "$TMP/ck" --save_steps 2 > /dev/null ||
    fail "train with checkpoints"
grep -q -- "--data $TMP/p1.npy $TMP/p2.bin" "$TMP/ck/checkpoint-2/trainer_state.json" ||
    fail "trainer_state.json's command line lacks the --data files"
# order matters
"$ZTRAIN" train "${args[@]}" --data "$TMP/p2.bin" "$TMP/p1.npy" --log_jsonl "$TMP/swapped.log" > /dev/null ||
    fail "train swapped"
[ "$(metrics "$TMP/swapped.log")" = "$(metrics "$TMP/ref.log")" ] && fail "the files' order made no difference"
# held-out records and eval read JSON Lines too
"$ZTRAIN" train "${args[@]}" --data "$TMP/d.jsonl" --tokenizer "$tok" --eval_data "$TMP/content.jsonl" \
    --text_field content > /dev/null 2>&1 && fail "--text_field content must apply to --data d.jsonl too"
"$ZTRAIN" train "${args[@]}" --data "$TMP/d.jsonl" --tokenizer "$tok" --eval_data "$TMP/b.jsonl" \
    --log_jsonl "$TMP/ev.log" > /dev/null || fail "train --eval_data .jsonl"
grep -q '"eval_loss"' "$TMP/ev.log" || fail "no evaluation of a .jsonl --eval_data"
"$ZTRAIN" eval --model "$TMP/init" --data "$TMP/d.jsonl" --tokenizer "$tok" --block_size 16 > "$TMP/e1" ||
    fail "eval .jsonl"
"$ZTRAIN" eval --model "$TMP/init" --data "$TMP/jsonl.npy" --block_size 16 > "$TMP/e2" || fail "eval ids"
[ "$(grep '^eval loss' "$TMP/e1")" = "$(grep '^eval loss' "$TMP/e2")" ] || fail "eval .jsonl differs from its ids"

# supervised fine-tuning: TRL's prompt/completion records, the loss on the completion
# (and the eos after it) only.  The ids are those of prompt + completion + eos; the
# mask is 0 over the prompt's own ids.
$py - "$TMP" <<'PY'
import json, sys
d = sys.argv[1]
texts = [json.loads(l)["text"] for l in open(d + "/d.jsonl") if l.strip()]
cut = [len(t) // 3 for t in texts]
with open(d + "/sft.jsonl", "w") as f:
    for t, c in zip(texts, cut):
        f.write(json.dumps({"prompt": t[:c], "completion": t[c:]}) + "\n")
with open(d + "/sft_empty.jsonl", "w") as f:  # no prompt: every token is a target
    for t in texts:
        f.write(json.dumps({"prompt": "", "completion": t}) + "\n")
for i, (t, c) in enumerate(zip(texts, cut)):
    open("%s/p%03d.txt" % (d, i), "w", encoding="utf-8").write(t[:c])
PY
# the losses, gradient norms and learning rates (a loss mask is memory of its own)
numbers() { grep -o '"\(step\|loss\|grad_norm\|lr\)": [^,]*' "$1"; }
"$ZTRAIN" train "${args[@]}" --data "$TMP/txt_eos.npy" --log_jsonl "$TMP/eos.log" > /dev/null || fail "train on eos ids"
"$ZTRAIN" train "${args[@]}" --data "$TMP/sft_empty.jsonl" --tokenizer "$tok" --log_jsonl "$TMP/sft_empty.log" \
    > "$TMP/sft_empty.out" || fail "train on prompt/completion records"
[ -s "$TMP/sft_empty.log" ] && [ "$(numbers "$TMP/sft_empty.log")" = "$(numbers "$TMP/eos.log")" ] ||
    fail "empty prompts: not the run on the texts' ids with eos"
"$ZTRAIN" train "${args[@]}" --data "$TMP/sft.jsonl" --tokenizer "$tok" --log_jsonl "$TMP/sft.log" > "$TMP/sft.out" ||
    fail "train on prompt/completion records"
grep -q "^loss: on the completions only" "$TMP/sft.out" || fail "no SFT line: $(cat "$TMP/sft.out")"
[ "$(numbers "$TMP/sft.log")" = "$(numbers "$TMP/eos.log")" ] && fail "prompt tokens still count in the loss"
# --completion_only_loss false (TRL's flag): every token counts, as the ids alone
"$ZTRAIN" train "${args[@]}" --data "$TMP/sft.jsonl" --tokenizer "$tok" --completion_only_loss false \
    --log_jsonl "$TMP/sft_all.log" > "$TMP/sft_all.out" || fail "train --completion_only_loss false"
grep -q "^loss: on every token" "$TMP/sft_all.out" || fail "--completion_only_loss false: no loss line"
[ "$(numbers "$TMP/sft_all.log")" = "$(numbers "$TMP/eos.log")" ] || fail "--completion_only_loss false still masks"
# each record's ids and prompt ids, tokenized alone
for f in "$TMP"/r*.txt "$TMP"/p*.txt; do
    "$ZTRAIN" tokenize --tokenizer "$tok" --input "$f" --output "${f%.txt}.npy" --eos_between_documents false \
        2>/dev/null || fail "tokenize $f"
done
entry=$(grep -o "$TMP/cache/[0-9a-f]*\.npy" "$TMP/sft.out" | head -1)
$py - "$entry" "$TMP" "$(ls "$TMP"/r*.txt | wc -l)" "$TMP/txt_eos.npy" <<'PY' || fail "the SFT ids or mask are not TRL's"
import sys, numpy as np
ids, mask = np.load(sys.argv[1]), np.load(sys.argv[1][:-4] + ".mask.npy")
d, n, eos = sys.argv[2], int(sys.argv[3]), np.load(sys.argv[4])[-1]
want_ids, want_mask = [], []
for i in range(n):
    full = list(np.load("%s/r%03d.npy" % (d, i)))
    p = len(np.load("%s/p%03d.npy" % (d, i))) if open("%s/p%03d.txt" % (d, i), "rb").read() else 0
    want_ids += full + [eos]
    want_mask += [0] * p + [1] * (len(full) - p + 1)
assert list(ids) == want_ids, "ids are not those of prompt + completion + eos"
assert list(mask) == want_mask, "the mask is not 0 over each prompt's own ids, 1 after"
assert 0 < sum(want_mask) < len(want_mask)
PY
# tokenize writes ids alone, without the mask: prompt/completion records are sent
# to train (no output file); one field chosen with --text_field is read as asked
expect_exit 2 'sft.jsonl: prompt/completion records \("prompt" and "completion", no "text"\): tokenize writes ids alone, without the mask.*give .*sft.jsonl to train --data' -- \
    "$ZTRAIN" tokenize --tokenizer "$tok" --input "$TMP/r000.txt" "$TMP/sft.jsonl" --output "$TMP/sft_tok.npy"
[ -e "$TMP/sft_tok.npy" ] && fail "a refused tokenize left an output file"
"$ZTRAIN" tokenize --tokenizer "$tok" --input "$TMP/sft.jsonl" --text_field prompt --output "$TMP/prompts.npy" \
    --eos_between_documents false \
    2>/dev/null || fail "tokenize --text_field prompt of prompt/completion records"
cmp -s <($py -c "import numpy as np,sys; print([int(x) for x in np.load(sys.argv[1])])" "$TMP/prompts.npy") \
    <($py -c "import numpy as np,sys; print([int(x) for f in sys.argv[1:] for x in np.load(f)])" "$TMP"/p[0-9][0-9][0-9].npy) ||
    fail "tokenize --text_field prompt: not the prompts' ids"
printf '{"prompt": "a", "completion": "b"}\n{"prompt": "c"}\n' > "$TMP/half.jsonl"
expect_exit 2 'half.jsonl: line 2 has no "completion" \(prompt/completion records: every record needs both\)' -- \
    "$ZTRAIN" train "${args[@]}" --data "$TMP/half.jsonl" --tokenizer "$tok"
# prompt/completion records as evaluation data: the loss over the completion tokens
# only, as in training (tests/test_eval_mask.c checks the sums); with empty
# prompts that is every token, the evaluation of the texts' ids with eos
ev() { "$ZTRAIN" eval --model "$TMP/init" --tokenizer "$tok" --block_size 16 --data "$@"; }
ev "$TMP/sft.jsonl" > "$TMP/ev_sft" || fail "eval prompt/completion records"
grep -q "^eval: prompt/completion records: the loss over the completion tokens only" "$TMP/ev_sft" ||
    fail "eval of prompt/completion records: no line saying so"
counted=$($py -c "import numpy as np, sys; print(int(np.load(sys.argv[1])[1:].sum()))" "${entry%.npy}.mask.npy")
grep -q "^eval loss .* over $counted tokens" "$TMP/ev_sft" || fail "eval: not the $counted completion tokens: $(cat "$TMP/ev_sft")"
"$ZTRAIN" eval --model "$TMP/init" --data "$entry" --block_size 16 > "$TMP/ev_ids" || fail "eval the SFT ids"
[ "$(grep '^eval loss' "$TMP/ev_sft")" = "$(grep '^eval loss' "$TMP/ev_ids")" ] && fail "eval: the prompts still count"
ev "$TMP/sft_empty.jsonl" > "$TMP/ev_empty" || fail "eval empty prompts"
"$ZTRAIN" eval --model "$TMP/init" --data "$TMP/txt_eos.npy" --block_size 16 > "$TMP/ev_eos" || fail "eval eos ids"
[ "$(grep '^eval loss' "$TMP/ev_empty")" = "$(grep '^eval loss' "$TMP/ev_eos")" ] ||
    fail "eval of empty prompts is not the evaluation of the texts' ids with eos"
"$ZTRAIN" train "${args[@]}" --data "$TMP/d.jsonl" --tokenizer "$tok" --eval_data "$TMP/sft.jsonl" \
    --log_jsonl "$TMP/ev_sft.log" > /dev/null || fail "train --eval_data prompt/completion records"
grep -q "\"eval_tokens\": $counted}\|\"eval_tokens\": $counted," "$TMP/ev_sft.log" ||
    fail "train --eval_data prompt/completion: not the $counted completion tokens"
# --completion_only_loss false: every token counts in the evaluation too
"$ZTRAIN" train "${args[@]}" --data "$TMP/d.jsonl" --tokenizer "$tok" --eval_data "$TMP/sft.jsonl" \
    --completion_only_loss false --log_jsonl "$TMP/ev_all.log" > /dev/null || fail "train --completion_only_loss false"
grep -q "\"eval_tokens\": $(( $($py -c "import numpy as np, sys; print(len(np.load(sys.argv[1])))" "$entry") - 1 ))" \
    "$TMP/ev_all.log" || fail "--completion_only_loss false: the evaluation still masks"
# several files of prompt/completion records are one set of records, in order:
# the same losses as the records in one file (the masks joined as the ids are)
n_sft=$(wc -l < "$TMP/sft.jsonl")
head -n 5 "$TMP/sft.jsonl" > "$TMP/sft_a.jsonl"
tail -n $(( n_sft - 5 )) "$TMP/sft.jsonl" > "$TMP/sft_b.jsonl"
"$ZTRAIN" train "${args[@]}" --data "$TMP/sft_a.jsonl" "$TMP/sft_b.jsonl" --tokenizer "$tok" \
    --log_jsonl "$TMP/sft_ab.log" > "$TMP/sft_ab.out" || fail "train on two files of prompt/completion records"
grep -q "^loss: on the completions only" "$TMP/sft_ab.out" || fail "two SFT files: no SFT line: $(cat "$TMP/sft_ab.out")"
[ -s "$TMP/sft_ab.log" ] && [ "$(numbers "$TMP/sft_ab.log")" = "$(numbers "$TMP/sft.log")" ] ||
    fail "two SFT files: not the losses of the same records in one file"
joined=$(grep -o "joined in the order given.*: $TMP/cache/[0-9a-f]*\.npy" "$TMP/sft_ab.out" | grep -o "$TMP/cache/.*")
cmp -s <($py -c "import numpy as np,sys; print(list(np.load(sys.argv[1])))" "${joined%.npy}.mask.npy") \
    <($py -c "import numpy as np,sys; print(list(np.load(sys.argv[1])))" "${entry%.npy}.mask.npy") ||
    fail "two SFT files: the joined mask is not the one file's mask"
# a plain-text file beside them has no prompt: its loss mask is undefined, refused naming both
expect_exit 2 '--data: .*sft.jsonl holds prompt/completion records and .*d.jsonl plain text: they cannot be joined' -- \
    "$ZTRAIN" train "${args[@]}" --data "$TMP/sft.jsonl" "$TMP/d.jsonl" --tokenizer "$tok"
expect_exit 2 '--data: .*sft_b.jsonl holds prompt/completion records and .*r000.txt plain text: they cannot be joined' -- \
    "$ZTRAIN" train "${args[@]}" --data "$TMP/r000.txt" "$TMP/sft_b.jsonl" --tokenizer "$tok"
expect_exit 2 'd.jsonl holds text records \(JSON Lines\): give --tokenizer' -- \
    "$ZTRAIN" train "${args[@]}" --data "$TMP/d.jsonl"
expect_exit 2 'must be a .txt file or JSON Lines' -- \
    "$ZTRAIN" train "${args[@]}" --data "$TMP/d.jsonl" "$TMP/p1.npy" --tokenizer "$tok"
finish
