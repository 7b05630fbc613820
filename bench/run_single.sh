#!/bin/sh
# run_single.sh — the single-process speed benchmark of issue 3: ztrain against PyTorch on
# the same Llama, weights, data, batch and threads (see bench/single.py and
# docs/performance.md).  Arguments go to single.py, e.g.
#   bench/run_single.sh --configs a --precisions bf16 --steps 4
#
# The PyTorch peer's fp32 BLAS is chosen by bench/torch_blas.sh (OpenBLAS instead of
# Debian's reference BLAS); --torch_blas system overrides it.
set -eu
cd "$(dirname "$0")/.."
make -j2 build/ztrain >/dev/null

. bench/torch_blas.sh
exec /usr/bin/python3 bench/single.py --torch_blas "$blas" "$@"
