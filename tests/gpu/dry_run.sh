#!/usr/bin/env bash
# tests/gpu/dry_run.sh — on the development machine, as root: check that the GPU
# check's build uses nothing but what tests/gpu/carry.sh packed.
#
# It copies the working tree (tracked and untracked files, not the build folders)
# and .gpu-carry into a temporary folder and runs `tests/gpu/check.sh --build-only`
# there inside a private mount namespace in which this machine's own copies of
# every carried header, library and Open MPI file are hidden (an empty folder or
# /dev/null mounted over each), and so are librsvg, cairo and glib (headers, libraries,
# pkg-config files), which the GPU image lacks: the build there has no PNG output; and so is
# the pyarrow environment of scripts/setup.sh (the Makefile's ARROW_VENV, Apache Arrow's
# libraries for Parquet data), which the GPU image lacks too: the build there reads no
# Parquet; and so are scripts/setup.sh's cudnn-frontend headers, which the carry holds.
# So the build (make cuda where nvcc is installed, the plain build otherwise) and
# the 2-rank training that the carried mpirun launches can only have used the carry; the
# built ztrain is then checked to link none of the hidden libraries.  No GPU is needed or used.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
[ "$(id -u)" -eq 0 ] || { echo "dry_run.sh: needs root (a mount namespace)" >&2; exit 2; }
[ -f "$root/.gpu-carry/deps.tar.xz" ] || bash "$root/tests/gpu/carry.sh"
tmp=$(mktemp -d /tmp/zt_dry_XXXXXX)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/repo" "$tmp/empty"
(cd "$root" && git ls-files -co --exclude-standard -z | tar --null -cf - -T -) | tar -C "$tmp/repo" -xf -
cp -a "$root/.gpu-carry" "$tmp/repo/"
M=/usr/lib/x86_64-linux-gnu
hide=(/usr/include/oneapi /usr/include/yaml.h /usr/include/cjson /usr/include/xxhash.h /usr/include/xxh3.h
      "$M/openmpi" "$M/pmix2" /usr/share/openmpi /etc/openmpi /usr/bin/orterun /usr/bin/orted /usr/bin/mpicc
      /usr/bin/mpirun /etc/alternatives/mpirun /etc/alternatives/mpicc
      /usr/include/cairo /usr/include/librsvg-2.0 /usr/include/glib-2.0 /usr/include/gdk-pixbuf-2.0
      "$M/glib-2.0/include" "${ARROW_VENV:-/usr/local/lib/ztrain/arrow-venv}"
      /usr/local/lib/ztrain/cudnn-frontend)
# librsvg and cairo (PNG output: optional, src/report/plot.c), which the GPU image lacks and
# the carry does not hold: their pkg-config files too, so the Makefile builds without them
for pc in "$M"/pkgconfig/librsvg-2.0.pc "$M"/pkgconfig/cairo*.pc "$M"/pkgconfig/glib-2.0.pc "$M"/pkgconfig/gio-2.0.pc \
          "$M"/pkgconfig/gobject-2.0.pc "$M"/pkgconfig/gdk-pixbuf-2.0.pc /usr/share/pkgconfig/librsvg-2.0.pc; do
    [ -e "$pc" ] && hide+=("$(readlink -f "$pc")")
done
for pat in libdnnl.so libOpenCL.so libyaml libcjson.so libxxhash.so libmpi.so libopen-rte.so libopen-pal.so \
           libhwloc.so libevent_core libevent_pthreads libpmix librsvg-2.so libcairo.so; do
    for f in "$M/$pat"* "/lib/x86_64-linux-gnu/$pat"*; do
        [ -e "$f" ] && hide+=("$(readlink -f "$f")")
    done
done
unshare -m bash -s "$tmp" "${hide[@]}" <<'EOF'
set -euo pipefail
tmp=$1
shift
mount --make-rprivate /
for p in "$@"; do
    [ -e "$p" ] || continue
    if [ -d "$p" ]; then mount --bind "$tmp/empty" "$p"; else mount --bind /dev/null "$p"; fi
done
echo "dry_run.sh: hid $# paths of this machine's copies; building from the carry only"
cd "$tmp/repo"
# stdin from /dev/null: this script is bash's stdin here, and the mpirun of the check's
# smoke test forwards stdin to rank 0, which read the rest of it ("k.sh: command not
# found", exit 127, after a check that had passed)
OUT="$tmp/out" bash tests/gpu/check.sh --build-only </dev/null
# what the GPU image lacks is not linked: no PNG (librsvg, cairo), no Arrow
bin=build-cuda/ztrain
[ -x "$bin" ] || bin=build/ztrain
if readelf -d "$bin" | grep -E 'NEEDED.*(librsvg|libcairo|libarrow|libparquet)'; then
    echo "dry_run.sh: $bin links a library the GPU image lacks (above)" >&2
    exit 1
fi
echo "dry_run.sh: $bin links neither librsvg, cairo nor Arrow"
EOF
