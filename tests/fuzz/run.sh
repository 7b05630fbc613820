#!/usr/bin/env bash
# tests/fuzz/run.sh [SECONDS] [NAME...] — run each libFuzzer harness built by
# `make fuzz` (build-fuzz/fuzz_NAME) for SECONDS (default 30) on its committed
# seed corpus; new inputs go to a scratch directory, the committed corpus is
# only read.  Prints each harness's closing statistics line; exits non-zero on
# the first finding (the crash input is kept under build-fuzz/findings/).
set -euo pipefail
cd "$(dirname "$0")/../.."
secs=${1:-30}
shift || true
names=("$@")
if [ ${#names[@]} -eq 0 ]; then
    for f in tests/fuzz/fuzz_*.c; do n=$(basename "$f" .c); names+=("${n#fuzz_}"); done
fi
mkdir -p build-fuzz/findings
for n in "${names[@]}"; do
    bin=build-fuzz/fuzz_$n
    [ -x "$bin" ] || { echo "missing $bin: run make fuzz first"; exit 1; }
    scratch=$(mktemp -d /tmp/ztfuzz_corpus_XXXXXX)
    log=build-fuzz/findings/$n.log
    # -rss_limit_mb: a reader that allocates for a lie in its input is a finding
    if ! ASAN_OPTIONS=detect_leaks=1 "$bin" -max_total_time="$secs" -rss_limit_mb=2048 -timeout=10 \
        -print_final_stats=1 -artifact_prefix=build-fuzz/findings/"$n"- "$scratch" "tests/fuzz/corpus/$n" \
        > "$log" 2>&1; then
        rm -rf "$scratch"
        echo "FAIL fuzz_$n (see $log)"
        grep -E "ERROR|fuzz property|runtime error|SUMMARY" "$log" | head -5
        exit 1
    fi
    rm -rf "$scratch"
    execs=$(grep -Eo "stat::number_of_executed_units: *[0-9]+" "$log" | grep -Eo "[0-9]+$")
    cov=$(grep -Eo "cov: [0-9]+ ft: [0-9]+" "$log" | tail -1)
    echo "ok   fuzz_$n: $execs executions in ${secs} s, $cov"
done
