#!/usr/bin/env bash
# eval_during_training.sh — train --eval_data/--eval_steps/--per_device_eval_batch_size
# (HF Trainer's eval_strategy="steps"): eval records in the JSONL every N steps with
# their perplexity, the eval on the progress line, the same number as `ztrain eval` of
# the saved model, and the same number on 1, 2 and 4 ranks under FSDP FULL_SHARD
# (ZeRO-3, whose all-gathers every rank must join even when its eval slice is padding).
source "$(dirname "$0")/lib.bash"
head -c 30000 /usr/share/common-licenses/GPL-3 >"$TMP/train.txt"
tail -c 2049 /usr/share/common-licenses/GPL-3 >"$TMP/eval.txt" # 64 windows of 32: 4 ranks x 3 leave a padded tail
"$ZTRAIN" init-model --model_config tests/fixtures/gqa_tied/config.json --output_dir "$TMP/init" >/dev/null ||
    fail "init-model"
# run W LR LOG [extra]: 4 sequences per step whatever W is
run() {
    local W=$1 lr=$2 log=$3 launcher=("${mpi[@]}" -np "$1")
    shift 3
    [ "$W" -eq 1 ] && launcher=() # one rank runs without mpirun
    "${launcher[@]}" "$ZTRAIN" train --model "$TMP/init" --data "$TMP/train.txt" --use_fsdp \
        --eval_data "$TMP/eval.txt" --eval_steps 2 --per_device_eval_batch_size 3 --block_size 32 \
        --per_device_train_batch_size $((4 / W)) --max_steps 4 --learning_rate "$lr" --peak_gflops 1 --log_jsonl "$log" "$@" \
        >"$TMP/out" 2>"$TMP/err" || fail "train on $W ranks: $(tail -3 "$TMP/err")"
}
eval_losses() { grep -o '"eval_loss": [^,]*' "$1" | cut -d' ' -f2 | tr '\n' ' '; }

# 1 rank: eval after steps 2 and 4, as records of their own, also on stdout
run 1 1e-3 "$TMP/a1.jsonl" --output_dir "$TMP/model"
[ "$(grep -c '"eval_loss"' "$TMP/a1.jsonl")" -eq 2 ] || fail "expected 2 eval records: $(cat "$TMP/a1.jsonl")"
grep '"eval_loss"' "$TMP/a1.jsonl" | grep -q '"grad_norm"' && fail "eval records mixed into step records"
grep -q '^{"step": 2, "eval_loss"' "$TMP/a1.jsonl" && grep -q '^{"step": 4, "eval_loss"' "$TMP/a1.jsonl" ||
    fail "eval records not at steps 2 and 4"
grep -q '"eval_tokens": 2048' "$TMP/a1.jsonl" || fail "eval did not cover all 64 windows of 32 tokens"
grep -o '"eval_loss": [^,]*, "eval_perplexity": [^,]*' "$TMP/a1.jsonl" |
    awk '{l=$2+0; p=$4+0; if (p < 1.01 || (p - exp(l)) / p > 1e-12 || (exp(l) - p) / p > 1e-12) bad=1} END {exit bad}' ||
    fail "eval_perplexity is not exp(eval_loss)"
grep -q "step 4: eval loss" "$TMP/out" || fail "no eval line on stdout: $(cat "$TMP/out")"
# the last eval is the saved model's loss: `ztrain eval` over the same windows (batch 1 keeps every one)
last=$(eval_losses "$TMP/a1.jsonl" | awk '{print $2}')
ev=$("$ZTRAIN" eval --model "$TMP/model" --data "$TMP/eval.txt" --block_size 32 --per_device_eval_batch_size 1 |
    awk '{print $3}')
awk -v a="$last" -v b="$ev" 'BEGIN {d = a - b; if (d < 0) d = -d; exit !(d <= 1e-6 * b)}' ||
    fail "final eval_loss $last differs from ztrain eval's $ev"

