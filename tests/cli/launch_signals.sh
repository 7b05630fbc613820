# Signals to the launcher (issue 17 point 5): SIGINT, SIGTERM and SIGHUP sent to
# `ztrain launch` are forwarded to mpirun and so to the ranks; the job ends
# within 30 s with ztrain's own message and exit 128 + the signal, and no
# process of the job is left behind.
. "$(dirname "$0")/lib.bash"
fix=tests/fixtures/gqa_tied
for sig in INT TERM HUP; do
    num=$(kill -l "$sig")
    rm -rf "$TMP/run"; mkdir -p "$TMP/run"
    # --output_dir under $TMP makes every process of the job findable by pgrep -f "$TMP"
    "$ZTRAIN" launch --num_processes 2 --threads_per_process 1 train --model $fix --data $fix/tokens.npy \
        --block_size 16 --per_device_train_batch_size 1 --max_steps 1000000 --peak_gflops 1 \
        --log_jsonl "$TMP/run/log.jsonl" --output_dir "$TMP/run/out" > /dev/null 2> "$TMP/run/err" &
    pid=$!
    for _ in $(seq 150); do [ -s "$TMP/run/log.jsonl" ] && break; sleep 0.2; done
    [ -s "$TMP/run/log.jsonl" ] || fail "SIG$sig: the job never started training: $(cat "$TMP/run/err")"
    t0=$SECONDS
    kill -s "$sig" $pid
    wait $pid
    rc=$?
    [ $((SECONDS - t0)) -lt 30 ] || fail "SIG$sig: the job took $((SECONDS - t0)) s to end"
    [ "$rc" -eq $((128 + num)) ] || fail "SIG$sig: exit $rc, want $((128 + num))"
    grep -Eq "^ztrain launch: SIG$sig received; forwarded to mpirun \(pid [0-9]+\), which forwarded it to the job's 2 ranks; the job has ended" "$TMP/run/err" ||
        fail "SIG$sig: no message of ztrain's: $(cat "$TMP/run/err")"
    sleep 0.5
    if pgrep -f "$TMP/run" > /dev/null; then
        fail "SIG$sig: processes left behind: $(pgrep -af "$TMP/run")"
        pkill -KILL -f "$TMP/run"
    fi
done
# without a signal the launcher ends as mpirun did: a rank's bad input is exit 2
expect_exit 2 "no-such-file.npy" -- "$ZTRAIN" launch --num_processes 2 --threads_per_process 1 train --model $fix \
    --data "$TMP/no-such-file.npy" --block_size 16
finish
