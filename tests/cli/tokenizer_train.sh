# ztrain tokenizer train: the same input gives byte-identical files, equal to
# the committed fixture that tools/check_trained_tokenizer.py checked loads in
# `tokenizers` and transformers.AutoTokenizer; tokenize with it gives the ids
# those packages gave; bad input exits 2.
. "$(dirname "$0")/lib.bash"
fx=tests/fixtures/tokenizers/ztrain_trained
text=tests/fixtures/text/multilingual.txt
for run in a b; do
    "$ZTRAIN" tokenizer train --input "$text" --vocab_size 400 --output_dir "$TMP/$run" >/dev/null ||
        fail "tokenizer train ($run)"
done
for f in tokenizer.json tokenizer_config.json special_tokens_map.json; do
    cmp -s "$TMP/a/$f" "$TMP/b/$f" || fail "$f differs between two runs on the same input"
    cmp -s "$TMP/a/$f" "$fx/$f" || fail "$f differs from the checked fixture $fx/$f"
done
"$ZTRAIN" tokenize --tokenizer "$TMP/a" --input "$text" --output "$TMP/ids.npy" --eos_between_documents false \
    2>/dev/null || fail "tokenize"
/usr/bin/python3 - "$fx/expected.json" "$TMP/ids.npy" <<'PY' || fail "ids differ from tokenizers/AutoTokenizer's"
import json, sys
import numpy as np
exp = json.load(open(sys.argv[1], encoding="utf-8"))["cases"][0]["ids"]
assert np.load(sys.argv[2]).tolist() == exp
PY
# more text than the vocabulary needs: stops at --vocab_size exactly
find /usr/share/common-licenses -maxdepth 1 -type f | sort | xargs cat > "$TMP/licenses.txt"
"$ZTRAIN" tokenizer train --input "$TMP/licenses.txt" --vocab_size 1000 --output_dir "$TMP/lic" >/dev/null || fail "licenses"
/usr/bin/python3 -c "import json,sys; j=json.load(open(sys.argv[1])); assert len(j['model']['vocab']) == 1000" \
    "$TMP/lic/tokenizer.json" || fail "vocabulary is not 1000 tokens"
expect_exit 2 'vocab_size: 100 is too small' -- "$ZTRAIN" tokenizer train --input "$text" --vocab_size 100 --output_dir "$TMP/x"
expect_exit 2 'required' -- "$ZTRAIN" tokenizer train --vocab_size 300 --output_dir "$TMP/x"
expect_exit 2 'nonexistent.txt: cannot open' -- "$ZTRAIN" tokenizer train --input "$TMP/nonexistent.txt" --vocab_size 300 --output_dir "$TMP/x"
printf 'ok\xc3\n' > "$TMP/bad.txt"
expect_exit 2 'bad.txt: byte offset 2 is not valid UTF-8' -- "$ZTRAIN" tokenizer train --input "$TMP/bad.txt" --vocab_size 300 --output_dir "$TMP/x"
expect_exit 2 "expected the subcommand 'train'" -- "$ZTRAIN" tokenizer fit
finish
