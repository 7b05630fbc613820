#!/usr/bin/env bash
# tests/gpu/carry.sh — run HERE (the Debian development machine): pack what the GPU
# machine lacks for building and running ztrain into .gpu-carry/ (ignored by git),
# and print the `carry` list to pass to the device tool with tests/gpu/check.sh.
#
# The GPU machine has nvcc, CUDA's libraries inside PyTorch's site-packages
# (cuBLASLt, the runtime, NCCL) and a C compiler, but none of the Debian packages
# ztrain builds against (scripts/setup.sh) and no network.  So this takes, from the
# Debian packages installed here and nothing else:
#   headers   oneapi/dnnl, yaml.h, cjson/, xxhash.h, Open MPI's mpi.h and friends, and the
#             cudnn-frontend headers (scripts/setup.sh's, from PyPI)
#   libraries libdnnl (+ libOpenCL, which it links), libyaml, libcjson, libxxhash,
#             Open MPI's libmpi, libopen-rte, libopen-pal and what they link
#             (hwloc, libevent, PMIx, udev)
#   Open MPI  orterun (mpirun) and orted, its MCA components (the ones a single
#             machine uses: not UCX, OFI, verbs, PSM, MPI-IO, OpenSHMEM, Java or
#             Fortran), its help
#             texts and parameter files, PMIx's components
# laid out as the Debian prefix (usr/...) so that Open MPI finds its files again
# under OPAL_PREFIX (tests/gpu/env.sh sets that up).  oneDNN alone is 38 MiB, and
# the working tree that travels may hold 64 MiB in all, so everything goes into one
# xz-compressed tar (.gpu-carry/deps.tar.xz), which check.sh unpacks under /tmp.
# The script fails when the tar plus the tracked tree exceeds 60 MiB.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
out=$root/.gpu-carry
multi=x86_64-linux-gnu
lib=/usr/lib/$multi
ompi=$lib/openmpi
stage=$(mktemp -d /tmp/zt_carry_XXXXXX)
trap 'rm -rf "$stage"' EXIT
R=$stage/root

need() { [ -e "$1" ] || { echo "carry.sh: $1 is missing here (install scripts/setup.sh's packages)" >&2; exit 1; }; }
# copy a path, keeping its place under /, with symlinks as symlinks (-a) and the
# files they point to (each listed explicitly)
put() { need "$1"; mkdir -p "$R$(dirname "$1")"; cp -a "$1" "$R$1"; }
# a shared library: the file its soname resolves to, the soname link and the
# unversioned name the linker looks for (-lNAME), if this machine has it
put_lib() {
    local so=$1 real
    need "$so"
    real=$(readlink -f "$so")
    put "$real"
    for name in "$so" "${so%%.so*}.so"; do
        if [ ! -e "$name" ] || [ "$name" = "$real" ]; then continue; fi
        # a relative link to the one copy (Debian hard-links some of these names)
        mkdir -p "$R$(dirname "$name")"
        ln -sfn "$(realpath -s --relative-to="$(dirname "$name")" "$real")" "$R$name"
    done
    return 0
}

# headers
put /usr/include/oneapi
put /usr/include/yaml.h
put /usr/include/cjson
put /usr/include/xxhash.h
[ -e /usr/include/xxh3.h ] && put /usr/include/xxh3.h
put "$ompi/include"
# the cudnn-frontend headers (scripts/setup.sh: PyPI, not a Debian package), which make cuda
# builds its cuDNN attention shim with; cuDNN itself is inside PyTorch's wheels there
put /usr/local/lib/ztrain/cudnn-frontend/include

# libraries ztrain links, and what they link that a CUDA image may lack
for so in libdnnl.so.2 libOpenCL.so.1 libyaml-0.so.2 libcjson.so.1 libxxhash.so.0; do
    put_lib "$lib/$so"
done
put_lib "$lib/libyaml.so"
for so in libmpi.so.40 libopen-rte.so.40 libopen-pal.so.40; do
    put_lib "$lib/$so"
