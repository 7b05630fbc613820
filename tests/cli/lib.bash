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

# same_checkpoint A B [NAME...]: two checkpoints (directories, or NAME... under each
# of two output directories, '.' the final model) or two files are the same, in the
# tests' one sense of it (same_checkpoints.py: every file says the same but for what
# names the run).  Prints the first difference; status 1 when any.
same_checkpoint() {
    /usr/bin/python3 "$(dirname "${BASH_SOURCE[0]}")/same_checkpoints.py" "$@" 2>&1
}

# document_run BASE STEP SPAN: the setup of the document-aware runs (packing.sh,
# padding_free.sh): $TMP/d.jsonl, the lines of tests/fixtures/text/multilingual.txt
# four times over, record i cut to BASE + (i * STEP) % SPAN characters; $TMP/init, the
# gqa_tied model with a vocabulary of 1500, seed 5; tok, a tokenizer whose template
# puts BOS before each document (eos id 2); and losses FILE, a log's loss lines.
document_run() {
    /usr/bin/python3 - "$TMP" "$1" "$2" "$3" <<'PY'
import json, sys
base, step, span = map(int, sys.argv[2:5])
lines = [l.strip() for l in open("tests/fixtures/text/multilingual.txt", encoding="utf-8") if l.strip()]
with open(sys.argv[1] + "/d.jsonl", "w") as f:
    for i, l in enumerate(lines * 4):
        f.write(json.dumps({"text": l[:base + (i * step) % span]}) + "\n")
PY
    sed 's/"vocab_size": 256/"vocab_size": 1500/' tests/fixtures/gqa_tied/config.json > "$TMP/config.json"
    "$ZTRAIN" init-model --model_config "$TMP/config.json" --output_dir "$TMP/init" --seed 5 >/dev/null || fail "init-model"
    tok=tests/fixtures/tokenizers/post/llama2_bos
    losses() { grep -o '"loss": [^,]*' "$1"; }
}
