# gguf_export.sh — `ztrain export --format gguf` writes a file that llama.cpp's own
# Python package (gguf, installed into the arrow venv by scripts/setup.sh) reads
# back equal to the source model: every tensor bit for bit what gguf.quants makes
# of the source weights in f32, f16, bf16 and q8_0 (q/k rows permuted as llama.cpp's
# converter does; Qwen2 under llama.cpp's qwen2 architecture), the metadata from
# config.json, and the tokenizer and chat template (tests/cli/gguf_check.py).  Bad input is refused by name.
. "$(dirname "$0")/lib.bash"
py=${ZT_GGUF_PYTHON:-/usr/local/lib/ztrain/arrow-venv/bin/python}
"$py" -c "import gguf" 2>/dev/null || { fail "$py has no gguf package (scripts/setup.sh installs it)"; finish; }

# a model sized for the repository's trained tokenizer (400 ids: q8_0 blocks fill the
# 64-wide rows, and the 172-wide down_proj rows fall back to f16), bf16 weights,
# with a chat template
tok=$TMP/tok
cp -r tests/fixtures/tokenizers/ztrain_trained "$tok"
sed 's/"eos_token"/"chat_template": "{% for m in messages %}{{ m.content }}\\n{% endfor %}", "eos_token"/' \
    tests/fixtures/tokenizers/ztrain_trained/tokenizer_config.json >"$tok/tokenizer_config.json"
"$ZTRAIN" init-model --model_config tests/fixtures/gqa_tied/config.json --tokenizer "$tok" --torch_dtype bf16 \
    --output_dir "$TMP/m" >"$TMP/log" 2>&1 || fail "init-model: $(cat "$TMP/log")"
for t in f32 f16 bf16 q8_0; do
    "$ZTRAIN" export --format gguf --outtype $t "$TMP/m" "$TMP/m.$t.gguf" >"$TMP/log" 2>&1 || fail "export $t: $(cat "$TMP/log")"
    grep -q "with the tokenizer" "$TMP/log" || fail "export $t: no tokenizer: $(cat "$TMP/log")"
    "$py" tests/cli/gguf_check.py "$TMP/m" "$TMP/m.$t.gguf" $t || fail "the gguf package's reading of the $t file"
done
grep -q "2 matrices .* written in f16" "$TMP/log" || fail "q8_0: no line about the f16 fallback: $(cat "$TMP/log")"

# an untied Mistral without a window that masks anything, in f32 (lm_head -> output.weight)
sed 's/"tie_word_embeddings": true/"tie_word_embeddings": false/; s/"model_type": "llama"/"model_type": "mistral", "sliding_window": null/' \
    tests/fixtures/gqa_tied/config.json >"$TMP/mistral.json"
"$ZTRAIN" init-model --model_config "$TMP/mistral.json" --output_dir "$TMP/mi" >/dev/null 2>&1 || fail "init-model mistral"
"$ZTRAIN" export --outtype f32 "$TMP/mi" "$TMP/mi.gguf" >"$TMP/log" 2>&1 || fail "export mistral: $(cat "$TMP/log")"
grep -q "no tokenizer" "$TMP/log" || fail "export without a tokenizer does not say so: $(cat "$TMP/log")"
"$py" tests/cli/gguf_check.py "$TMP/mi" "$TMP/mi.gguf" f32 || fail "the gguf package's reading of the untied model"

# a SentencePiece-style tokenizer (Llama 2's kind) as llama.cpp's "llama" type, with scores
"$ZTRAIN" init-model --model_config tests/fixtures/gqa_tied/config.json --tokenizer tests/fixtures/tokenizers/llama2 \
    --output_dir "$TMP/l2" >/dev/null 2>&1 || fail "init-model llama2 tokenizer"
"$ZTRAIN" export --outtype f16 "$TMP/l2" "$TMP/l2.gguf" >"$TMP/log" 2>&1 || fail "export llama2: $(cat "$TMP/log")"
"$py" tests/cli/gguf_check.py "$TMP/l2" "$TMP/l2.gguf" f16 || fail "the gguf package's reading of the llama-tokenizer model"

# Qwen2 (q/k/v biases) as llama.cpp's qwen2 architecture: biases in, rows not reordered
sed 's/"model_type": "llama"/"model_type": "qwen2"/' tests/fixtures/gqa_tied/config.json >"$TMP/qwen.json"
"$ZTRAIN" init-model --model_config "$TMP/qwen.json" --output_dir "$TMP/q" >/dev/null 2>&1 || fail "init-model qwen2"
"$ZTRAIN" export --outtype bf16 "$TMP/q" "$TMP/q.gguf" >"$TMP/log" 2>&1 || fail "export qwen2: $(cat "$TMP/log")"
"$py" tests/cli/gguf_check.py "$TMP/q" "$TMP/q.gguf" bf16 || fail "the gguf package's reading of the qwen2 model"

# Llama 3.1's rope scaling travels as rope_freqs.weight (the fixture's original
# context of 64 puts its 8 frequencies in all three bands)
"$ZTRAIN" export --outtype q8_0 tests/fixtures/llama3_rope "$TMP/l3.gguf" >"$TMP/log" 2>&1 || fail "export llama3: $(cat "$TMP/log")"
"$py" tests/cli/gguf_check.py tests/fixtures/llama3_rope "$TMP/l3.gguf" q8_0 || fail "the gguf package's reading of the llama3 model"

# refused by name
expect_exit 2 "outtype.*q4_k" -- "$ZTRAIN" export --outtype q4_k "$TMP/m" "$TMP/x.gguf"
expect_exit 2 "format.*onnx" -- "$ZTRAIN" export --format onnx "$TMP/m" "$TMP/x.gguf"
expect_exit 2 "usage" -- "$ZTRAIN" export --outtype f16
expect_exit 2 "nope" -- "$ZTRAIN" export "$TMP/nope" "$TMP/x.gguf"
expect_exit 2 "tok/tokenizer.json: token .* outside the model's vocab_size \(256\)" -- "$ZTRAIN" export --tokenizer "$tok" "$TMP/mi" "$TMP/x.gguf"
mkdir "$TMP/adir"
expect_exit 2 "adir" -- "$ZTRAIN" export "$TMP/m" "$TMP/adir"
expect_exit 2 "nodir/x.gguf.*No such file" -- "$ZTRAIN" export "$TMP/m" "$TMP/nodir/x.gguf"
[ -e "$TMP/x.gguf" ] && fail "a refused export left a file"
finish
