# The collective watchdog (issue 17 point 1).  One rank of a 2-rank FSDP run is
# stopped (SIGSTOP) at its first collective of the forward, the backward or the
# optimizer step of step 2 (build/tests/test_stall plants it through the watchdog's
# test seam and trains as `ztrain train --use_fsdp --max_steps 3` would);
# with --collective_timeout 2 the other rank must name the collective, its
# number, the phase, step and unit, the rank that has not arrived, print its
# flight recorder, and the job must end non-zero with no process left behind.
# kill -9 of a rank in each phase must end the job within 30 s.  SIGUSR1 to
# mpirun prints every live rank's flight recorder.
. "$(dirname "$0")/lib.bash"
stall="$(dirname "$ZTRAIN")/tests/test_stall"
# the output directory under $TMP on the command line makes every process of the
# job findable by pgrep -f "$TMP"

# none_left WHAT: no process of the job outlives it by 0.5 s (those left are named and
# killed)
none_left() {
    for _ in $(seq 10); do
        pgrep -f "$TMP" > /dev/null || return 0
        sleep 0.05
    done
    fail "$1: processes left behind: $(pgrep -af "$TMP")"
    pkill -KILL -f "$TMP"
}

# run_stalled PHASE SIGNAL TIMEOUT: the job's stderr in $TMP/err, exit in $rc, seconds in $secs
run_stalled() {
    local t0=$SECONDS
    timeout 60 "${mpi[@]}" -np 2 "$stall" "$1" 2 1 "$2" "$3" "$TMP/out" > "$TMP/out.txt" 2> "$TMP/err"
    rc=$?
    secs=$((SECONDS - t0))
    none_left "$1/$2"
}

for phase in forward backward optimizer; do
    case $phase in
    forward) want="allgather #[0-9]+ \(shard group, [0-9]+ bytes\) in the forward of step 2, unit 0" ;;
    backward) want="(allgather|reduce_scatter) #[0-9]+ \(shard group, [0-9]+ bytes\) in the backward of step 2, unit [0-9]+" ;;
    # the step's first collective: the verdict's sum of squares over the shard group
    # (sum_doubles, on the device: async_step.c), the audit's sums after it
    optimizer) want="(sum_doubles?|max_int) #[0-9]+ \([a-z ]+, [0-9]+ bytes\) in the optimizer of step 2" ;;
    esac
    run_stalled $phase 19 2
    [ "$rc" -ne 0 ] || fail "$phase/SIGSTOP: exit 0"
    [ "$secs" -lt 30 ] || fail "$phase/SIGSTOP: took $secs s"
    grep -Eq "ztrain: error: rank 0: collective timeout: blocked [0-9.]+ s \(--collective_timeout 2\) in $want" "$TMP/err" ||
        fail "$phase/SIGSTOP: no timeout message naming the collective: $(head -c 3000 "$TMP/err")"
    seq=$(grep -Eo "rank 0: collective timeout: .* in [a-z_]+ #[0-9]+" "$TMP/err" | grep -Eo "[0-9]+$")
    grep -Eq "rank 0: ranks that have not arrived at #$seq: 1 \(at #$((seq - 1))\)" "$TMP/err" ||
        fail "$phase/SIGSTOP: rank 1 not named as missing at #$seq: $(grep 'not arrived\|reached' "$TMP/err")"
    grep -q "rank 0 flight recorder (timeout)" "$TMP/err" || fail "$phase/SIGSTOP: no flight recorder"
    grep -Eq "rank 0  $want: NOT DONE after" "$TMP/err" || fail "$phase/SIGSTOP: recorder lacks the pending collective"
    grep -q "^trained" "$TMP/out.txt" && fail "$phase/SIGSTOP: the run claims to have finished"
done

