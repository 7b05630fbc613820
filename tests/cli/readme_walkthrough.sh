# readme_walkthrough.sh — the README's "Text, step by step" block runs as written.
# The block between <!-- walkthrough: begin --> and <!-- walkthrough: end --> is
# taken from README.md and run by bash -e in an empty directory holding build/ztrain
# (the binary under test) and examples/, so a command that fails, or a README that
# drifts from the flags, fails here.  Then what the walkthrough promises: a model
# sized for the tokenizer with its special ids, the tokenizer saved beside the
# weights, and a greedy continuation that is words, not blank lines.
. "$(dirname "$0")/lib.bash"
root=$(cd "$(dirname "$0")/../.." && pwd)
script=$(awk '/<!-- walkthrough: begin -->/ {on = 1; next} /<!-- walkthrough: end -->/ {on = 0}
              on && !/^```/' "$root/README.md")
[ -n "$script" ] || fail "README.md has no walkthrough block"
printf '%s\n' "$script" | grep -q '\.\.\.' && fail "the walkthrough holds a literal '...': $(printf '%s\n' "$script" | grep '\.\.\.')"
mkdir -p "$TMP/w/build"
ln -s "$(cd "$(dirname "$ZTRAIN")" && pwd)/$(basename "$ZTRAIN")" "$TMP/w/build/ztrain"
ln -s "$root/examples" "$TMP/w/examples"
(cd "$TMP/w" && ZTRAIN_CACHE_DIR="$TMP/cache" bash -e -c "$script") >"$TMP/out" 2>&1 ||
    fail "the README walkthrough failed: $(tail -5 "$TMP/out")"
w=$TMP/w/out
grep -q '"vocab_size":[[:space:]]*512' "$w/init/config.json" || fail "init-model --tokenizer: vocab_size is not 512: $(cat "$w/init/config.json")"
for key in bos_token_id eos_token_id; do
    grep -q "\"$key\":[[:space:]]*0" "$w/model/config.json" || fail "the saved model lost $key: $(cat "$w/model/config.json")"
done
for f in tokenizer.json tokenizer_config.json special_tokens_map.json; do
    cmp -s "$w/tok/$f" "$w/model/$f" || fail "the saved model does not hold the tokenizer's $f"
done
[ -s "$w/train.svg" ] || fail "no chart"
grep -q '^eval loss [0-9.]* over [0-9]* tokens' "$TMP/out" || fail "no eval line: $(cat "$TMP/out")"
# the greedy continuation, as the walkthrough runs it: words (the tiny model has learnt the text)
text=$(cd "$TMP/w" && "$ZTRAIN" generate --model out/model --prompt "The GNU General Public License" \
    --max_new_tokens 32 2>/dev/null)
words=$(printf '%s' "$text" | grep -oE '[A-Za-z]{3,}' | wc -l)
[ "$words" -ge 4 ] || fail "the greedy continuation is not text ($words words): '$text'"
# the LoRA lines: PEFT's adapter files, and the merged model beside the tokenizer
for f in adapter_model.safetensors adapter_config.json; do [ -s "$w/lora/$f" ] || fail "out/lora has no $f"; done
grep -q '"peft_type":[[:space:]]*"LORA"' "$w/lora/adapter_config.json" || fail "adapter_config.json: $(head -c 300 "$w/lora/adapter_config.json")"
[ -s "$w/merged/model.safetensors" ] && [ -s "$w/merged/config.json" ] || fail "merge-adapter wrote no model: $(ls "$w/merged")"
cmp -s "$w/model/tokenizer.json" "$w/merged/tokenizer.json" || fail "the merged model does not carry the tokenizer"
grep -q "wrote out/model.gguf: .* with the tokenizer" "$TMP/out" || fail "no GGUF export with the tokenizer: $(tail -3 "$TMP/out")"
# and, as the README says, mostly words the licence uses: at least half are in the training text
known=0
for word in $(printf '%s' "$text" | grep -oE '[A-Za-z]{3,}'); do
    grep -qw -- "$word" "$TMP/w/corpus.txt" && known=$((known + 1))
done
[ $((2 * known)) -ge "$words" ] || fail "$known of $words words of the continuation are the licence's: '$text'"
finish
