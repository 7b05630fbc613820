# A failed save on any rank ends the whole job (issue 12, point 1): within 30 s,
# with that rank's message, a non-zero exit and no process left behind.  Cases:
# a file in the way of checkpoint-2 (rank 0 fails), rank 1's view of the output
# directory turned read-only mid-run (rank 1 fails; it runs in its own mount
# namespace), a full disk (a 1 MiB tmpfs), and kill -9 of a rank during a save.
# A directory that cannot be written at start-up is refused with exit 2 before
# training, also when only rank 1 cannot write it.
. "$(dirname "$0")/lib.bash"
fix=tests/fixtures/gqa_tied
mounts=()
trap 'for m in "${mounts[@]}"; do umount "$m" 2>/dev/null; done; rm -rf "$TMP"' EXIT
args=(train --model $fix --data $fix/tokens.npy --block_size 16 --per_device_train_batch_size 1 --threads 1
      --peak_gflops 1 --progress false --use_fsdp --save_steps 1)

# ended NAME RC PATTERN: the job ended with a non-zero exit (not the 30 s timeout),
# its output matches PATTERN, and none of its processes is left
ended() {
    local name=$1 rc=$2 pattern=$3
    [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] || fail "$name: exit $rc (124: still running after 30 s)"
    grep -Eq -e "$pattern" "$TMP/$name.log" || fail "$name: output does not match /$pattern/: $(tail -5 "$TMP/$name.log")"
    sleep 0.2
    pgrep -f "output_dir $TMP/$name" > /dev/null && fail "$name: processes left: $(pgrep -af "output_dir $TMP/$name")"
}

# rank 0: a regular file where checkpoint-2 goes
mkdir -p "$TMP/inway" && touch "$TMP/inway/checkpoint-2"
timeout 30 "${mpi[@]}" -np 2 "$ZTRAIN" "${args[@]}" --max_steps 4 --output_dir "$TMP/inway" > "$TMP/inway.log" 2>&1
ended inway $? "rank 0: .*inway/checkpoint-2: exists and is not a directory"
[ -z "$(ls -a "$TMP/inway" | grep '^\.checkpoint-')" ] || fail "inway: the failed save left its temporary directory"

# rank 1: its output directory becomes read-only once checkpoint-1 exists
rank1_readonly='out=$1; shift
mount --bind "$out" "$out" || exit 3
# the remount fails with EBUSY while a file on the mount is open for writing
# (rank 1 may be saving the next checkpoint), so it is retried until it holds
( while [ ! -d "$out/checkpoint-1" ]; do sleep 0.01; done
  until mount -o remount,bind,ro "$out" 2>/dev/null; do sleep 0.01; done ) &
exec "$@"'
mkdir -p "$TMP/ro1"
timeout 30 "${mpi[@]}" -np 1 "$ZTRAIN" "${args[@]}" --max_steps 100000 --output_dir "$TMP/ro1" : \
    -np 1 unshare -m sh -c "$rank1_readonly" sh "$TMP/ro1" "$ZTRAIN" "${args[@]}" --max_steps 100000 \
    --output_dir "$TMP/ro1" > "$TMP/ro1.log" 2>&1
ended ro1 $? "rank 1: .*Read-only file system"
grep -q "rank 0:" "$TMP/ro1.log" && fail "ro1: rank 0 should not report an error of its own: $(grep 'rank 0' "$TMP/ro1.log")"

# a full disk
mkdir -p "$TMP/full"
if mount -t tmpfs -o size=1m tmpfs "$TMP/full"; then
    mounts+=("$TMP/full")
    timeout 30 "${mpi[@]}" -np 2 "$ZTRAIN" "${args[@]}" --max_steps 100000 --output_dir "$TMP/full" \
        > "$TMP/full.log" 2>&1
    ended full $? "rank [01]: .*No space left on device"
    [ -z "$(ls -a "$TMP/full" | grep '^\.checkpoint-')" ] || fail "full: the failed save left its temporary directory"
else
    fail "cannot mount a tmpfs (the test needs root)"
fi

# kill -9 of rank 1 while checkpoints are being saved
"${mpi[@]}" -np 2 "$ZTRAIN" "${args[@]}" --max_steps 100000 --output_dir "$TMP/kill" > "$TMP/kill.log" 2>&1 &
pid=$!
for _ in $(seq 1 3000); do grep -q "checkpoint saved" "$TMP/kill.log" && break; sleep 0.01; done
ranks=($(pgrep -P $pid))
kill -9 "${ranks[1]}"
timeout 30 tail --pid=$pid -f /dev/null
kill -0 $pid 2>/dev/null && { kill -9 $pid; fail "kill: mpirun still running 30 s after rank 1 died"; }
wait $pid
ended kill $? "."

# start-up: a directory only rank 1 cannot write is refused with exit 2 before training
rank1_ro_from_start='out=$1; shift
mount --bind "$out" "$out" && mount -o remount,bind,ro "$out" || exit 3
exec "$@"'
mkdir -p "$TMP/ro_start"
timeout 30 "${mpi[@]}" -np 1 "$ZTRAIN" "${args[@]}" --max_steps 4 --output_dir "$TMP/ro_start" : \
    -np 1 unshare -m sh -c "$rank1_ro_from_start" sh "$TMP/ro_start" "$ZTRAIN" "${args[@]}" --max_steps 4 \
    --output_dir "$TMP/ro_start" > "$TMP/ro_start.log" 2>&1
rc=$?
[ "$rc" -eq 2 ] || fail "ro_start: exit $rc, want 2: $(tail -3 "$TMP/ro_start.log")"
grep -q "rank 1: --output_dir $TMP/ro_start: cannot write there: Read-only file system" "$TMP/ro_start.log" ||
    fail "ro_start: $(tail -3 "$TMP/ro_start.log")"
grep -q "^model:" "$TMP/ro_start.log" && fail "ro_start: training started before the refusal"
finish