# A job declared hung does not finish afterwards.  While it aborts, Open MPI sends
# the ranks SIGCONT before SIGTERM, so the stopped rank wakes up, enters the
# collective rank 0 timed out in, and rank 0's main thread would return from it,
# train on and say "trained".  Here the stopped rank is resumed as soon as rank 0
# declares the timeout (inside its 2 s report window), which makes that certain.
# (each background job gets its own, new stderr file: the loops below must not
# read the previous run's lines before the job's shell has opened the file)
: > "$TMP/err_resumed"
( timeout 60 "${mpi[@]}" -np 2 "$stall" backward 2 1 19 2 "$TMP/out" > "$TMP/out.txt" 2> "$TMP/err_resumed" ) &
job=$!
# stopped_rank: the pid of the job's rank in state T (stopped), if any
stopped_rank() {
    for p in $(pgrep -f "test_stall backward 2 1 19 2 $TMP/out"); do
        [ "$(cut -d' ' -f3 "/proc/$p/stat" 2>/dev/null)" = T ] && echo "$p" && return
    done
}
stopped=
for _ in $(seq 1000); do stopped=$(stopped_rank); [ -n "$stopped" ] || ! kill -0 $job 2>/dev/null && break; sleep 0.05; done
resumed=0
[ -n "$stopped" ] && wait_for "$TMP/err_resumed" "collective timeout" && kill -CONT "$stopped" && resumed=1
wait $job
rc=$?
[ $resumed = 1 ] || fail "resumed: no stopped rank found to resume (stopped: ${stopped:-none}): $(head -c 2000 "$TMP/err_resumed")"
[ "$rc" -ne 0 ] || fail "resumed: exit 0"
grep -q "^trained" "$TMP/out.txt" && fail "resumed: the run trained on after its collective timeout"
grep -q "aborting the job after the collective timeout" "$TMP/err_resumed" || fail "resumed: rank 0 did not abort the job"
none_left resumed

# kill -9 of rank 1 in each phase: the job ends within 30 s, nothing left behind
for phase in forward backward optimizer; do
    run_stalled $phase 9 600
    [ "$rc" -ne 0 ] || fail "$phase/SIGKILL: exit 0"
    [ "$secs" -lt 30 ] || fail "$phase/SIGKILL: took $secs s"
done

# SIGUSR1 to mpirun: each live rank prints its flight recorder; rank 1 is stopped in
# the forward, so rank 0's shows the pending all-gather; then the timeout ends the job
: > "$TMP/err"
( timeout 60 "${mpi[@]}" -np 2 "$stall" forward 2 1 19 8 "$TMP/out" > /dev/null 2> "$TMP/err" ) &
job=$!
for _ in $(seq 50); do grep -q "test: raising signal" "$TMP/err" 2>/dev/null && break; sleep 0.2; done
sleep 1
pkill -USR1 -f "^mpirun.*$TMP" || fail "SIGUSR1: no mpirun found"
wait_for "$TMP/err" "rank 0 flight recorder (SIGUSR1)" && wait_for "$TMP/err" "rank 0  allgather #.*NOT DONE after"
grep -Eq "rank 0  allgather #[0-9]+ .* in the forward of step 2, unit 0: NOT DONE after" "$TMP/err" &&
    grep -q "rank 0 flight recorder (SIGUSR1)" "$TMP/err" ||
    fail "SIGUSR1: no flight recorder from rank 0: $(head -c 2000 "$TMP/err")"
grep -q "collective timeout" "$TMP/err" && fail "SIGUSR1: the dump came only with the timeout"
wait $job
[ $? -ne 0 ] || fail "SIGUSR1 run: exit 0"
none_left "SIGUSR1 run"

# a collective the device runs (the NCCL path) that never finishes, while the host
# waits on the device: the watchdog times the job out on it (a stand-in marker;
# docs/gpu.md)
t0=$SECONDS
timeout 60 "${mpi[@]}" -np 1 "$stall" device 1 > /dev/null 2> "$TMP/err"
rc=$?
[ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] || fail "device: exit $rc"
[ $((SECONDS - t0)) -lt 20 ] || fail "device: took $((SECONDS - t0)) s"
grep -Eq "rank 0: collective timeout: the device has waited [0-9.]+ s \(--collective_timeout 1\) in reduce_scatter #[0-9]+ \(shard group, 4096 bytes\) in the backward of step 2, unit 1" "$TMP/err" &&
    grep -Eq "rank 0  reduce_scatter #[0-9]+ .*: NOT DONE after" "$TMP/err" ||
    fail "device: no timeout naming the device's collective: $(head -c 2000 "$TMP/err")"
finish
