#!/usr/bin/env bash
# scripts/check_layers.sh [ROOT] [--objects BUILD_DIR] — fail when an #include, or
# a call, goes against the layer map.  The map is the ```layers block of
# ROOT/docs/architecture.md (one line per folder of src/: "folder: the folders it
# may use"); nothing else states it.
# Checks, for ROOT (default: this repository):
#   - every folder of src/ is in the map, and the map names no folder twice;
#   - the map itself is acyclic (tsort);
#   - every #include "..." in the C and CUDA sources of src/ (.c .h .cu .cuh, in a
#     folder or below it: src/kernels/cuda belongs to kernels) resolves, relative to
#     its file, to its own folder or an allowed one; each violation is printed on
#     stderr as FILE:LINE: FROM -> TO;
#   - a private header, NAME_impl.h (src/engine/engine_impl.h: the engine's struct),
#     is included only from its own folder, whatever the map allows;
#   - with --objects, the calls as the linker sees them, which no include reveals (a
#     function reached through a header that includes another folder's header, or
#     declared by hand): every symbol that an object of BUILD_DIR/obj/src/FOLDER
#     (or below it) leaves undefined and that an object of another folder defines
#     must be defined by a folder the map allows FOLDER; each violation is printed
#     as OBJECT: FROM -> TO (SYMBOL, defined in OBJECT).  Symbols defined by more
#     than one folder (weak C++ instantiations) and those of no folder (libc, MPI)
#     are not src/'s edges and are skipped.
# Exit 0 clean, 1 violations, 2 the map is missing or malformed, or no objects.
set -u
objects=""
args=()
while [ $# -gt 0 ]; do
    case $1 in
        --objects) [ $# -ge 2 ] || { echo "check-layers: --objects needs a build directory" >&2; exit 2; }
                   objects=$2; shift 2 ;;
        *) args+=("$1"); shift ;;
    esac
done
if [ -n "$objects" ]; then
    [ -d "$objects/obj/src" ] || { echo "check-layers: $objects/obj/src: no objects (build first: make)" >&2; exit 2; }
    shown=${objects%/}  # the objects as the caller named them, in the messages
    objects=$(cd "$objects" && pwd)
fi
root=$(cd "${args[0]:-$(dirname "$0")/..}" && pwd)
doc=$root/docs/architecture.md
[ -f "$doc" ] || { echo "check-layers: $doc: missing" >&2; exit 2; }
map=$(awk '/^```layers$/ { on = 1; next } /^```/ { on = 0 } on && NF' "$doc")
[ -n "$map" ] || { echo "check-layers: $doc: no \`\`\`layers block" >&2; exit 2; }
declare -A allowed
pairs=""
while IFS= read -r line; do
    [[ $line =~ ^([a-z_]+):([a-z_ ]*)$ ]] || { echo "check-layers: $doc: bad map line '$line'" >&2; exit 2; }
    from=${BASH_REMATCH[1]}
    [ -z "${allowed[$from]+x}" ] || { echo "check-layers: $doc: $from is listed twice" >&2; exit 2; }
    allowed[$from]=" ${BASH_REMATCH[2]} "
    pairs+="$from $from"$'\n'
    for to in ${BASH_REMATCH[2]}; do pairs+="$to $from"$'\n'; done
done <<< "$map"
for to in $(printf '%s' "$pairs" | awk '{print $1}' | sort -u); do
    [ -n "${allowed[$to]+x}" ] || { echo "check-layers: $doc: '$to' is used but has no line of its own" >&2; exit 2; }
done
printf '%s' "$pairs" | tsort > /dev/null 2>&1 || { echo "check-layers: $doc: the map has a cycle" >&2; exit 2; }

