# ztrain tokenize: ids equal those the `tokenizers` package gave (fixtures from
# tools/make_tokenizer_fixtures.py) for all three tokenizer families, eos
# between documents, .bin output, the same bytes with 1 and 2 threads, and
# exit 2 for a vocabulary too large for .bin or an unsupported tokenizer.json.
. "$(dirname "$0")/lib.bash"
PY=/usr/bin/python3
fx=tests/fixtures/tokenizers
text=tests/fixtures/text/multilingual.txt
for fam in gpt2 llama3 llama2; do
    "$ZTRAIN" tokenize --tokenizer "$fx/$fam" --input "$text" "$text" --output "$TMP/$fam.npy" --append_eos \
        2>/dev/null || fail "$fam: tokenize"
    "$ZTRAIN" tokenize --tokenizer "$fx/$fam" --input "$text" --output "$TMP/$fam.bin" --add_special_tokens false \
        --eos_between_documents false 2>/dev/null ||
        fail "$fam: tokenize to .bin"
    $PY - "$fx/$fam" "$TMP/$fam.npy" "$TMP/$fam.bin" <<'PY' || fail "$fam: ids differ from tokenizers'"
import json, sys
import numpy as np
d, npy, binf = sys.argv[1:]
exp = json.load(open(d + "/expected.json", encoding="utf-8"))["cases"][0]["ids"]
eos = {"<|endoftext|>", "<|end_of_text|>", "</s>"}
vocab = json.load(open(d + "/tokenizer.json", encoding="utf-8"))
eos_id = [a["id"] for a in vocab["added_tokens"] if a["content"] in eos][0]
got = np.load(npy).tolist()
assert got == exp + [eos_id] + exp + [eos_id], "npy"
assert np.fromfile(binf, dtype="<u2").tolist() == exp, "bin"
PY
done
# threads: the licences (several hundred KB) give the same bytes on 1 and 2 threads
find /usr/share/common-licenses -maxdepth 1 -type f | sort | xargs cat > "$TMP/licenses.txt"
for fam in gpt2 llama2; do
    "$ZTRAIN" tokenize --tokenizer "$fx/$fam" --input "$TMP/licenses.txt" --output "$TMP/t1.npy" --threads 1 2>/dev/null &&
        "$ZTRAIN" tokenize --tokenizer "$fx/$fam" --input "$TMP/licenses.txt" --output "$TMP/t2.npy" --threads 2 2>/dev/null ||
        fail "$fam: tokenize with threads"
    cmp -s "$TMP/t1.npy" "$TMP/t2.npy" || fail "$fam: 1 and 2 threads differ"
done
# a vocabulary over 65536: .bin refused, .npy fine
mkdir -p "$TMP/big"
$PY - "$fx/gpt2/tokenizer.json" "$TMP/big/tokenizer.json" <<'PY'
import json, sys
j = json.load(open(sys.argv[1], encoding="utf-8"))
j["added_tokens"].append({"id": 70000, "content": "<|far|>", "single_word": False, "lstrip": False,
                          "rstrip": False, "normalized": False, "special": True})
json.dump(j, open(sys.argv[2], "w", encoding="utf-8"), ensure_ascii=False)
PY
expect_exit 2 'vocabulary has 70001 tokens' -- "$ZTRAIN" tokenize --tokenizer "$TMP/big" --input "$text" --output "$TMP/big.bin"
[ -e "$TMP/big.bin" ] && fail ".bin written although refused"
"$ZTRAIN" tokenize --tokenizer "$TMP/big" --input "$text" --output "$TMP/big.npy" 2>/dev/null || fail "big vocab .npy"
# unsupported tokenizer.json: exit 2 naming the JSON path
mkdir -p "$TMP/wp"
sed 's/"type": "BPE"/"type": "Unigram"/' "$fx/gpt2/tokenizer.json" > "$TMP/wp/tokenizer.json"
expect_exit 2 'tokenizer.json: model.type' -- "$ZTRAIN" tokenize --tokenizer "$TMP/wp" --input "$text" --output "$TMP/x.npy"
expect_exit 2 'expected a .npy or .bin' -- "$ZTRAIN" tokenize --tokenizer "$fx/gpt2" --input "$text" --output "$TMP/x.txt"
expect_exit 2 'required' -- "$ZTRAIN" tokenize --tokenizer "$fx/gpt2" --output "$TMP/x.npy"
printf 'ok\xff\n' > "$TMP/bad.txt"
expect_exit 2 'bad.txt: byte offset 2 is not valid UTF-8' -- "$ZTRAIN" tokenize --tokenizer "$fx/gpt2" --input "$TMP/bad.txt" --output "$TMP/x.npy"
mkfifo "$TMP/fifo"
expect_exit 2 'fifo: text is a FIFO' -- "$ZTRAIN" tokenize --tokenizer "$fx/gpt2" --input "$TMP/fifo" --output "$TMP/x.npy"
finish
