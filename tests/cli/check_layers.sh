# The layer map of docs/architecture.md holds for src/ (scripts/check_layers.sh), for
# its includes and for the calls between the objects of the build under test, and
# every exported function has a caller (scripts/find_uncalled.sh).  Each check can
# fail: on a copy of the tree it names an include that goes against the map (also from
# a CUDA file in a folder below one of src/), a private header (NAME_impl.h) included
# from another folder even where the map allows that folder, a folder the map lacks,
# a map with a cycle, a call that no include shows, and a function nothing calls.
. "$(dirname "$0")/lib.bash"
root=$(cd "$(dirname "$0")/../.." && pwd)
build=$(dirname "$ZTRAIN")
out=$(scripts/check_layers.sh --objects "$build" 2>&1) || fail "check-layers on this tree: $out"
out=$(scripts/find_uncalled.sh "$build" 2>&1) || fail "find_uncalled on this tree: $out"

copy() { rm -rf "$TMP/r"; mkdir -p "$TMP/r"; cp -r "$root/src" "$root/docs" "$TMP/r/"; }
copy
printf '#include "../engine/engine.h"\n' >> "$TMP/r/src/model/llama.h"
expect_exit 1 "src/model/llama.h:[0-9]+: model -> engine" -- scripts/check_layers.sh "$TMP/r"
copy
printf '#include "../../tests/test.h"\n' >> "$TMP/r/src/core/mem.c"
expect_exit 1 "src/core/mem.c:[0-9]+: core -> outside src/" -- scripts/check_layers.sh "$TMP/r"
copy
mkdir -p "$TMP/r/src/kernels/cuda"  # CUDA sources below a folder belong to it
printf '#include "../../engine/engine.h"\n' >> "$TMP/r/src/kernels/cuda/x.cu"
expect_exit 1 "src/kernels/cuda/x.cu:[0-9]+: kernels -> engine" -- scripts/check_layers.sh "$TMP/r"
copy
printf '#include "../engine/engine_impl.h"\n' >> "$TMP/r/src/train/checkpoint.c"
expect_exit 1 "src/train/checkpoint.c:[0-9]+: train -> engine \(../engine/engine_impl.h\) is private to src/engine" \
    -- scripts/check_layers.sh "$TMP/r"
copy
mkdir "$TMP/r/src/gpu" && : > "$TMP/r/src/gpu/cuda.c"
expect_exit 1 "src/gpu: not in the layer map" -- scripts/check_layers.sh "$TMP/r"
copy
sed -i 's/^core:$/core: train/' "$TMP/r/docs/architecture.md"
expect_exit 2 "the map has a cycle" -- scripts/check_layers.sh "$TMP/r"

# a call with no include behind it (declared by hand, as a header of a header would):
# core calls a function of model; the includes pass, the objects do not; model calling
# core is an allowed edge
obj() {  # obj FOLDER NAME SOURCE: $TMP/b/obj/src/FOLDER/NAME.o from SOURCE
    mkdir -p "$TMP/b/obj/src/$1"
    printf '%s\n' "$3" | cc -x c -c - -o "$TMP/b/obj/src/$1/$2.o" || fail "cc $1/$2"
}
copy
rm -rf "$TMP/b"
obj model y 'void zt_t_model_fn(void) {}'
obj core x 'void zt_t_model_fn(void); void zt_t_core_fn(void) { zt_t_model_fn(); }'
expect_exit 1 "core/x.o: core -> model \(zt_t_model_fn, defined in .*model/y.o\)" -- \
    scripts/check_layers.sh "$TMP/r" --objects "$TMP/b"
rm -rf "$TMP/b"
obj core x 'void zt_t_core_fn(void) {}'
obj model y 'void zt_t_core_fn(void); void zt_t_model_fn(void) { zt_t_core_fn(); }'
out=$(scripts/check_layers.sh "$TMP/r" --objects "$TMP/b" 2>&1) || fail "model -> core refused: $out"
expect_exit 2 "no objects" -- scripts/check_layers.sh "$TMP/r" --objects "$TMP/none"

# a function that nothing calls, found even when a .cu file defines its twin, and
# called when a line of a .c or a .cu file uses it
copy
cp -r "$root/scripts" "$TMP/r/" && mkdir -p "$TMP/r/tests" "$TMP/r/src/kernels/cuda"
rm -rf "$TMP/b"
obj core lonely 'int zt_t_lonely(void) { return 1; }'
printf 'int zt_t_lonely(void);\nint zt_t_lonely(void) { return 1; }\n' > "$TMP/r/src/core/lonely.c"
printf 'extern "C" int zt_t_lonely(void) { return 1; }\n' > "$TMP/r/src/kernels/cuda/lonely.cu"
expect_exit 1 "" -- "$TMP/r/scripts/find_uncalled.sh" "$TMP/b"
out=$("$TMP/r/scripts/find_uncalled.sh" "$TMP/b" 2>&1)
[[ $out == "zt_t_lonely  "* && $out == *core/lonely.c* && $out == *cuda/lonely.cu* ]] || fail "find_uncalled names the lonely function: $out"
printf '/* zt_t_lonely(), in a comment, is no call */\n' >> "$TMP/r/src/kernels/cuda/lonely.cu"
expect_exit 1 "" -- "$TMP/r/scripts/find_uncalled.sh" "$TMP/b"
printf 'static int x(void) {\n    return zt_t_lonely();\n}\n' >> "$TMP/r/src/kernels/cuda/lonely.cu"
out=$("$TMP/r/scripts/find_uncalled.sh" "$TMP/b" 2>&1) || fail "a call from a .cu file not seen: $out"
expect_exit 2 "build first" -- "$TMP/r/scripts/find_uncalled.sh" "$TMP/none"
finish
