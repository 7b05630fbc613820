# Mistral's sliding window through the command line: a config with sliding_window is
# trained, evaluated, checkpointed and merged with the window kept in every config.json
# written; the window changes the numbers when it is shorter than the sequence, and a
# window at least as long as the sequence gives the plain causal numbers bit for bit.
# (Parity with transformers' MistralForCausalLM: tests/test_parity.c, test_generate.c.)
. "$(dirname "$0")/lib.bash"
fix=tests/fixtures/gqa_tied
mk() { # NAME WINDOW(json): a Mistral version of the gqa_tied weights
    mkdir -p "$TMP/$1"
    sed -e 's/"model_type": "llama"/"model_type": "mistral"/' -e 's/"LlamaForCausalLM"/"MistralForCausalLM"/' \
        -e "s/\"torch_dtype\": \"float32\"/\"torch_dtype\": \"float32\", \"sliding_window\": $2/" \
        $fix/config.json >"$TMP/$1/config.json"
    cp $fix/model.safetensors "$TMP/$1/"
}
mk w8 8
mk wnull null
mk w32 32
ev() { "$ZTRAIN" eval --model "$1" --data $fix/tokens.npy --block_size 32 --per_device_eval_batch_size 2 --threads 1 | awk '{print $3}'; }
l8=$(ev "$TMP/w8") lnull=$(ev "$TMP/wnull") l32=$(ev "$TMP/w32")
[ -n "$l8" ] && [ -n "$lnull" ] || fail "eval failed: '$l8' '$lnull'"
[ "$l8" != "$lnull" ] || fail "a window of 8 over 32 tokens left the loss unchanged ($l8)"
[ "$l32" = "$lnull" ] || fail "a window of 32 over 32 tokens is not the causal loss: $l32 vs $lnull"
# absent in a Mistral config: MistralConfig's default window (4096), which masks nothing here
sed 's/, "sliding_window": null//' "$TMP/wnull/config.json" >"$TMP/w32/config.json"
[ "$(ev "$TMP/w32")" = "$lnull" ] || fail "an absent sliding_window changed the loss"

# train with the window, saving a checkpoint; every config.json keeps it
"$ZTRAIN" train --model "$TMP/w8" --data $fix/tokens.npy --block_size 32 --per_device_train_batch_size 2 \
    --max_steps 2 --save_steps 1 --threads 1 --peak_gflops 1000 --output_dir "$TMP/out" --log_jsonl "$TMP/w8.jsonl" \
    >"$TMP/log" 2>&1 || fail "train with a window: $(tail -3 "$TMP/log")"
"$ZTRAIN" train --model "$TMP/wnull" --data $fix/tokens.npy --block_size 32 --per_device_train_batch_size 2 \
    --max_steps 2 --threads 1 --peak_gflops 1000 --log_jsonl "$TMP/wnull.jsonl" >"$TMP/log" 2>&1 ||
    fail "train without a window: $(tail -3 "$TMP/log")"
a=$(grep -o '"loss": [^,]*' "$TMP/w8.jsonl" | tail -1) b=$(grep -o '"loss": [^,]*' "$TMP/wnull.jsonl" | tail -1)
[ -n "$a" ] && [ "$a" != "$b" ] || fail "training losses with and without the window: $a / $b"
"$ZTRAIN" merge-weights "$TMP/out/checkpoint-1" "$TMP/merged" >/dev/null 2>&1 || fail "merge-weights"
for d in "$TMP/out" "$TMP/out/checkpoint-1" "$TMP/merged"; do
    grep -Eq '"sliding_window":[[:space:]]*8' "$d/config.json" || fail "$d/config.json lost the window: $(cat "$d/config.json")"
    grep -Eq '"model_type":[[:space:]]*"mistral"' "$d/config.json" || fail "$d/config.json is not Mistral"
done
# the trained model evaluates the way it was trained: the JSONL's last loss is not far from it
[ -n "$(ev "$TMP/out")" ] || fail "eval of the trained windowed model"
# refused: a Llama config with a window that would mask (transformers' Llama ignores it)
sed 's/"torch_dtype": "float32"/"torch_dtype": "float32", "sliding_window": 8/' $fix/config.json >"$TMP/llama8.json"
expect_exit 2 'llama8.json: key "sliding_window" \(8\) is shorter than max_position_embeddings \(128\).*mistral' -- \
    "$ZTRAIN" init-model --model_config "$TMP/llama8.json" --output_dir "$TMP/x"
sed 's/"sliding_window": 8/"sliding_window": 0/' "$TMP/w8/config.json" >"$TMP/zero.json"
expect_exit 2 'zero.json: key "sliding_window" must be a positive integer or null' -- \
    "$ZTRAIN" init-model --model_config "$TMP/zero.json" --output_dir "$TMP/x"
finish
