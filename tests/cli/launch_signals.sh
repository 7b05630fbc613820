# Signals to the launcher (issue 12 point 2, issue 17 point 5).  A SIGTERM or
# SIGINT sent to `ztrain launch ... train` stops the job cleanly: launch asks
# the ranks through mpirun (SIGUSR2, which Open MPI forwards without killing
# anyone), they finish the step, write a checkpoint and say where, and launch
# exits 0 (SIGTERM) or 130 (SIGINT); `--resume_from_checkpoint latest` continues
# from it.  Each signal is sent while steps run and while checkpoints are
# written, and once as a terminal's Ctrl-C (SIGINT to the whole process group).
# A second signal ends the job at once, and SIGHUP is forwarded to mpirun as it
# is (exit 129).  Every case ends within 30 s and leaves no process behind.
. "$(dirname "$0")/lib.bash"
fix=tests/fixtures/gqa_tied
launch=("$ZTRAIN" launch --num_processes 2 --threads_per_process 1)
train=(train --model $fix --data $fix/tokens.npy --block_size 16 --per_device_train_batch_size 1 --peak_gflops 1
       --use_fsdp --progress false)

# ended NAME T0: the job ended within 30 s of T0 and left nothing behind
# (--output_dir under $TMP/NAME makes every process of the job findable by pgrep -f)
ended() {
    [ $((SECONDS - $2)) -lt 30 ] || fail "$1: the job took $((SECONDS - $2)) s to end"
    sleep 0.5
    if pgrep -f "$TMP/$1/" > /dev/null; then
        fail "$1: processes left behind: $(pgrep -af "$TMP/$1/")"
        pkill -KILL -f "$TMP/$1/"
    fi
}

# start NAME WHEN [flags]: a 2-rank job in the background ($job: the launcher's pid)
# that has printed WHEN; with setsid=setsid, in a session of its own (its process
# group is the launcher's)
setsid=""
start() {
    local name=$1 when=$2
    shift 2
    mkdir -p "$TMP/$name"
    $setsid "${launch[@]}" "${train[@]}" --max_steps 1000000 --output_dir "$TMP/$name/out" \
        --log_jsonl "$TMP/$name/out.jsonl" "$@" > "$TMP/$name/log" 2>&1 &
    job=$!
    wait_for "$TMP/$name/log" "$when" || fail "$name: never printed '$when': $(tail -3 "$TMP/$name/log")"
    t0=$SECONDS
}

# stop NAME SIGNAL WANT_EXIT WHEN [extra flags]: send SIGNAL to the launcher once WHEN
# is in its output, check the exit, the messages and the checkpoint, and resume from
# 'latest' through launch for two more steps.  SIGNAL -INT sends SIGINT to the
# launcher's whole process group, as a Ctrl-C does.
stop() {
    local name=$1 sig=$2 want=$3 when=$4
    shift 4
    local out="$TMP/$name/out" log="$TMP/$name/log"
    if [ "$sig" = -INT ]; then
        setsid=setsid start "$name" "$when" "$@"
        kill -INT -- -$job
        sig=INT
    else
        start "$name" "$when" "$@"
        kill -"$sig" $job
    fi
    wait $job
    local rc=$?
    ended "$name" $t0
    [ "$rc" -eq "$want" ] || { fail "$name: exit $rc after SIG$sig (want $want): $(tail -4 "$log")"; return; }
    grep -q "^ztrain launch: SIG$sig received; the job's 2 ranks stopped after a step" "$log" ||
        fail "$name: launch's message: $(tail -3 "$log")"
    local line step
    line=$(grep "stopped by SIGUSR2 (a stop request) after step" "$log") ||
        { fail "$name: no stop message: $(tail -3 "$log")"; return; }
    step=$(printf '%s' "$line" | sed 's/.*after step \([0-9]*\) .*/\1/')
    printf '%s' "$line" | grep -q "checkpoint saved to $out/checkpoint-$step; continue with --resume_from_checkpoint latest" ||
        fail "$name: $line"
    [ "$(wc -l < "$out.jsonl")" -eq "$step" ] || fail "$name: $(wc -l < "$out.jsonl") steps logged, stopped after $step"
    "$ZTRAIN" checkpoint show "$out/checkpoint-$step" > "$out.show" 2>&1 || fail "$name: $(cat "$out.show")"
    local res
    res=$("${launch[@]}" "${train[@]}" --max_steps $((step + 2)) --output_dir "$out" "$@" \
          --resume_from_checkpoint latest --override_checkpoint_args 2>&1) || fail "$name: resume: $res"
    printf '%s' "$res" | grep -q "resumed from $out/checkpoint-$step at step $step: bit-exact" ||
        fail "$name: resume line: $res"
    printf '%s' "$res" | grep -q "trained 2 steps" || fail "$name: the resumed run: $res"
}

stop term_steps TERM 0 'activations:'
stop term_saves TERM 0 'checkpoint saved to' --save_steps 1
stop int_steps INT 130 'activations:'
stop int_saves INT 130 'checkpoint saved to' --save_steps 1
stop ctrl_c -INT 130 'activations:'

# a second signal does not wait for the clean stop: mpirun ends the job at once
start twice 'activations:'
kill -TERM $job
kill -INT $job
wait $job
rc=$?
ended twice $t0
# exit 128 + the signal handled second (the kernel may deliver either first)
second=$( [ "$rc" -eq 130 ] && echo INT || echo TERM)
{ [ "$rc" -eq 130 ] || [ "$rc" -eq 143 ]; } &&
    grep -Eq "^ztrain launch: second signal SIG$second received; forwarded to mpirun" "$TMP/twice/log" ||
    fail "twice: a second signal should end the job at once (exit $rc): $(tail -3 "$TMP/twice/log")"

# SIGHUP (a closed terminal) is forwarded as it is: mpirun ends the job
start hup 'activations:'
kill -HUP $job
wait $job
rc=$?
ended hup $t0
[ "$rc" -eq 129 ] || fail "hup: exit $rc, want 129"
grep -Eq "^ztrain launch: SIGHUP received; forwarded to mpirun \(pid [0-9]+\), which forwarded it to the job's 2 ranks; the job has ended" "$TMP/hup/log" ||
    fail "hup: no message of ztrain's: $(cat "$TMP/hup/log")"

# without a signal the launcher ends as mpirun did: a rank's bad input is exit 2
expect_exit 2 "no-such-file.npy" -- "${launch[@]}" train --model $fix --data "$TMP/no-such-file.npy" --block_size 16
finish