# resolved: the folder of src/ that include $2, written in src/$1 (a folder, maybe
# nested such as kernels/cuda), resolves to; empty when it leaves src/ or names no
# folder.  (Set, not printed: a $(...) per include would fork some 700 times a run.)
resolve() {
    local IFS=/ p
    local -a parts=()
    resolved=
    for p in $1 $2; do
        case $p in
            '' | .) ;;
            ..) [ ${#parts[@]} -gt 0 ] || return 0; unset 'parts[${#parts[@]}-1]' ;;
            *) parts+=("$p") ;;
        esac
    done
    [ ${#parts[@]} -ge 2 ] && [ -d "$root/src/${parts[0]}" ] && resolved=${parts[0]}
    return 0
}

bad=0
for dir in "$root"/src/*/; do
    from=$(basename "$dir")
    [ -n "${allowed[$from]+x}" ] || { echo "src/$from: not in the layer map of docs/architecture.md" >&2; bad=1; continue; }
    # C and CUDA sources, in the folder and in folders below it (src/kernels/cuda is
    # part of kernels)
    while IFS= read -r f; do
        rel=${f#"$root"/src/}
        here=$(dirname "$rel")
        while IFS=: read -r n inc; do
            resolve "$here" "$inc"
            to=$resolved
            [ -n "$to" ] || { echo "${f#"$root"/}:$n: $from -> outside src/ ($inc)" >&2; bad=1; continue; }
            [ "$to" = "$from" ] && continue
            case ${inc##*/} in
                *_impl.h) echo "${f#"$root"/}:$n: $from -> $to ($inc) is private to src/$to" >&2; bad=1; continue ;;
            esac
            case ${allowed[$from]} in
                *" $to "*) ;;
                *) echo "${f#"$root"/}:$n: $from -> $to ($inc) is not in the layer map" >&2; bad=1 ;;
            esac
        done < <(awk '/^[ \t]*#[ \t]*include[ \t]*"/ { split($0, q, "\""); print FNR ":" q[2] }' "$f")
    done < <(find "$dir" -type f \( -name '*.c' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' -o -name '*.cc' \) | sort)
done
[ "$bad" -eq 0 ] && echo "check-layers: every include in src/ follows docs/architecture.md"

# The calls: "FOLDER OBJECT SYMBOL" for every global symbol each object defines, and
# for every one it leaves undefined; an undefined symbol joined with its one
# defining folder is an edge FROM -> TO, which the map must allow.
if [ -n "$objects" ]; then
    # "FOLDER OBJECT SYMBOL" per symbol; nm -A names each line's object, so one nm
    # reads them all (one per object took 400 processes a run)
    symbols() {  # $1: nm's option (--defined-only or --undefined-only)
        find "$objects/obj/src" -name '*.o' | sort | xargs -r nm -g -A "$1" |
            awk -v root="$objects/" -v shown="$shown/" 'NF >= 3 {
                o = $1; sub(/:[0-9a-fA-F]*$/, "", o)
                rel = substr(o, length(root) + 1); f = substr(rel, 9); sub(/\/.*/, "", f)
                print f, shown rel, $NF }'
    }
    defs=$(symbols --defined-only | awk '{ if (!($3 in f) || f[$3] != $1) c[$3]++; f[$3] = $1; o[$3] = $2 }
                                          END { for (s in f) if (c[s] == 1) print s, f[s], o[s] }')
    [ -n "$defs" ] || { echo "check-layers: $objects/obj/src: no symbols (build first: make)" >&2; exit 2; }
    calls_bad=0
    while read -r from obj sym to def; do
        [ "$to" = "$from" ] && continue
        case ${allowed[$from]-} in
            *" $to "*) ;;
            *) echo "$obj: $from -> $to ($sym, defined in $def) is not in the layer map" >&2; calls_bad=1 ;;
        esac
    done < <(symbols --undefined-only | awk 'NR == FNR { f[$1] = $2; o[$1] = $3; next }
                                             ($3 in f) { print $1, $2, $3, f[$3], o[$3] }' <(printf '%s\n' "$defs") -)
    [ "$calls_bad" -eq 0 ] && echo "check-layers: every call between the objects of src/ follows docs/architecture.md"
    [ "$calls_bad" -eq 0 ] || bad=1
fi
exit "$bad"
