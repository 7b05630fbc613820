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

finish() {
    [ "$fails" -eq 0 ] || { echo "$fails failure(s)"; exit 1; }
    exit 0
}
