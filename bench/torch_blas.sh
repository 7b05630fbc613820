# bench/torch_blas.sh — sourced by the run_*.sh benchmarks: sets $blas to the BLAS
# directory the PyTorch peer should load.
#
# Debian's python3-torch does its fp32 matrix products through libblas.so.3, which is the
# netlib reference BLAS unless an optimised one is installed (a few GFLOP/s: minutes per
# step).  So that the fp32 comparison is against a usable PyTorch, the peer loads
# OpenBLAS (OpenMP build) when the system BLAS is the reference one: an installed
# libopenblas0-openmp, else one unpacked (not installed) under build/bench/openblas.
# bf16 products go through oneDNN either way.  --torch_blas system overrides this.
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
            echo "$0: could not fetch libopenblas0-openmp; the PyTorch peer's fp32" \
                 "products use the system's reference BLAS" >&2
        fi
    fi
    ;;
esac
