#!/usr/bin/env bash
# scripts/find_uncalled.sh [BUILD_DIR] — list the library's and the command line's
# exported functions that nothing calls: each global function defined in the
# objects of BUILD_DIR/obj/src (nm, type T; in a CUDA build, build-cuda, the .cu
# files' objects of src/kernels/cuda too, C++ names demangled to the function's
# name) whose name the C and CUDA sources of src/ and tests/ (.c .h .cu .cuh) never
# use: every line that names it, as a word, is a declaration or a definition (the
# name after a return type from the start of the line, before any '(' or '=': as
# many as there are twins, such as backend_cuda_none.c's and the .cu file's) or a
# comment line.  A function used only through a table still counts as called (its
# name occurs in the table, or the table's naming rule makes it from an entry of
# ZT_BACKEND_ENTRIES).  Prints "NAME  FILES"; exit 1 when there is any, 2
# when there is no build.
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-build}
cd "$root"
[ -d "$build/obj/src" ] || { echo "find_uncalled: $build/obj/src: build first (make)" >&2; exit 2; }
objs=$(find "$build/obj/src" -name '*.o' | sort)
[ -n "$objs" ] || { echo "find_uncalled: $build/obj/src: no objects (make)" >&2; exit 2; }
sources=(--include='*.c' --include='*.h' --include='*.cu' --include='*.cuh')
found=0
# The backend tables are built from one list (ZT_BACKEND_ENTRIES in src/kernels/backend.h)
# by a naming rule such as `.e = zt_cu_##e`: a function named by a table's rule after an
# entry of the list is in that table, though its name is only ever pasted together.
entries=$(sed -n '/^#define ZT_BACKEND_ENTRIES/,/^$/p' src/kernels/backend.h | grep -o 'X([a-z0-9_]*)' |
          sed 's/X(\(.*\))/\1/')
prefixes=$(grep -rhoE '\.e = [A-Za-z0-9_]+##e' src | sed -E 's/\.e = ([A-Za-z0-9_]+)##e/\1/' | sort -u)
in_table() {
    local p e
    for p in $prefixes; do
        for e in $entries; do
            [ "$1" = "$p$e" ] && return 0
        done
    done
    return 1
}
# nm -C writes a C++ function as name(args); nvcc's own registration symbols begin
# with __, and members, templates and operators (::, <, space) are not ztrain's names
for s in $(nm -g -C --defined-only $objs | awk '$2 == "T" { $1 = $2 = ""; sub(/^ +/, ""); sub(/\(.*/, ""); print }' |
           grep -Ev '^__|::|<| ' | sort -u); do
    in_table "$s" && continue
    n=$(grep -rhw "${sources[@]}" "$s" src tests |
        grep -Evc -e "^[A-Za-z_][^=;(]*[^A-Za-z0-9_]$s *\(" -e '^[ \t]*(/?\*|//)')
    if [ "$n" -eq 0 ]; then
        echo "$s  $(grep -rlw "${sources[@]}" "$s" src tests | tr '\n' ' ')"
        found=1
    fi
done
exit "$found"