# with a learning rate of 0 every world size evaluates the same weights: the same number, to the bit
run 1 0 "$TMP/z1.jsonl"
run 2 0 "$TMP/z2.jsonl"
run 4 0 "$TMP/z4.jsonl" --progress
z1=$(eval_losses "$TMP/z1.jsonl") z2=$(eval_losses "$TMP/z2.jsonl") z4=$(eval_losses "$TMP/z4.jsonl")
[ -n "$z1" ] && [ "$z1" = "$z2" ] && [ "$z1" = "$z4" ] || fail "eval loss differs by world size: 1: $z1 2: $z2 4: $z4"
# --progress with stderr in a file draws no bar (trainer_vocab.sh draws it on a
# terminal): the evaluation is a line of its own on stdout
grep -q $'\r' "$TMP/err" && fail "--progress wrote carriage returns into a file"
grep -q "step 4: eval loss 5\.[0-9]*" "$TMP/out" || fail "no eval line on stdout: $(cat "$TMP/out")"
# training on 2 ranks sums gradients in another order: the eval agrees to ~1e-9, not to the bit
run 2 1e-3 "$TMP/a2.jsonl"
read -r a b <<<"$(eval_losses "$TMP/a1.jsonl")"
read -r c d <<<"$(eval_losses "$TMP/a2.jsonl")"
awk -v a="$a" -v b="$b" -v c="$c" -v d="$d" \
    'function r(x, y) { x = x - y; return (x < 0 ? -x : x) / y } BEGIN { exit !(r(a, c) < 1e-6 && r(b, d) < 1e-6) }' ||
    fail "1 vs 2 ranks after training: $a $b vs $c $d"

# --tokenizer: a .txt --eval_data is tokenized as --data is (the ids' count decides eval_tokens)
export ZTRAIN_CACHE_DIR="$TMP/cache"
sed 's/"vocab_size": 256/"vocab_size": 1200/' tests/fixtures/gqa_tied/config.json >"$TMP/c1200.json"
"$ZTRAIN" init-model --model_config "$TMP/c1200.json" --output_dir "$TMP/m1200" >/dev/null || fail "init-model 1200"
"$ZTRAIN" tokenize --tokenizer tests/fixtures/tokenizers/gpt2 --input "$TMP/eval.txt" --output "$TMP/eval.npy" >/dev/null 2>&1 ||
    fail "tokenize"
"$ZTRAIN" train --model "$TMP/m1200" --data "$TMP/train.txt" --tokenizer tests/fixtures/tokenizers/gpt2 \
    --eval_data "$TMP/eval.txt" --block_size 16 --per_device_train_batch_size 2 --max_steps 1 --peak_gflops 1 \
    --log_jsonl "$TMP/t.jsonl" >"$TMP/out" 2>&1 || fail "train --tokenizer --eval_data: $(tail -3 "$TMP/out")"
"$ZTRAIN" eval --model "$TMP/m1200" --data "$TMP/eval.npy" --block_size 16 --per_device_eval_batch_size 1 >"$TMP/e" ||
    fail "eval of eval.npy"
want=$(awk '{print $5}' "$TMP/e")
grep -q "\"eval_tokens\": $want," "$TMP/t.jsonl" || fail "eval_tokens is not the tokenized $want: $(cat "$TMP/t.jsonl")"

expect_exit 2 '--eval_steps 5 needs --eval_data' -- "$ZTRAIN" train --model "$TMP/init" --data "$TMP/train.txt" --eval_steps 5
expect_exit 2 'eval_data.*nope' -- "$ZTRAIN" train --model "$TMP/init" --data "$TMP/train.txt" --eval_data "$TMP/nope.txt"
# one token predicts nothing (a stream shorter than a block is evaluated over its length: eval_every_token.sh)
head -c 1 "$TMP/eval.txt" >"$TMP/short.txt"
expect_exit 2 'eval_data .*short.txt.*too short' -- "$ZTRAIN" train --model "$TMP/init" --data "$TMP/train.txt" \
    --eval_data "$TMP/short.txt" --block_size 32
finish
