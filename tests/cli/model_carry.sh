# model_carry.sh — a saved model keeps what the model it came from carried
# (io/hf_carry.h), as Trainer.save_model does: every config.json key it was loaded
# with (bos/eos/pad ids, transformers_version, ...), generation_config.json, and the
# tokenizer files; in OUTPUT_DIR, in each checkpoint-N (listed in its manifest), and
# through merge-weights.  init-model --tokenizer sizes the vocabulary from the
# tokenizer and writes its special token ids.
. "$(dirname "$0")/lib.bash"
fix=tests/fixtures/gqa_tied
src=$TMP/src
mkdir -p "$src"
cp $fix/model.safetensors "$src/"
# the fixture's config with keys transformers writes and ztrain does not compute with
sed 's/"torch_dtype": "float32"/"torch_dtype": "float32", "dtype": "float32", "bos_token_id": 5, "eos_token_id": [6, 7], "pad_token_id": null, "transformers_version": "5.25.0", "use_cache": true/' \
    $fix/config.json >"$src/config.json"
printf '{"bos_token_id": 5, "eos_token_id": [6, 7], "do_sample": true, "temperature": 0.6}\n' >"$src/generation_config.json"
cp tests/fixtures/tokenizers/ztrain_trained/* "$src/"

# JSON value of key in file, compacted (cJSON indents with tabs)
val() { tr -d ' \t\n' <"$1" | grep -o "\"$2\":\(\[[^]]*\]\|[^,}]*\)" | head -1 | cut -d: -f2-; }
check_carried() { # DIR WHAT
    [ "$(val "$1/config.json" bos_token_id)" = 5 ] || fail "$2: bos_token_id lost: $(cat "$1/config.json")"
    [ "$(val "$1/config.json" eos_token_id)" = "[6,7]" ] || fail "$2: eos_token_id lost: $(val "$1/config.json" eos_token_id)"
    [ "$(val "$1/config.json" pad_token_id)" = null ] || fail "$2: pad_token_id lost"
    [ "$(val "$1/config.json" transformers_version)" = '"5.25.0"' ] || fail "$2: transformers_version lost"
    [ "$(val "$1/config.json" use_cache)" = true ] || fail "$2: use_cache lost"
    cmp -s "$src/generation_config.json" "$1/generation_config.json" || fail "$2: generation_config.json not copied"
    for f in tokenizer.json tokenizer_config.json special_tokens_map.json; do
        cmp -s "$src/$f" "$1/$f" || fail "$2: tokenizer file $f not saved"
    done
}

run=("$ZTRAIN" train --model "$src" --data $fix/tokens.npy --threads 1 --block_size 16 --per_device_train_batch_size 2
     --peak_gflops 1000 --progress false --max_steps 2)
"${run[@]}" --save_steps 1 --output_dir "$TMP/out" >"$TMP/log" 2>&1 || fail "train: $(tail -3 "$TMP/log")"
check_carried "$TMP/out" "the final model"
check_carried "$TMP/out/checkpoint-1" "checkpoint-1"
# the files are in the checkpoint's manifest, so they are verified with it
grep -q '"tokenizer.json"' "$TMP/out/checkpoint-1/manifest.json" || fail "tokenizer.json not in the manifest"
"$ZTRAIN" checkpoint show "$TMP/out/checkpoint-1" >/dev/null || fail "checkpoint show on a checkpoint with carried files"
"$ZTRAIN" merge-weights "$TMP/out/checkpoint-1" "$TMP/merged" >/dev/null || fail "merge-weights"
check_carried "$TMP/merged" "merge-weights"
# the saved config reads back; a bf16 save writes "dtype" as its torch_dtype (they must agree)
"${run[@]}" --torch_dtype bfloat16 --output_dir "$TMP/bf" >"$TMP/log" 2>&1 || fail "bf16 train: $(tail -3 "$TMP/log")"
[ "$(val "$TMP/bf/config.json" dtype)" = '"bfloat16"' ] || fail "dtype does not follow the saved torch_dtype: $(cat "$TMP/bf/config.json")"
"$ZTRAIN" eval --model "$TMP/bf" --data $fix/tokens.npy --block_size 16 --threads 1 >/dev/null || fail "eval of the saved model"

# init-model --tokenizer: the tokenizer's vocabulary and special ids, its files beside the weights
tok=$TMP/tok
cp -r tests/fixtures/tokenizers/ztrain_trained "$tok"
"$ZTRAIN" init-model --model_config $fix/config.json --tokenizer "$tok" --output_dir "$TMP/init" >"$TMP/log" 2>&1 ||
    fail "init-model --tokenizer: $(cat "$TMP/log")"
v=$(val "$TMP/init/config.json" vocab_size)
[ "$v" -gt 256 ] || fail "init-model --tokenizer: vocab_size $v is not the tokenizer's"
grep -q "vocab_size $v (the tokenizer's) instead of the config's 256" "$TMP/log" || fail "no note of the vocabulary: $(cat "$TMP/log")"
[ "$(val "$TMP/init/config.json" bos_token_id)" = 0 ] && [ "$(val "$TMP/init/config.json" eos_token_id)" = 0 ] ||
    fail "init-model --tokenizer: bos/eos ids: $(cat "$TMP/init/config.json")"
grep -q pad_token_id "$TMP/init/config.json" && fail "a pad_token_id without a pad token"
cmp -s "$tok/tokenizer.json" "$TMP/init/tokenizer.json" || fail "init-model --tokenizer: tokenizer.json not saved"
# a pad token named in tokenizer_config.json becomes pad_token_id
sed 's/"eos_token"/"pad_token": "<|endoftext|>", "eos_token"/' tests/fixtures/tokenizers/ztrain_trained/tokenizer_config.json >"$tok/tokenizer_config.json"
"$ZTRAIN" init-model --model_config $fix/config.json --tokenizer "$tok" --output_dir "$TMP/init2" >/dev/null 2>&1 || fail "init-model with a pad token"
[ "$(val "$TMP/init2/config.json" pad_token_id)" = 0 ] || fail "pad_token_id: $(cat "$TMP/init2/config.json")"
# generate finds the tokenizer saved with the model (without it, ids are bytes: vocab 256 only)
out=$("$ZTRAIN" generate --model "$TMP/init" --prompt "The" --max_new_tokens 2 --threads 1 2>&1) ||
    fail "generate with the tokenizer saved in the model: $out"
expect_exit 2 "tokenizer: .*nope" -- "$ZTRAIN" init-model --model_config $fix/config.json --tokenizer "$TMP/nope" --output_dir "$TMP/x"

# a key ztrain does not know is accepted with one line naming it and saved back with
# the model, as transformers keeps it; a key of another architecture's math is refused
sed 's/"torch_dtype"/"my_experiment": {"id": 7, "tags": ["a", 1.50]}, "torch_dtype"/' $fix/config.json >"$TMP/own.json"
"$ZTRAIN" init-model --model_config "$TMP/own.json" --output_dir "$TMP/own" >"$TMP/log" 2>&1 || fail "init-model with a key of its own: $(cat "$TMP/log")"
[ "$(grep -c 'key "my_experiment" not used by ztrain; kept' "$TMP/log")" = 1 ] || fail "no one-line note of the unknown key: $(cat "$TMP/log")"
[ "$(val "$TMP/own/config.json" my_experiment)" = '{"id":7' ] && grep -q '1.50' "$TMP/own/config.json" ||
    fail "the unknown key is not saved back as written: $(cat "$TMP/own/config.json")"
sed 's/"torch_dtype"/"partial_rotary_factor": 0.5, "torch_dtype"/' $fix/config.json >"$TMP/math.json"
expect_exit 2 'unsupported key "partial_rotary_factor": it changes the model.s math' -- "$ZTRAIN" init-model --model_config "$TMP/math.json" --output_dir "$TMP/y"
finish
