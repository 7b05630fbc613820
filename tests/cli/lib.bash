# tests/cli/lib.bash — helpers for the command-line tests (sourced, not run).
# $ZTRAIN is the binary under test (set by tests/run).
set -u
: "${ZTRAIN:=build/ztrain}"
TMP=$(mktemp -d /tmp/zt_cli_XXXXXX)
trap 'rm -rf "$TMP"' EXIT
fails=0

fail() { echo "  FAIL: $*"; fails=$((fails + 1)); }

# expect_exit CODE PATTERN -- command...: the command exits CODE and its stderr
# matches the extended regex PATTERN (empty: not checked).
expect_exit() {
    local want=$1 pattern=$2
    shift 3
    local err rc
    err=$("$@" 2>&1 >/dev/null)
    rc=$?
    if [ "$rc" -ne "$want" ]; then
        fail "exit $rc (want $want): $*  stderr: $err"
    elif [ -n "$pattern" ] && ! printf '%s' "$err" | grep -Eq -e "$pattern"; then
        fail "stderr of '$*' does not match /$pattern/: $err"
    fi
}

# mpi: the mpirun line of every multi-rank test: no binding and oversubscription
# allowed (a shared 2-core machine), one OpenMP thread per rank, root allowed (CI
# runs as root), and the sanitizers' settings passed on to the ranks.
mpi=(mpirun --oversubscribe --bind-to none -x OMP_NUM_THREADS=1)
[ "$(id -u)" -eq 0 ] && mpi+=(--allow-run-as-root)
for var in ASAN_OPTIONS LSAN_OPTIONS UBSAN_OPTIONS OMPI_MCA_mca_base_component_disable_dlclose; do
    [ -n "${!var:-}" ] && mpi+=(-x "$var")
done

# wait_for FILE PATTERN: until FILE has a line matching PATTERN (at most 60 s)
wait_for() {
    for _ in $(seq 1 6000); do
        grep -q "$2" "$1" 2>/dev/null && return 0
        sleep 0.01
    done
    return 1
}

finish() {
    [ "$fails" -eq 0 ] || { echo "$fails failure(s)"; exit 1; }
    exit 0
}

# same_checkpoint A B: two checkpoint directories are the same checkpoint, in the
# tests' one sense of it (same_checkpoints.py: every file says the same but for what
# names the run).  Prints the first difference; status 1 when any.
same_checkpoint() {
    /usr/bin/python3 "$(dirname "${BASH_SOURCE[0]}")/same_checkpoints.py" "$1" "$2" 2>&1
}

# same_weights A B: two safetensors files hold the same header and tensor bytes
# but for the run_id and step a checkpoint's model records in __metadata__ (a
# final model records none; issue 44): how a checkpoint's model or its merge is
# compared with a final model or another run's.  Status 1 when they differ.
same_weights() {
    python3 - "$1" "$2" <<'PY'
import json, struct, sys
def load(p):
    b = open(p, 'rb').read()
    n = struct.unpack('<Q', b[:8])[0]
    h = json.loads(b[8:8 + n])
    for k in ('run_id', 'step'):
        h.get('__metadata__', {}).pop(k, None)
    return h, b[8 + n:]
sys.exit(0 if load(sys.argv[1]) == load(sys.argv[2]) else 1)
PY
}
