# SIGTERM and SIGINT stop a run cleanly (issue 12, point 2): the step in
# progress finishes, a checkpoint of it is written and named, and the exit code
# is 0 (SIGTERM) or 130 (SIGINT); each signal is sent at two points (while
# steps run, and while checkpoints are being saved) and the run resumes from
# what was written.  A second signal ends the process at once (128 + signal).
# On 2 ranks a SIGTERM that reaches one rank stops both after the same step, and
# a SIGUSR2 to plain mpirun (which Open MPI forwards to every rank, where a
# SIGTERM to mpirun would kill them a second later) stops the job the same way.
. "$(dirname "$0")/lib.bash"
fix=tests/fixtures/gqa_tied
args=(train --model $fix --data $fix/tokens.npy --block_size 16 --per_device_train_batch_size 1 --threads 1
      --peak_gflops 1 --max_steps 1000000 --progress false)

# stop NAME SIGNAL WANT_EXIT WHEN [extra flags]: start a run, send SIGNAL once WHEN
# matches its stdout, check the exit code, the message and the checkpoint, and
# resume from 'latest' for two more steps
stop() {
    local name=$1 sig=$2 want=$3 when=$4
    shift 4
    local out="$TMP/$name"
    "$ZTRAIN" "${args[@]}" --output_dir "$out" --log_jsonl "$out.jsonl" "$@" > "$out.log" 2>&1 &
    local pid=$!
    wait_for "$out.log" "$when" || fail "$name: never printed '$when'"
    kill -"$sig" $pid
    wait $pid
    local rc=$?
    [ "$rc" -eq "$want" ] || { fail "$name: exit $rc after SIG$sig (want $want): $(tail -3 "$out.log")"; return; }
    local line step
    line=$(grep "stopped by SIG$sig after step" "$out.log") || { fail "$name: no stop message: $(tail -3 "$out.log")"; return; }
    step=$(printf '%s' "$line" | sed 's/.*after step \([0-9]*\) .*/\1/')
    printf '%s' "$line" | grep -q "checkpoint saved to $out/checkpoint-$step;" || fail "$name: $line"
    [ "$(wc -l < "$out.jsonl")" -eq "$step" ] || fail "$name: $(wc -l < "$out.jsonl") steps logged, stopped after $step"
    "$ZTRAIN" checkpoint show "$out/checkpoint-$step" > "$out.show" 2>&1 || fail "$name: $(cat "$out.show")"
    local res
    res=$("$ZTRAIN" "${args[@]}" --output_dir "$out" "$@" --resume_from_checkpoint latest --max_steps $((step + 2)) \
          --override_checkpoint_args 2>&1) || fail "$name: resume: $res"
    printf '%s' "$res" | grep -q "resumed from $out/checkpoint-$step at step $step" || fail "$name: resume line: $res"
    printf '%s' "$res" | grep -q "trained 2 steps" || fail "$name: the resumed run: $res"
}

# while steps run (the third step is logged), and while checkpoints are saved every step
stop term_steps TERM 0 '^activations:'
stop term_saves TERM 0 'checkpoint saved to' --save_steps 1
stop int_steps INT 130 '^activations:'
stop int_saves INT 130 'checkpoint saved to' --save_steps 1

# a second signal does not wait for the clean stop
"$ZTRAIN" "${args[@]}" --output_dir "$TMP/twice" --save_steps 1 > "$TMP/twice.log" 2>&1 &
pid=$!
wait_for "$TMP/twice.log" 'checkpoint saved to' || fail "twice: never saved"
kill -INT $pid
kill -TERM $pid
wait $pid
rc=$?
# exit 128 + the signal handled second (the kernel may deliver either first), and no clean stop
{ [ "$rc" -eq 130 ] || [ "$rc" -eq 143 ]; } && grep -q "second signal: stopping at once" "$TMP/twice.log" &&
    ! grep -q "stopped by" "$TMP/twice.log" ||
    fail "a second signal should end the run at once (exit $rc): $(tail -2 "$TMP/twice.log")"

# mpi_stop NAME SIGNAL WHO STOPPED_BY: 2 ranks under mpirun, SIGNAL sent to WHO (rank1,
# or mpirun) once they train; exit 0, "stopped by STOPPED_BY after step N", a checkpoint
# that verifies, and a bit-exact resume from 'latest'
mpi_stop() {
    local name=$1 sig=$2 who=$3 by=$4
    "${mpi[@]}" -np 2 "$ZTRAIN" "${args[@]}" --use_fsdp --output_dir "$TMP/$name" > "$TMP/$name.log" 2>&1 &
    local pid=$! target=$! rc step res
    wait_for "$TMP/$name.log" '^activations:' || fail "$name: never started"
    if [ "$who" = rank1 ]; then
        sleep 0.5
        local ranks=($(pgrep -P $pid))
        [ "${#ranks[@]}" -eq 2 ] || fail "$name: expected 2 rank processes under mpirun, found ${ranks[*]}"
        target=${ranks[1]}
    fi
    kill -"$sig" "$target"
    timeout 60 tail --pid=$pid -f /dev/null
    wait $pid
    rc=$?
    [ "$rc" -eq 0 ] || fail "$name: exit $rc: $(tail -5 "$TMP/$name.log")"
    step=$(sed -n "s/.*stopped by $by after step \([0-9]*\) .*checkpoint saved to.*/\1/p" "$TMP/$name.log")
    [ -n "$step" ] && "$ZTRAIN" checkpoint show "$TMP/$name/checkpoint-$step" > /dev/null 2>&1 ||
        { fail "$name: no verified checkpoint after the stop: $(tail -3 "$TMP/$name.log")"; return; }
    res=$("${mpi[@]}" -np 2 "$ZTRAIN" "${args[@]}" --use_fsdp --output_dir "$TMP/$name" --resume_from_checkpoint latest \
          --max_steps $((step + 1)) --override_checkpoint_args 2>&1) || fail "$name: resume: $res"
    printf '%s' "$res" | grep -q "at step $step: bit-exact" || fail "$name: resume: $res"
}
# SIGTERM to rank 1 alone stops both after the same step
mpi_stop rank1 TERM rank1 SIGTERM
# plain mpirun: SIGUSR2 to mpirun (forwarded to every rank) is the clean stop
mpi_stop usr2 USR2 mpirun 'SIGUSR2 (a stop request)'
finish
