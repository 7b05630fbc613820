# The final step is checkpointed whenever checkpoints are saved (issue 33 point
# 4), as Hugging Face's Trainer saves at the end of training under
# save_strategy "steps": a multiple of --save_steps or not; never without
# --save_steps.
. "$(dirname "$0")/lib.bash"
fix=tests/fixtures/gqa_tied
args=(train --model $fix --data $fix/tokens.npy --block_size 16 --per_device_train_batch_size 1 --threads 1
      --peak_gflops 1 --progress false)
"$ZTRAIN" "${args[@]}" --max_steps 4 --save_steps 2 --output_dir "$TMP/a" > "$TMP/a.log" 2>&1 || fail "a: $(cat "$TMP/a.log")"
got=$(cd "$TMP/a" && ls -d checkpoint-* | tr '\n' ' ')
[ "$got" = "checkpoint-2 checkpoint-4 " ] || fail "max_steps 4, save_steps 2: $got"
grep -q "checkpoint saved to $TMP/a/checkpoint-4" "$TMP/a.log" || fail "no line for checkpoint-4: $(cat "$TMP/a.log")"
"$ZTRAIN" checkpoint show "$TMP/a/checkpoint-4" > "$TMP/show" 2>&1 || fail "checkpoint-4 does not verify: $(cat "$TMP/show")"
"$ZTRAIN" "${args[@]}" --max_steps 3 --save_steps 2 --output_dir "$TMP/b" > /dev/null 2>&1 || fail "b"
got=$(cd "$TMP/b" && ls -d checkpoint-* | tr '\n' ' ')
[ "$got" = "checkpoint-2 checkpoint-3 " ] || fail "max_steps 3, save_steps 2: $got"
"$ZTRAIN" "${args[@]}" --max_steps 2 --output_dir "$TMP/c" > /dev/null 2>&1 || fail "c"
ls -d "$TMP"/c/checkpoint-* >/dev/null 2>&1 && fail "no --save_steps: a checkpoint was written"
# resuming from the final checkpoint has nothing left to train, and says so by ending at once
out=$("$ZTRAIN" "${args[@]}" --max_steps 4 --output_dir "$TMP/d" --resume_from_checkpoint "$TMP/a/checkpoint-4" 2>&1) ||
    fail "resume from the final checkpoint: $out"
finish
