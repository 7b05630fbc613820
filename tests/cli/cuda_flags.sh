# cuda_flags.sh — the CUDA build's compiler lines, read from `make -n` (nothing is
# compiled: no nvcc run, no GPU needed): every exact .cu file of src/kernels/cuda is
# compiled with --fmad=false (no contraction into fma: the CPU's bits, docs/gpu.md
# "Kernels"), every fast_*.cu with --fmad=true and never --fmad=false (FMA contraction
# allowed in fast mode, and only there: issue 30 point 3); and the GPU check's build
# (tests/gpu/check.sh's CUDA_GENCODE) targets sm_90a alone (issue 30 point 5).
. "$(dirname "$0")/lib.bash"
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root" || exit 1
gencode=$(grep -o 'CUDA_GENCODE="[^"]*"' tests/gpu/check.sh | head -1 | sed 's/^CUDA_GENCODE="//; s/"$//')
[ "$gencode" = "-gencode=arch=compute_90a,code=sm_90a" ] || fail "check.sh builds for '$gencode', not sm_90a alone"
cus=(src/kernels/cuda/*.cu)
objs=("${cus[@]/#/build-cuda/obj/}")
objs=("${objs[@]/%.cu/.o}")
# a make of its own: not the variables of a make this test runs under (make test-san
# passes SANITIZE=1 down through MAKEFLAGS, which moves the build elsewhere)
out=$(env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL -u MAKEOVERRIDES -u SANITIZE \
    make -n -B CUDA=1 CUDA_GENCODE="$gencode" "${objs[@]}" 2>&1) || fail "make -n: $out"
nfast=0
for f in "${cus[@]}"; do
    line=$(printf '%s\n' "$out" | grep -e " -c $f -o ")
    if [ -z "$line" ]; then
        fail "no compile line for $f"
        continue
    fi
    case $(basename "$f") in
    fast_*)
        nfast=$((nfast + 1))
        printf '%s' "$line" | grep -q -- '--fmad=true' || fail "$f (fast) is compiled without --fmad=true"
        printf '%s' "$line" | grep -q -- '--fmad=false' && fail "$f (fast) is compiled with --fmad=false" ;;
    *)
        printf '%s' "$line" | grep -q -- '--fmad=false' || fail "$f (exact) is compiled without --fmad=false"
        printf '%s' "$line" | grep -q -- '--fmad=true' && fail "$f (exact) is compiled with --fmad=true" ;;
    esac
    arches=$(printf '%s' "$line" | grep -o -- '-gencode=[^ ]*' | sort -u | tr '\n' ' ')
    [ "$arches" = "$gencode " ] || fail "$f: built for '$arches', not only $gencode"
done
[ "$nfast" -ge 5 ] || fail "only $nfast fast_*.cu files found"
finish
