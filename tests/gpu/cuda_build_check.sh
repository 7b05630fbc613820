#!/usr/bin/env bash
# tests/gpu/cuda_build_check.sh [BUILD_DIR] — what CI checks of the CUDA build
# (`make cuda`, default build-cuda/) on whatever machine it runs on:
#  - the CUDA build's ztrain still runs on the CPU (`ztrain env` prints its CPU lines);
#  - `ztrain env` and the kernel checks agree on whether there is a GPU:
#    without one, env says "gpu: none: no CUDA device (...)" and
#    tests/gpu/kernels_check refuses with exit 3 and "no CUDA device", having run
#    nothing (it must never report a pass it did not run); with one, env lists it and
#    every kernel check passes.
# Exit 0 when that holds, 1 with the reason otherwise.
set -u
build=${1:-build-cuda}
fail() { echo "cuda_build_check: FAIL: $*" >&2; exit 1; }
[ -x "$build/ztrain" ] || fail "$build/ztrain not built (make cuda)"
[ -x "$build/tests/gpu/kernels_check" ] || fail "$build/tests/gpu/kernels_check not built (make cuda)"

env_out=$("$build/ztrain" env --threads 1 --measure false 2>&1) || fail "ztrain env: $env_out"
for key in ztrain mpi onednn cpu; do
    printf '%s\n' "$env_out" | grep -q "^$key" || fail "ztrain env lacks its '$key' line: $env_out"
done

check_out=$("$build/tests/gpu/kernels_check" 2>&1)
rc=$?
if printf '%s\n' "$env_out" | grep -q '^gpu: *none: '; then
    printf '%s\n' "$env_out" | grep -Eq '^gpu: *none: no CUDA device \(.+\)$' ||
        fail "ztrain env does not say why there is no GPU: $(printf '%s\n' "$env_out" | grep '^gpu')"
    [ "$rc" -eq 3 ] || fail "no GPU, but kernels_check exited $rc (expected 3): $check_out"
    printf '%s\n' "$check_out" | grep -Eq '^kernels_check: no CUDA device \(.+\)$' ||
        fail "kernels_check without a GPU does not say so: $check_out"
    printf '%s\n' "$check_out" | grep -Eq '^(ok|FAIL) ' && fail "kernels_check reported checks it could not run"
    echo "cuda_build_check: no GPU here: ztrain env and kernels_check say so ($(
        printf '%s\n' "$env_out" | sed -n 's/^gpu: *none: //p'))"
else
    printf '%s\n' "$env_out" | grep -Eq '^gpus: +[1-9]' || fail "ztrain env neither lists GPUs nor says none: $env_out"
    printf '%s\n' "$check_out"
    [ "$rc" -eq 0 ] || fail "kernels_check exited $rc on a machine with a GPU"
    echo "cuda_build_check: GPU present: every kernel check passed"
fi
