#!/bin/sh
# run_zero.sh — the 2-rank ZeRO benchmark of issue 4 item 7: ztrain's stages and precision
# modes against PyTorch DDP (gloo) on benchmark config (a), 2 ranks x 1 thread (see
# bench/zero.py and docs/performance.md).  Arguments go to zero.py, e.g.
#   bench/run_zero.sh --stages 0,3 --modes fp32,aligned --steps 6
#
# The DDP peer's fp32 matrix products go through libblas.so.3; when that is Debian's
# netlib reference BLAS the peer loads OpenBLAS instead, exactly as bench/run_single.sh
# does (installed libopenblas0-openmp, else one unpacked under build/bench/openblas).
# --torch_blas system overrides this.
set -eu
cd "$(dirname "$0")/.."
make -j2 build/ztrain >/dev/null

multiarch=/usr/lib/x86_64-linux-gnu
blas=system
case "$(readlink -f $multiarch/libblas.so.3 2>/dev/null || true)" in
*openblas* | *blis* | *mkl*) ;;
*)
    local_dir=build/bench/openblas$multiarch/openblas-openmp
    for d in $multiarch/openblas-openmp "$PWD/$local_dir"; do
        if [ -e "$d/libblas.so.3" ]; then blas=$d; break; fi
    done
    if [ "$blas" = system ] && command -v apt-get >/dev/null; then
        mkdir -p build/bench/deb
        if (cd build/bench/deb && apt-get download libopenblas0-openmp >/dev/null 2>&1) &&
            dpkg -x build/bench/deb/libopenblas0-openmp_*.deb build/bench/openblas; then
            blas=$PWD/$local_dir
        else
            echo "run_zero.sh: could not fetch libopenblas0-openmp; the DDP peer's fp32" \
                 "products use the system's reference BLAS" >&2
        fi
    fi
    ;;
esac
exec /usr/bin/python3 bench/zero.py --torch_blas "$blas" "$@"
