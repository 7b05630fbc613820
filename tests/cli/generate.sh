#!/usr/bin/env bash
# generate.sh — `ztrain generate` on the byte-level fixture model (tests/fixtures/generate):
# greedy fp32 output equals Hugging Face's generate (greedy_1.bin, written by
# tools/make_generate_fixture.py), seeded sampling repeats itself, --stop ends the
# text right after the stop string, bf16 models run, and bad input exits 2 naming the flag.
source "$(dirname "$0")/lib.bash"
fix=tests/fixtures/generate

"$ZTRAIN" generate --model $fix --prompt "The licence" --max_new_tokens 40 >"$TMP/greedy.bin" 2>"$TMP/err" ||
    fail "greedy generate failed: $(cat "$TMP/err")"
cmp -s "$TMP/greedy.bin" $fix/greedy_1.bin || fail "greedy bytes differ from HF generate's (greedy_1.bin)"
grep -q "40 new tokens" "$TMP/err" || fail "no timing line on stderr: $(cat "$TMP/err")"

# --device: on the emulated device (buffers the host cannot read: every weight, cache and
# logit goes through to_device / to_host) greedy fp32 and seeded bf16 sampling give the
# CPU's bytes; a device that is not there is refused with exit 2
"$ZTRAIN" generate --model $fix --prompt "The licence" --max_new_tokens 40 --device emu >"$TMP/emu.bin" \
    2>"$TMP/err" || fail "generate --device emu failed: $(cat "$TMP/err")"
cmp -s "$TMP/emu.bin" $fix/greedy_1.bin || fail "greedy bytes on emu differ from HF generate's (greedy_1.bin)"
grep -q "on emu:0 " "$TMP/err" || fail "the timing line does not name the device: $(cat "$TMP/err")"
for d in cpu emu; do
    "$ZTRAIN" generate --model $fix --prompt "The licence" --max_new_tokens 20 --torch_dtype bf16 \
        --temperature 0.8 --seed 9 --device $d >"$TMP/bf16_$d" 2>/dev/null || fail "bf16 sampling on $d failed"
done
cmp -s "$TMP/bf16_cpu" "$TMP/bf16_emu" || fail "bf16 sampling on emu differs from the CPU's"
expect_exit 2 "--device tpu: .*expected cpu or cuda" -- "$ZTRAIN" generate --model $fix --prompt x --device tpu

sample() { "$ZTRAIN" generate --model $fix --prompt "The licence" --max_new_tokens 30 --temperature 0.9 \
    --top_k 40 --top_p 0.95 "$@" 2>/dev/null; }
sample --seed 5 >"$TMP/s5a" && sample --seed 5 >"$TMP/s5b" && sample --seed 6 >"$TMP/s6" ||
    fail "sampling failed"
cmp -s "$TMP/s5a" "$TMP/s5b" || fail "--seed 5 gave two different continuations"
cmp -s "$TMP/s5a" "$TMP/s6" && fail "--seed 5 and --seed 6 gave the same continuation"
[ "$(stat -c %s "$TMP/s5a")" -eq 30 ] || fail "sampled $(stat -c %s "$TMP/s5a") bytes, expected 30"

# --stop: greedy bytes 5..7 as the stop string; the output is the greedy text up to them
stop=$(head -c 8 $fix/greedy_1.bin | tail -c 3)
if printf '%s' "$stop" | grep -q '[[:cntrl:]]'; then fail "fixture bytes 5..7 are not printable"; fi
"$ZTRAIN" generate --model $fix --prompt "The licence" --max_new_tokens 40 --stop "$stop" >"$TMP/stop" 2>"$TMP/err" ||
    fail "generate --stop failed: $(cat "$TMP/err")"
want=$(head -c 8 $fix/greedy_1.bin | od -An -tx1)
got=$(od -An -tx1 <"$TMP/stop")
[ "$got" = "$want" ] || fail "--stop output is [$got], expected the first 8 greedy bytes [$want]"
grep -q "stopped by stop string" "$TMP/err" || fail "stop reason not reported: $(cat "$TMP/err")"

