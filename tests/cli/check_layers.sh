# The layer map of docs/architecture.md holds for src/ (scripts/check_layers.sh), and
# the check can fail: on a copy of the tree it names an include that goes against the
# map (also from a CUDA file in a folder below one of src/), a private header
# (NAME_impl.h) included from another folder even where the map allows that folder,
# a folder the map lacks, and a map with a cycle.
. "$(dirname "$0")/lib.bash"
root=$(cd "$(dirname "$0")/../.." && pwd)
out=$(scripts/check_layers.sh 2>&1) || fail "check-layers on this tree: $out"

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
finish
