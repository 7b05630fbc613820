#!/bin/sh
# run_zero.sh — the 2-rank ZeRO benchmark of issue 4 item 7: ztrain's stages and precision
# modes against PyTorch DDP (gloo) on benchmark config (a), 2 ranks x 1 thread (see
# bench/zero.py and docs/performance.md).  Arguments go to zero.py, e.g.
#   bench/run_zero.sh --stages 0,3 --modes fp32,aligned --steps 6
#
# The DDP peer's fp32 BLAS is chosen by bench/torch_blas.sh (OpenBLAS instead of
# Debian's reference BLAS); --torch_blas system overrides it.
set -eu
cd "$(dirname "$0")/.."
make -j2 build/ztrain >/dev/null

. bench/torch_blas.sh
exec /usr/bin/python3 bench/zero.py --torch_blas "$blas" "$@"