# bf16: a model saved in bf16 computes in bf16 by default; an fp32 one on request
"$ZTRAIN" init-model --model_config $fix/config.json --output_dir "$TMP/bf16" --torch_dtype bf16 --seed 3 >/dev/null ||
    fail "init-model bf16 failed"
"$ZTRAIN" generate --model "$TMP/bf16" --prompt "Hello" --max_new_tokens 12 >"$TMP/b" 2>"$TMP/err" ||
    fail "bf16 generate failed: $(cat "$TMP/err")"
grep -q "bf16" "$TMP/err" && [ "$(stat -c %s "$TMP/b")" -eq 12 ] || fail "bf16 run: $(cat "$TMP/err")"
"$ZTRAIN" generate --model $fix --prompt "The licence" --max_new_tokens 10 --torch_dtype bf16 >/dev/null 2>&1 ||
    fail "--torch_dtype bf16 on an fp32 model failed"

# an eos_token_id in generation_config.json ends generation there (the token is not printed)
cp -r $fix "$TMP/eos"
eos=$(head -c 4 $fix/greedy_1.bin | tail -c 1 | od -An -tu1 | tr -d ' ')
printf '{"eos_token_id": %s}\n' "$eos" >"$TMP/eos/generation_config.json"
"$ZTRAIN" generate --model "$TMP/eos" --prompt "The licence" --max_new_tokens 40 >"$TMP/e" 2>"$TMP/err" ||
    fail "eos run failed: $(cat "$TMP/err")"
grep -q "stopped by end of sequence" "$TMP/err" || fail "eos not honoured: $(cat "$TMP/err")"
printf '{"eos_token_id": "x"}\n' >"$TMP/eos/generation_config.json"
expect_exit 2 'generation_config.json: eos_token_id' -- "$ZTRAIN" generate --model "$TMP/eos" --prompt a

# --tokenizer: the prompt is encoded by tokenizer.json (as many ids as `ztrain tokenize` gives)
tok=tests/fixtures/tokenizers/llama2
sed 's/"vocab_size": 256/"vocab_size": 1500/' $fix/config.json >"$TMP/cfg1500.json"
"$ZTRAIN" init-model --model_config "$TMP/cfg1500.json" --output_dir "$TMP/m1500" --seed 2 >/dev/null || fail "init-model 1500"
printf 'Hello world, héllo' >"$TMP/prompt.txt"
"$ZTRAIN" tokenize --tokenizer $tok --input "$TMP/prompt.txt" --output "$TMP/prompt.bin" --eos_between_documents false \
    >/dev/null 2>&1 || fail "tokenize failed"
n=$(( $(stat -c %s "$TMP/prompt.bin") / 2 ))
"$ZTRAIN" generate --model "$TMP/m1500" --tokenizer $tok --prompt "$(cat "$TMP/prompt.txt")" --max_new_tokens 8 \
    >"$TMP/t" 2>"$TMP/err" || fail "generate --tokenizer failed: $(cat "$TMP/err")"
grep -q "$n prompt tokens" "$TMP/err" && [ "$n" -lt 18 ] || fail "expected $n prompt tokens: $(cat "$TMP/err")"
expect_exit 2 'tokenizer.*1500 tokens, more than the model.s vocab_size 256' -- "$ZTRAIN" generate --model $fix --tokenizer $tok --prompt hi

expect_exit 2 '--model and --prompt are required' -- "$ZTRAIN" generate --prompt hi
expect_exit 2 'prompt is empty' -- "$ZTRAIN" generate --model $fix --prompt ""
expect_exit 2 '--top_p' -- "$ZTRAIN" generate --model $fix --prompt hi --temperature 1 --top_p 0
expect_exit 2 '--temperature' -- "$ZTRAIN" generate --model $fix --prompt hi --temperature -1
expect_exit 2 '--torch_dtype' -- "$ZTRAIN" generate --model $fix --prompt hi --torch_dtype fp16
expect_exit 2 'max_position_embeddings 128' -- "$ZTRAIN" generate --model $fix --prompt hi --max_new_tokens 127
expect_exit 2 'config.json' -- "$ZTRAIN" generate --model "$TMP/none" --prompt hi
expect_exit 2 'vocab_size is 300' -- "$ZTRAIN" generate --model tests/fixtures/untied_odd --prompt hi
finish
