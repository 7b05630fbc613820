#!/usr/bin/env bash
# chat_train.sh — `train` on TRL's conversational records (tests/fixtures/chat_data):
# messages and prompt/completion lists go through the tokenizer's chat template
# (their ids and masks are checked against TRL in test_chat_data), --assistant_only_loss
# says so, and is refused for data that is not conversational and for a template
# without {% generation %} markers.
source "$(dirname "$0")/lib.bash"
export ZTRAIN_CACHE_DIR="$TMP/cache"
fix=tests/fixtures/chat_data
args=(--model tests/fixtures/generate_chat --tokenizer $fix --max_steps 2 --per_device_train_batch_size 1
      --block_size 32 --learning_rate 1e-3)
for f in messages prompt_completion; do
    "$ZTRAIN" train "${args[@]}" --data $fix/$f.jsonl --assistant_only_loss >"$TMP/$f.out" 2>&1 ||
        fail "train on $f.jsonl failed: $(tail -3 "$TMP/$f.out")"
    grep -q "loss: on the assistant's tokens only" "$TMP/$f.out" || fail "$f: no assistant-only loss line"
    grep -q "step 2/2: loss" "$TMP/$f.out" || fail "$f: did not train 2 steps"
done
"$ZTRAIN" train "${args[@]}" --data $fix/messages.jsonl >"$TMP/all.out" 2>&1 || fail "train on messages failed"
grep -q "conversational records, with their loss mask" "$TMP/all.out" || fail "messages not read as conversations"
expect_exit 2 "--assistant_only_loss: .* is not conversational" -- "$ZTRAIN" train "${args[@]}" \
    --data tests/fixtures/text/multilingual.txt --assistant_only_loss
expect_exit 2 "no \{% generation %\} markers" -- "$ZTRAIN" train "${args[@]}" --tokenizer tests/fixtures/generate_chat \
    --data $fix/messages.jsonl --assistant_only_loss
exit $((fails > 0))
