# A stalled rank under `ztrain launch` (issue 33 point 4): one rank of a 2-rank
# FSDP job is stopped (SIGSTOP) while it waits in a collective.  The other rank's
# watchdog declares the timeout once, naming the collective; the stopped rank,
# woken by the abort's SIGCONT, only says where it is: it must not declare a
# timeout of its own ("blocked 5.1 s", as if it were the victim) nor abort the job
# a second time (which Open MPI answers with ORTE_ERROR_LOG lines).  The job ends
# non-zero within 40 s with no process left behind.  Three tries: a rank spends
# most of a step of this small model waiting in collectives, so a stop lands in
# one most of the time.
. "$(dirname "$0")/lib.bash"
fix=tests/fixtures/gqa_tied
for try in 1 2 3; do
    out="$TMP/run$try"
    timeout -k 5 60 "$ZTRAIN" launch --num_processes 2 --threads_per_process 1 train --model $fix --data $fix/tokens.npy \
        --block_size 16 --per_device_train_batch_size 1 --peak_gflops 1000 --use_fsdp --progress false \
        --max_steps 1000000 --collective_timeout 3 --log_jsonl "$out.jsonl" --output_dir "$out" \
        > "$out.txt" 2> "$out.err" &
    job=$!
    t0=$SECONDS
    wait_for "$out.jsonl" '"step": 20,' || fail "try $try: the job did not train"
    # the rank with the higher pid; stopped when it sleeps (blocked in a collective)
    victim=$(pgrep -f "ztrain train .*--output_dir $out" | sort -n | tail -1)
    kill -STOP "$victim"
    wait $job
    rc=$?
    [ "$rc" -ne 0 ] || fail "try $try: exit 0"
    [ $((SECONDS - t0)) -lt 40 ] || fail "try $try: the job took $((SECONDS - t0)) s"
    n=$(grep -c "collective timeout: blocked" "$out.err")
    [ "$n" -eq 1 ] || fail "try $try: $n timeout declarations (want 1): $(grep -v '^  rank' "$out.err")"
    n=$(grep -c "aborting the job after the collective timeout" "$out.err")
    [ "$n" -eq 1 ] || fail "try $try: $n aborts (want 1)"
    grep -q "ORTE_ERROR_LOG" "$out.err" && fail "try $try: Open MPI's ORTE_ERROR_LOG: $(grep ORTE_ERROR_LOG "$out.err")"
    sleep 0.5
    if pgrep -f "$out" > /dev/null; then
        fail "try $try: processes left behind: $(pgrep -af "$out")"
        pkill -KILL -f "ztrain train .*--output_dir $out"
    fi
done
finish
