# smollm2_parity.sh — the real pretrained model, SmolLM2-135M-Instruct, as scripts/setup.sh
# installs it (a GGUF file; ZT_SMOLLM2_GGUF overrides the path), converted by ztrain and
# held against transformers' own numbers (tests/fixtures/smollm2): eval loss, three fp32
# training steps (losses, grad norms, sampled weights) and 64 greedy tokens.  Short
# sequences (2 x 32 tokens a step) keep it to seconds of compute.
. "$(dirname "$0")/lib.bash"
root=$(cd "$(dirname "$0")/../.." && pwd)
fix=$root/tests/fixtures/smollm2
gguf=${ZT_SMOLLM2_GGUF:-/usr/local/lib/ztrain/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf}
if [ ! -f "$gguf" ]; then
    fail "no SmolLM2 GGUF file at $gguf: run scripts/setup.sh (or set ZT_SMOLLM2_GGUF)"
    finish
fi
m=$TMP/smollm2
"$ZTRAIN" convert --from gguf "$gguf" --output_dir "$m" >"$TMP/convert.out" 2>&1 ||
    fail "convert: $(tail -3 "$TMP/convert.out")"
prompt=$(/usr/bin/python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["prompt"])' "$fix/reference.json")
"$ZTRAIN" eval --model "$m" --data "$fix/tokens.npy" --block_size 32 --output_json "$TMP/eval.json" \
    >"$TMP/eval.out" 2>&1 || fail "eval: $(tail -3 "$TMP/eval.out")"
"$ZTRAIN" train --model "$m" --torch_dtype float32 --data "$fix/tokens.npy" --block_size 32 \
    --shuffle false --per_device_train_batch_size 2 --max_steps 3 --learning_rate 1e-4 --weight_decay 0.1 \
    --output_dir "$TMP/trained" --log_jsonl "$TMP/train.jsonl" >"$TMP/train.out" 2>&1 ||
    fail "train: $(tail -3 "$TMP/train.out")"
"$ZTRAIN" generate --model "$m" --prompt "$prompt" --max_new_tokens 64 --torch_dtype fp32 \
    >"$TMP/gen.txt" 2>"$TMP/gen.err" || fail "generate: $(tail -3 "$TMP/gen.err")"
grep -q '64 new tokens' "$TMP/gen.err" || fail "generate did not make 64 tokens: $(cat "$TMP/gen.err")"
if [ "$fails" -eq 0 ]; then
    /usr/bin/python3 "$root/tests/cli/smollm2_parity.py" "$fix" "$TMP/eval.json" "$TMP/train.jsonl" \
        "$TMP/trained/model.safetensors" "$TMP/gen.txt" || fail "ztrain differs from transformers on SmolLM2"
fi
finish
