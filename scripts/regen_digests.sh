#!/usr/bin/env bash
# scripts/regen_digests.sh [BUILD_DIR] — rerun the numerical-guard matrix of
# tests/cli/digests.sh and replace BUILD_DIR's section of
# tests/digests/expected.txt (default build/; run it for build-san/ too).
#
# Regenerating is only legitimate when a change is MEANT to change the numbers
# (a new rounding rule, a different reduction order, a fixture change): say so in
# the commit message, and why.  A refactor, a new feature or a speed-up must leave
# the committed digests as they are; if one of them moves, the change is wrong.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-build}
cd "$root"
export ZTRAIN="$root/$build/ztrain" OMP_NUM_THREADS=1
# the sanitizer build (build-san) runs as tests/run runs it
export OMPI_MCA_mca_base_component_disable_dlclose=1
export ASAN_OPTIONS=${ASAN_OPTIONS:-fast_unwind_on_malloc=0:detect_leaks=1}
export LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$root/tests/lsan.supp:print_suppressions=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
bash tests/cli/digests.sh --write tests/digests/expected.txt
