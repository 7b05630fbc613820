# eval_every_token.sh — `ztrain eval` (and train's --eval_data) evaluate every
# token of the stream whatever the batch size: n tokens give n - 1 predictions,
# in windows of --block_size T, the last of which may be shorter than T and is
# evaluated over its own length; the loss is the token-weighted mean, so batch 1
# and batch 8 give the same number (to the bit: each window's rows are computed
# alone).  And the silent no-ops of train: --save_steps without --output_dir is
# refused, a run without --output_dir says that the model is discarded.
. "$(dirname "$0")/lib.bash"
fix=tests/fixtures/gqa_tied
head -c 1000 /usr/share/common-licenses/GPL-3 >"$TMP/a.txt" # 1000 byte tokens: 999 predictions
ev() { "$ZTRAIN" eval --model $fix --data "$1" --threads 1 "${@:2}"; }
out1=$(ev "$TMP/a.txt" --block_size 32 --per_device_eval_batch_size 1) || fail "eval batch 1"
out8=$(ev "$TMP/a.txt" --block_size 32 --per_device_eval_batch_size 8) || fail "eval batch 8"
out5=$(ev "$TMP/a.txt" --block_size 32 --per_device_eval_batch_size 5) || fail "eval batch 5"
printf '%s' "$out1" | grep -q "over 999 tokens" || fail "batch 1 does not count 999 tokens: $out1"
[ "$out1" = "$out8" ] && [ "$out1" = "$out5" ] || fail "the loss depends on the batch size: 1: $out1  8: $out8  5: $out5"
# 999 = 31 x 32 + 7: the last window holds 7 predictions; its loss is theirs alone,
# so the whole is (31 windows' sum + the short window's sum) / 999.  Check the
# weighting against two evals whose streams split at a window boundary.
head -c 993 "$TMP/a.txt" >"$TMP/head.txt"      # 31 whole windows (992 predictions)
tail -c 8 "$TMP/a.txt" >"$TMP/tail.txt"        # the short window: 8 tokens, 7 predictions
lh=$(ev "$TMP/head.txt" --block_size 32 | awk '{print $3}')
lt=$(ev "$TMP/tail.txt" --block_size 32 | awk '{print $3}')
ev "$TMP/tail.txt" --block_size 32 | grep -q "over 7 tokens" || fail "a stream shorter than a block: $(ev "$TMP/tail.txt" --block_size 32 2>&1)"
la=$(printf '%s' "$out1" | awk '{print $3}')
awk -v h="$lh" -v t="$lt" -v a="$la" 'BEGIN { w = (992 * h + 7 * t) / 999; d = w - a; exit !(d < 1e-12 && d > -1e-12) }' ||
    fail "not the token-weighted mean: $la vs (992 x $lh + 7 x $lt) / 999"
# --max_batches K: the first K x B windows
ev "$TMP/a.txt" --block_size 32 --per_device_eval_batch_size 2 --max_batches 3 | grep -q "over 192 tokens" ||
    fail "--max_batches 3 of 2 windows: $(ev "$TMP/a.txt" --block_size 32 --per_device_eval_batch_size 2 --max_batches 3 2>&1)"
# a single token predicts nothing
head -c 1 "$TMP/a.txt" >"$TMP/one.txt"
expect_exit 2 "^ztrain: error: --data .*one.txt: 1 token is too short" -- "$ZTRAIN" eval --model $fix --data "$TMP/one.txt"
# training's held-out eval counts the same tokens
train=("$ZTRAIN" train --model $fix --data $fix/tokens.npy --threads 1 --block_size 16 --per_device_train_batch_size 2
       --peak_gflops 1000 --progress false --max_steps 1)
"${train[@]}" --eval_data "$TMP/a.txt" --per_device_eval_batch_size 4 --log_jsonl "$TMP/t.jsonl" >/dev/null 2>&1 ||
    fail "train --eval_data"
grep -q '"eval_tokens": 999' "$TMP/t.jsonl" || fail "train's eval does not count 999 tokens: $(grep eval "$TMP/t.jsonl")"

# --save_steps without --output_dir: refused before anything runs
expect_exit 2 "^ztrain: error: --save_steps 1 needs --output_dir" -- "${train[@]}" --save_steps 1
# no --output_dir: said once, on stderr
"${train[@]}" >"$TMP/out" 2>"$TMP/err" || fail "train without --output_dir: $(cat "$TMP/err")"
[ "$(grep -c "warning: no --output_dir: the trained model is discarded" "$TMP/err")" -eq 1 ] ||
    fail "no warning that the model is discarded: $(cat "$TMP/err")"
"${train[@]}" --output_dir "$TMP/m" >"$TMP/out" 2>"$TMP/err" || fail "train with --output_dir"
grep -q "discarded" "$TMP/err" && fail "a warning with --output_dir given: $(cat "$TMP/err")"
finish
