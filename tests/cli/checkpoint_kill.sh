# Crash consistency (issue 12, point 3): kill -9 the job at random moments
# while it saves a checkpoint every step, 24 times, half of them in runs that
# resume from checkpoint-2 and rewrite the checkpoint-N an earlier run wrote
# (with another learning rate, so the two runs' files differ).  After every
# kill each checkpoint-N present verifies against its manifest (never partial,
# never two runs mixed: `ztrain checkpoint show` rereads every file of each one
# that changed since it last verified), and
# 'latest' resumes from a complete one.  A kill must land inside a save often
# enough to mean something: the leftover temporary directory shows it did.
# The next successful save leaves no temporary files behind.
. "$(dirname "$0")/lib.bash"
fix=tests/fixtures/gqa_tied
out="$TMP/out"
args=(train --model $fix --data $fix/tokens.npy --block_size 16 --per_device_train_batch_size 1 --threads 1
      --peak_gflops 1 --max_steps 30 --save_steps 1 --progress false --output_dir "$out")
"$ZTRAIN" "${args[@]}" > /dev/null 2>&1 || fail "the first run"
cp -r "$out/checkpoint-2" "$TMP/ck2"
mid_save=0
declare -A verified # checkpoint directory -> its listing when it last verified
for i in $(seq 1 24); do
    # two runs resume from checkpoint-2 and rewrite checkpoint-3..29: A's learning
    # rate and another one, so their files differ
    lr=5e-5
    [ $((i % 2)) -eq 0 ] && lr=7e-5
    before=$(ls -a "$out" | grep '^\.checkpoint-.*\.tmp-')
    "$ZTRAIN" "${args[@]}" --resume_from_checkpoint "$TMP/ck2" --learning_rate $lr --override_checkpoint_args \
        > "$TMP/run.log" 2>&1 &
    pid=$!
    # a random moment after its first save, while it saves one checkpoint after another
    for _ in $(seq 1 3000); do
        grep -q "checkpoint saved" "$TMP/run.log" 2>/dev/null && break
        sleep 0.01
    done
    sleep "$(printf "0.%02d" $((RANDOM % 30)))"
    kill -9 $pid 2>/dev/null
    wait $pid 2>/dev/null
    # a temporary directory this run left: the kill landed inside a save
    for d in $(ls -a "$out" | grep '^\.checkpoint-.*\.tmp-'); do
        printf '%s\n' "$before" | grep -qx "$d" || { mid_save=$((mid_save + 1)); break; }
    done
    # each checkpoint that changed since it last verified (its files' names, sizes,
    # inodes and times: a run that touches one changes these) is read again in full
    for d in "$out"/checkpoint-*; do
        sig=$(find "$d" -printf '%P %s %i %T@\n' | sort)
        [ "${verified[$d]:-}" = "$sig" ] && continue
        if "$ZTRAIN" checkpoint show "$d" > "$TMP/show.log" 2>&1; then
            verified[$d]=$sig
        else
            fail "kill $i: $d does not verify: $(tail -3 "$TMP/show.log")"
        fi
    done
done
[ "$mid_save" -ge 6 ] || fail "only $mid_save of 24 kills landed inside a save"
# 'latest' resumes from the newest complete checkpoint, and the next save leaves no litter
rm -rf "$out/checkpoint-29" "$out/checkpoint-30" # checkpoint-30: the final step's save
res=$("$ZTRAIN" "${args[@]}" --resume_from_checkpoint latest --override_checkpoint_args 2>&1) ||
    fail "resume latest after the kills: $res"
printf '%s' "$res" | grep -q "resumed from $out/checkpoint-28 at step 28" || fail "no resume from checkpoint-28: $res"
litter=$(find "$out" -name '*.ztmp-*' -o -name '.checkpoint-*')
[ -z "$litter" ] || fail "temporary files left after a successful save: $litter"
echo "  $mid_save of 24 kills landed inside a save"
finish
