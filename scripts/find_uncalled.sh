#!/usr/bin/env bash
# scripts/find_uncalled.sh [BUILD_DIR] — list the library's and the command line's
# exported functions that nothing calls: each global function defined in
# BUILD_DIR/obj/src (nm, type T) whose name occurs, as a word, at most twice in the
# .c and .h files of src/ and tests/ (its definition and its declaration).  A
# function used only through a table still counts as called (its name occurs in
# the table).  Prints "NAME  FILES"; exit 1 when there is any.
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-build}
cd "$root"
ls "$build"/obj/src/*/*.o > /dev/null 2>&1 || { echo "find_uncalled: build first (make)" >&2; exit 2; }
found=0
for s in $(nm -g --defined-only "$build"/obj/src/*/*.o | awk '$2 == "T" { print $3 }' | sort -u); do
    n=$(grep -rwo --include='*.c' --include='*.h' "$s" src tests | wc -l)
    if [ "$n" -le 2 ]; then
        echo "$s  $(grep -rlw --include='*.c' --include='*.h' "$s" src tests | tr '\n' ' ')"
        found=1
    fi
done
exit "$found"