done
for so in libhwloc.so.15 libevent_core-2.1.so.7 libevent_pthreads-2.1.so.7 libudev.so.1; do
    put_lib "$lib/$so" # on Debian 12 /lib is /usr/lib: one place for the links and the files
done
put_lib "$lib/libmunge.so.2"          # PMIx's security plugin links it
put_lib "$lib/libmca_common_sm.so.40" # the shared-memory collectives' helper
put "$ompi/lib/libmca_common_sm.so"
put "$ompi/lib/libmpi.so"
put "$ompi/lib/libopen-rte.so"
put "$ompi/lib/libopen-pal.so"
put_lib "$lib/pmix2/lib/libpmix.so.2"
put "$lib/pmix2/lib/libpmix.so"
put "$lib/pmix2/lib/pmix"

# Open MPI's launcher, components, help texts and parameter files
put /usr/bin/orterun
put /usr/bin/orted
ln -s orterun "$R/usr/bin/mpirun"
mkdir -p "$R$ompi/lib/openmpi3"
for c in "$ompi"/lib/openmpi3/*.so; do
    case $(basename "$c") in
        # other networks, MPI-IO, OpenSHMEM, monitoring and netlink probing: not used on one machine
        *ucx* | *ofi* | *verbs* | *openib* | *psm* | *usnic* | *portals* | *java* | *fortran* | *mxm* | *cuda* | \
            *hcoll* | *monitoring* | mca_io_* | mca_fbtl_* | mca_fcoll_* | mca_sharedfp_* | mca_atomic_* | \
            mca_memheap_* | mca_scoll_* | mca_spml_* | mca_sshmem_* | mca_reachable_netlink*) ;;
        *) cp -a "$c" "$R$c" ;;
    esac
done
put /usr/share/openmpi
[ -e /usr/share/pmix ] && put /usr/share/pmix
put /etc/openmpi

# what the components link beyond the libraries above must exist on an Ubuntu CUDA
# image (libc, libm, libz, libstdc++, libgomp); anything else a kept component needs
# is named here so it can be added or the component dropped
missing=$(find "$R" -name '*.so*' -type f -print0 | xargs -0 ldd 2>/dev/null | awk '/=>/ {print $1}' | sort -u |
    while read -r dep; do
        case $dep in
            libc.so.* | libm.so.* | libz.so.* | libstdc++.so.* | libgomp.so.* | libgcc_s.so.* | libpthread.so.* | \
            libdl.so.* | librt.so.* | linux-vdso.so.*) continue ;;
        esac
        [ -n "$(find "$R" -name "$dep" -print -quit)" ] || echo "$dep"
    done)
[ -z "$missing" ] || { echo "carry.sh: the carried files link libraries that are not carried: $missing" >&2; exit 1; }
broken=$(find "$R" -xtype l)
[ -z "$broken" ] || { echo "carry.sh: links that point nowhere inside the carry: $broken" >&2; exit 1; }

mkdir -p "$out"
rm -f "$out/deps.tar.xz"
tar -C "$R" -cf - . | xz -6 -T0 > "$out/deps.tar.xz"
raw=$(du -sb "$R" | cut -f1)
packed=$(stat -c %s "$out/deps.tar.xz")
tree=$(cd "$root" && git ls-files -z | xargs -0 stat -c %s 2>/dev/null | awk '{s += $1} END {print s + 0}')
total=$((packed + tree))
MiB=1048576
awk -v f="$out/deps.tar.xz" -v r="$raw" -v p="$packed" -v t="$tree" -v m=$MiB 'BEGIN {
    printf "carry: %s (%.1f MiB unpacked, %.1f MiB packed); tracked tree %.1f MiB; together %.1f MiB\n",
           f, r / m, p / m, t / m, (p + t) / m }'
if [ "$total" -gt $((60 * MiB)) ]; then
    echo "carry.sh: over 60 MiB together: the device tool takes 64 MiB at most" >&2
    exit 1
fi
echo 'carry list for the device tool: [".gpu-carry"]'
echo 'command: bash tests/gpu/check.sh'
