# The watchdog names the stalled rank, and only it (issue 44, point 3): rank 1
# of a 2-rank FSDP run is stopped from outside (SIGSTOP) at a random moment of
# its steps, before a collective or inside one, in 10 tries.  With
# --collective_timeout 2, rank 0 must name rank 1 as stalled (its watchdog no
# longer ticks) and name no other rank; rank 1, woken by the abort's SIGCONT,
# must not time out itself and blame rank 0.  (tests/cli/watchdog.sh covers the
# stop planted at a given collective.)
. "$(dirname "$0")/lib.bash"
fix=tests/fixtures/gqa_tied
named=0
for try in 1 2 3 4 5 6 7 8 9 10; do
    : > "$TMP/err$try"
    ( timeout 60 "${mpi[@]}" -np 2 "$ZTRAIN" train --model $fix --data $fix/tokens.npy --block_size 16 \
        --per_device_train_batch_size 1 --threads 1 --use_fsdp --max_steps 100000 --progress false \
        --logging_steps 1 --collective_timeout 2 --output_dir "$TMP/out$try" > "$TMP/log$try" 2> "$TMP/err$try" ) &
    job=$!
    wait_for "$TMP/log$try" "^step $((3 + try % 4))/" || { fail "try $try: no steps"; kill $job; continue; }
    sleep "0.0$((try * 7 % 10))"
    pid=""
    for p in $(pgrep -f "output_dir $TMP/out$try$"); do
        tr '\0' '\n' < /proc/$p/environ 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=1" && pid=$p
    done
    [ -n "$pid" ] || { fail "try $try: rank 1 not found"; kill $job; continue; }
    kill -STOP "$pid"
    wait $job
    rc=$?
    kill -CONT "$pid" 2>/dev/null
    err="$TMP/err$try"
    [ "$rc" -ne 0 ] || fail "try $try: exit 0"
    # rank 1 is named either by its silent watchdog or, when rank 0's timeout comes
    # before rank 1's ticks look stale (a stop just before the collective), as the one
    # rank that has not arrived at it
    if grep -Eq "rank 0: stalled rank \(stopped: no watchdog tick\): 1 \(|rank 0: ranks that have not arrived at #[0-9]+: 1 \(at #" "$err"; then
        named=$((named + 1))
    else
        fail "try $try: rank 0 did not name rank 1: $(grep -E 'rank [01]:' "$err" | head -8)"
    fi
    grep -Eq "stalled ranks? \(stopped: no watchdog tick\): .*\b0 \(|not arrived at #[0-9]+: 0 \(" "$err" &&
        fail "try $try: rank 0 named too: $(grep -E 'stalled|not arrived' "$err")"
    grep -q "rank 1: collective timeout" "$err" && fail "try $try: the stopped rank blamed the other: $(grep 'rank 1' "$err" | head -5)"
done
echo "  rank 1 named in $named of 10 tries"
finish
