#!/usr/bin/env bash
# tools/cuda_emu/run.sh [kernels_check flags] — run the CUDA backend's kernels on the CPU
# (tools/cuda_emu/cuda_runtime.h says what that models and what it cannot) and check
# them with tests/gpu/kernels_check against the CPU twins, every entry but the cuBLASLt
# products (--no-matmul) and the CUDA graphs (--no-graphs).  A dev-time check for a machine without a GPU: it runs the
# kernels' own code (indexing, masks, barriers, shuffles, arithmetic), not the GPU.
# Builds into build-emu/ (and build/ for the CPU library); exit status is kernels_check's.
set -euo pipefail
cd "$(dirname "$0")/../.."
out=build-emu
make -j2 build/libztrain.a >/dev/null
mkdir -p "$out/gen"
objs=()
for f in src/kernels/cuda/*.cu; do
    name=$(basename "$f" .cu)
    [ "$name" = matmul ] && continue
    gen=$out/gen/$name.cpp
    # launches and dynamic shared memory in plain C++ (cuda_runtime.h's zt_emu_launch);
    # the rewrite replaces $gen only when it differs, so an unchanged file is not rebuilt
    sed -E -e 's/extern __shared__ (__align__\([0-9]+\) )?float sm\[\];/float *sm = zt_emu_dyn_smem();/' \
           -e 's/([A-Za-z_][A-Za-z0-9_]*(<[^<>]*>)?)<<<(.*)>>>\(/zt_emu_launch(\1, \3)(/' "$f" > "$gen.new"
    if cmp -s "$gen.new" "$gen"; then rm "$gen.new"; else mv "$gen.new" "$gen"; fi
    # rebuilt when the file or any header it may include (the product's, the emulator's) is newer
    # (no object yet: find -newer of a missing file fails, and pipefail would stop the script)
    newer=
    [ -f "$out/gen/$name.o" ] &&
        newer=$(find src tools/cuda_emu \( -name '*.cuh' -o -name '*.h' \) -newer "$out/gen/$name.o" | head -1)
    if [ ! -f "$out/gen/$name.o" ] || [ "$gen" -nt "$out/gen/$name.o" ] || [ -n "$newer" ]; then
        g++ -std=c++20 -O2 -g -fno-fast-math -ffp-contract=off -Itools/cuda_emu -iquote src/kernels/cuda -DZT_CUDA -DZT_CUDA_EMU \
            -c "$gen" -o "$out/gen/$name.o"
    fi
    objs+=("$out/gen/$name.o")
done
g++ -std=c++20 -O2 -g -ffp-contract=off -Itools/cuda_emu -c tools/cuda_emu/emu.cpp -o "$out/emu.o"
g++ -std=c++20 -O2 -g -ffp-contract=off -Itools/cuda_emu -iquote src/kernels/cuda -DZT_CUDA -DZT_CUDA_EMU \
    -c tools/cuda_emu/matmul_stub.cpp -o "$out/matmul_stub.o"
mpi_c=$(mpicc --showme:compile)
mpi_l=$(mpicc --showme:link)
gcc -std=c11 -D_GNU_SOURCE -O2 -g -Wall -Wextra -fopenmp $mpi_c -c tests/gpu/kernels_check.c -o "$out/kernels_check.o"
g++ -fopenmp "$out/kernels_check.o" "${objs[@]}" "$out/emu.o" "$out/matmul_stub.o" build/libztrain.a \
    -ldnnl -lyaml -lcjson -lxxhash $mpi_l -lm -o "$out/kernels_check_emu"
exec "$out/kernels_check_emu" --no-matmul --no-graphs "$@"
