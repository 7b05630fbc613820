#!/usr/bin/env bash
# tests/gpu/check.sh — the prepared GPU check (issue 15 point 5; issue 16 point 1).
#
# Run it on the GPU machine through the device tool, from the repository root, after
# tests/gpu/carry.sh has packed .gpu-carry/ here (docs/gpu.md, "Running the GPU check"):
#   run(command="bash tests/gpu/check.sh", carry=[".gpu-carry"], timeout_s=590)
# It builds ztrain with `make cuda` from what that machine has (nvcc, the CUDA
# libraries inside PyTorch's site-packages) and the carried Debian dependencies,
# then runs, each under its own time limit, and prints a table last:
#   1. the kernel checks against their CPU twins (cuda-kernels' program)
#   2. CPU-vs-GPU parity, fp32, 5 steps: relative loss difference <= 1e-5 at 1 rank,
#      and at 2 ranks on the one GPU (the staged comm path; NCCL refuses two ranks
#      on one GPU); bf16 aligned within bf16 error (<= 2e-2 relative)
#   3. DeepSpeed ZeRO-3 and FSDP FULL_SHARD aligned bf16 bit-identical on the GPU
#      (losses and saved weights), at 1 and 2 ranks
#   4. checkpoints across devices: saved on the GPU, resumed on the CPU, and back
#   5. 20 bf16 steps of a 1B-class Llama (tests/gpu/llama_1b: hidden 2048, 16
#      layers, GQA 32/8, vocab 32000) at T 2048: tokens/s, MFU, peak memory
# Everything it writes goes to $OUT (the device tool brings it back) or /tmp.
# Sized for 8 minutes with the build.  Without a GPU it stops at once (exit 2).
#
# --build-only: build with the same command line and run a 2-rank CPU smoke test
# with the carried mpirun, no GPU needed (how it is checked on the development
# machine, with the system's copies hidden: docs/gpu.md).
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
build_only=0
[ "${1:-}" = "--build-only" ] && build_only=1
OUT=${OUT:-/tmp/zt_gpu_out}
mkdir -p "$OUT"
work=$(mktemp -d /tmp/zt_gpu_XXXXXX)
t_start=$SECONDS
rows=()
failed=0
row() { rows+=("$(printf '%-50s %-5s %s' "$1" "$2" "$3")"); [ "$2" = ok ] || failed=$((failed + 1)); }
table() {
    echo
    echo "== tests/gpu/check.sh: $(( SECONDS - t_start )) s"
    printf '%-50s %-5s %s\n' "check" "" "detail"
    printf '%s\n' "${rows[@]}"
    echo "$failed failed"
}
log() { echo "-- $(( SECONDS - t_start ))s: $*"; }

# ---- 0. a GPU, or stop now ---------------------------------------------------------
if [ $build_only -eq 0 ]; then
    if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >"$work/gpus" 2>&1 || ! grep -q '^GPU ' "$work/gpus"; then
        echo "tests/gpu/check.sh: no NVIDIA GPU on this machine (nvidia-smi lists none): this check runs on the GPU" >&2
        echo "machine through the device tool (docs/gpu.md); --build-only checks the build without one" >&2
        exit 2
    fi
    cat "$work/gpus"
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/device.txt"
fi

# ---- 1. tools and libraries ----------------------------------------------------------
[ -f .gpu-carry/deps.tar.xz ] || { echo "check.sh: .gpu-carry/deps.tar.xz is missing: run tests/gpu/carry.sh on the development machine and carry .gpu-carry" >&2; exit 2; }
carry=$work/carry
mkdir -p "$carry"
if command -v xz >/dev/null 2>&1; then
    tar -C "$carry" -xJf .gpu-carry/deps.tar.xz
else
    python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' .gpu-carry/deps.tar.xz "$carry"
fi || { echo "check.sh: cannot unpack .gpu-carry/deps.tar.xz" >&2; exit 2; }
# shellcheck source=tests/gpu/env.sh
. tests/gpu/env.sh "$carry"
log "carried dependencies unpacked under $carry"

NVCC=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
cuda_inc=() cuda_lib=()
if [ $build_only -eq 0 ] || [ -x "$NVCC" ]; then
    [ -x "$NVCC" ] || { row "build: nvcc" FAIL "no nvcc on PATH or in /usr/local/cuda"; table; exit 1; }
    CUDA_HOME=$(cd "$(dirname "$NVCC")/.." && pwd)
    # cuBLASLt, the runtime and NCCL: the toolkit's if it has them, else the wheels in
    # PyTorch's site-packages (nvidia-cublas, nvidia-cuda-runtime, nvidia-nccl-cu13),
    # whose libraries carry only versioned names: link names for them go in $work/lib
    site=$(python3 -c 'import nvidia, sys; print(list(nvidia.__path__)[0])' 2>/dev/null || true)
    mkdir -p "$work/lib"
    for name in cublasLt cublas cudart nccl; do
        found=$(ls "$CUDA_HOME"/lib64/lib$name.so* "$CUDA_HOME"/targets/x86_64-linux/lib/lib$name.so* \
                   ${site:+"$site"/*/lib/lib$name.so*} 2>/dev/null | head -1 || true)
        [ -n "$found" ] || { row "build: lib$name" FAIL "not in $CUDA_HOME or ${site:-site-packages}"; continue; }
        ln -sfn "$found" "$work/lib/lib$name.so"
        cuda_lib+=("$(dirname "$found")")
    done
    for h in cublasLt.h cuda_runtime.h nccl.h; do
        found=$(ls "$CUDA_HOME"/include/$h "$CUDA_HOME"/targets/x86_64-linux/include/$h \
                   ${site:+"$site"/*/include/$h} 2>/dev/null | head -1 || true)
        [ -n "$found" ] || { row "build: $h" FAIL "not in $CUDA_HOME or ${site:-site-packages}"; continue; }
        cuda_inc+=("-I$(dirname "$found")")
    done
    [ "$failed" -eq 0 ] || { table; exit 1; }
    libpath=$(printf '%s:' "${cuda_lib[@]}")
    export LD_LIBRARY_PATH="$work/lib:${libpath%:}:$LD_LIBRARY_PATH"
fi

# ---- 2. the build ---------------------------------------------------------------------
# Every dependency from the carry or CUDA: MPI's flags are given, not asked of an
# mpicc (there is none there), and the libraries are found through LD_LIBRARY_PATH.
target=cuda bin=build-cuda
if [ $build_only -eq 1 ] && { [ ! -x "$NVCC" ] || ! grep -q '^cuda:' Makefile; }; then
    target=all bin=build # --build-only where nvcc or the Makefile's cuda target is missing
fi
mpi_inc="-I$carry/usr/lib/x86_64-linux-gnu/openmpi/include -I$carry/usr/lib/x86_64-linux-gnu/openmpi/include/openmpi"
log "make $target"
if CPPFLAGS="$ZT_CARRY_CPPFLAGS ${cuda_inc[*]}" LDFLAGS="$ZT_CARRY_LDFLAGS -L$work/lib" \
    make -j"$(nproc)" "$target" NVCC="$NVCC" MPI_CFLAGS="$mpi_inc" MPI_LIBS="-lmpi" >"$OUT/build.log" 2>&1; then
    row "build: make $target ($(( SECONDS - t_start )) s so far)" ok "$bin/ztrain"
else
    row "build: make $target" FAIL "see build.log: $(grep -m1 -E 'error|Error' "$OUT/build.log")"
    tail -30 "$OUT/build.log"
    table
    exit 1
fi
Z=$root/$bin/ztrain
mpi=(mpirun --allow-run-as-root --oversubscribe --bind-to none -x LD_LIBRARY_PATH -x OPAL_PREFIX -x OPAL_SYSCONFDIR
     -x PMIX_INSTALL_PREFIX -x PMIX_MCA_mca_base_component_path -x OMP_NUM_THREADS)

# training data: the repository's docs as bytes (ids < 256, in every model's vocabulary)
cat docs/*.md README.md > "$work/text.txt"
cat "$work/text.txt" "$work/text.txt" > "$work/data.txt"

# run NAME SECONDS ranks ztrain-args...: one run, its output in $OUT/NAME.out
run() {
    local name=$1 limit=$2 np=$3
    shift 3
    local cmd=("$Z" "$@")
    [ "$np" -gt 1 ] && cmd=("${mpi[@]}" -np "$np" "${cmd[@]}")
    timeout "$limit" "${cmd[@]}" >"$OUT/$name.out" 2>&1
}
# the losses of a JSONL log, one per line
losses() { sed -n 's/.*"loss": \([^,]*\),.*/\1/p' "$1"; }
# the largest relative difference between two loss lists (inf when they differ in length)
max_rel() {
    paste <(losses "$1") <(losses "$2") | awk '
        NF != 2 { bad = 1 } NF == 2 { d = $1 - $2; if (d < 0) d = -d; s = $2 < 0 ? -$2 : $2; r = d / (s > 1e-12 ? s : 1e-12);
        if (r > m) m = r; n++ } END { if (bad || n == 0) print "inf"; else printf "%.3g\n", m }'
}
le() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a != "inf" && a + 0 <= b + 0) }'; }

if [ $build_only -eq 1 ]; then
    # the carried Open MPI launches two ranks, and they train and agree
    if run smoke 120 2 train --model tests/fixtures/gqa_tied --data tests/fixtures/gqa_tied/tokens.npy --block_size 16 \
        --per_device_train_batch_size 2 --max_steps 3 --use_fsdp --threads 1 --progress false; then
        row "smoke: 2 ranks, carried mpirun, FSDP FULL_SHARD" ok "$(grep -m1 '^trained' "$OUT/smoke.out")"
    else
        row "smoke: 2 ranks, carried mpirun, FSDP FULL_SHARD" FAIL "$(tail -3 "$OUT/smoke.out" | tr '\n' ' ')"
    fi
    table
    rm -rf "$work"
    [ "$failed" -eq 0 ]
    exit
fi

# ---- 3. the kernel checks (cuda-kernels' program) -------------------------------------
kc=$(find "$bin" -type f -name 'kernels_check*' -perm -u+x | head -1)
if [ -z "$kc" ]; then
    row "kernels: every kernel vs its CPU twin" FAIL "no kernels_check program under $bin"
elif timeout 120 "$kc" >"$OUT/kernels.out" 2>&1; then
    row "kernels: every kernel vs its CPU twin" ok "$(grep -cE '^ok ' "$OUT/kernels.out") passed ($(basename "$kc"))"
else
    row "kernels: every kernel vs its CPU twin" FAIL "$(grep -cE '^FAIL ' "$OUT/kernels.out") failed: $(grep -m3 -E '^FAIL ' "$OUT/kernels.out" | tr '\n' ' ')"
fi
# the fast kernels (src/kernels/cuda/fast.h) against the exact ones: kernels_check's group `fast`
if [ -n "$kc" ]; then
    if grep -qE '^ok +fast ' "$OUT/kernels.out" && ! grep -qE '^FAIL +fast ' "$OUT/kernels.out"; then
        row "kernels: fast vs exact, within bf16 error" ok "$(grep -cE '^ok +fast ' "$OUT/kernels.out") passed"
    else
        row "kernels: fast vs exact, within bf16 error" FAIL "$(grep -cE '^FAIL +fast ' "$OUT/kernels.out") failed (or none ran)"
    fi
    # their time against the exact kernels at the 1B model's shapes (a measurement, not a check)
    if timeout 120 "$kc" --bench 1 >"$OUT/kernels_bench.out" 2>&1; then
        row "kernels: fast vs exact, time (kernels_bench.out)" ok "$(grep '^bench attention forward (hd 64' "$OUT/kernels_bench.out" | grep -oE 'x[0-9.]+$' | sed 's/^/attention forward /')"
    else
        row "kernels: fast vs exact, time (kernels_bench.out)" FAIL "$(tail -1 "$OUT/kernels_bench.out")"
    fi
fi

# ---- 4. parity: the same model, data and plan on the CPU and on the GPU ----------------
export OMP_NUM_THREADS=8
"$Z" init-model --model_config tests/gpu/parity/config.json --output_dir "$work/pm" --seed 1 >/dev/null 2>&1 ||
    row "parity: init-model" FAIL "tests/gpu/parity/config.json"
# sections 4-6 hold the GPU to the CPU's numbers: exact kernels (fast is the default on
# --device cuda; docs/gpu.md, "Kernel modes"); section 7 runs the default, fast
P=(train --model "$work/pm" --data "$work/text.txt" --block_size 256 --per_device_train_batch_size 2
   --learning_rate 1e-3 --warmup_steps 1 --weight_decay 0.1 --progress false --peak_gflops 1 --kernels exact)
bf16=(--torch_dtype bfloat16 --mixed_precision bf16)
parity() { # name tolerance ranks extra-args...
    local name=$1 tol=$2 np=$3
    shift 3
    if run "$name.cpu" 240 "$np" "${P[@]}" --max_steps 5 --device cpu --log_jsonl "$work/$name.cpu.jsonl" "$@" &&
       run "$name.gpu" 120 "$np" "${P[@]}" --max_steps 5 --device cuda --log_jsonl "$work/$name.gpu.jsonl" "$@"; then
        local r
        r=$(max_rel "$work/$name.gpu.jsonl" "$work/$name.cpu.jsonl")
        if le "$r" "$tol"; then row "parity: $name" ok "max rel loss diff $r <= $tol over 5 steps"; else
            row "parity: $name" FAIL "max rel loss diff $r > $tol"; fi
    else
        row "parity: $name" FAIL "a run failed: $(tail -2 "$OUT/$name.cpu.out" "$OUT/$name.gpu.out" 2>/dev/null | tr '\n' ' ')"
    fi
}
parity fp32_1rank 1e-5 1
parity fp32_2ranks_staged 1e-5 2 --use_fsdp --comm_backend mpi
parity bf16_aligned_1rank 2e-2 1 "${bf16[@]}"

# ---- 5. DeepSpeed and FSDP aligned: bit-identical on the GPU ------------------------------
same_run() { # name ranks extra-args...
    local name=$1 np=$2
    shift 2
    local extra=()
    [ "$np" -gt 1 ] && extra=(--comm_backend mpi)
    if run "$name.fsdp" 120 "$np" "${P[@]}" --max_steps 5 "${bf16[@]}" --device cuda --use_fsdp \
           --fsdp_sharding_strategy FULL_SHARD "${extra[@]}" --output_dir "$work/$name.fsdp" \
           --log_jsonl "$work/$name.fsdp.jsonl" &&
       run "$name.ds" 120 "$np" "${P[@]}" --max_steps 5 "${bf16[@]}" --device cuda --use_deepspeed --zero_stage 3 \
           "${extra[@]}" --output_dir "$work/$name.ds" --log_jsonl "$work/$name.ds.jsonl"; then
        # tests/digests/digest.py: the saved weights' bytes, and step, loss, grad_norm, lr as printed
        local a b
        a=$(python3 tests/digests/digest.py "$work/$name.fsdp" "$work/$name.fsdp.jsonl")
        b=$(python3 tests/digests/digest.py "$work/$name.ds" "$work/$name.ds.jsonl")
        if [ -n "$a" ] && [ "$a" = "$b" ]; then row "same numbers: $name" ok "losses and weights bit-identical"
        elif [ -n "$a" ] && [ "${a#* }" = "${b#* }" ]; then row "same numbers: $name" FAIL "losses identical, weights differ"
        else row "same numbers: $name" FAIL "losses differ (max rel $(max_rel "$work/$name.ds.jsonl" "$work/$name.fsdp.jsonl"))"; fi
    else
        row "same numbers: $name" FAIL "a run failed: $(tail -2 "$OUT/$name.fsdp.out" "$OUT/$name.ds.out" | tr '\n' ' ')"
    fi
}
same_run ds3_vs_fsdp_1rank 1
same_run ds3_vs_fsdp_2ranks 2

# ---- 6. checkpoints across devices -------------------------------------------------------
# 4 steps; saved after 2 on one device, resumed on the other: steps 3-4 within 1e-5 of
# the uninterrupted run on the resuming device (the first two steps ran elsewhere)
for pair in "cuda cpu" "cpu cuda"; do
    read -r from to <<< "$pair"
    name=ckpt_${from}_to_${to}
    if run "$name.save" 120 1 "${P[@]}" --max_steps 4 --device "$from" --save_steps 2 --output_dir "$work/$name.save" &&
       run "$name.ref" 120 1 "${P[@]}" --max_steps 4 --device "$to" --log_jsonl "$work/$name.ref.jsonl" &&
       run "$name.resume" 120 1 "${P[@]}" --max_steps 4 --device "$to" --log_jsonl "$work/$name.resume.jsonl" \
           --resume_from_checkpoint "$work/$name.save/checkpoint-2"; then
        tail -n 2 "$work/$name.ref.jsonl" > "$work/$name.ref34.jsonl"
        r=$(max_rel "$work/$name.resume.jsonl" "$work/$name.ref34.jsonl")
        if grep -q "resumed from .*checkpoint-2 at step 2" "$OUT/$name.resume.out" && le "$r" 1e-5; then
            row "checkpoint: saved on $from, resumed on $to" ok "steps 3-4 max rel loss diff $r"
        else
            row "checkpoint: saved on $from, resumed on $to" FAIL "max rel loss diff $r; $(grep -m1 resum "$OUT/$name.resume.out")"
        fi
    else
        row "checkpoint: saved on $from, resumed on $to" FAIL "a run failed: see $name.*.out"
    fi
done

# ---- 7. 20 bf16 steps of a 1B-class Llama at T 2048 -------------------------------------------
# the MFU's denominator: the run measures the GPU's bf16 peak itself (its "mfu peak:" line
# must name the GPU, "NAME, sm_XY", not the CPU), and each JSONL record carries it
if timeout 150 "$Z" init-model --model_config tests/gpu/llama_1b/config.json --output_dir "$work/m1b" --seed 1 \
       --torch_dtype bf16 >"$OUT/init1b.out" 2>&1 &&
   run llama1b 240 1 train --model "$work/m1b" --data "$work/data.txt" --block_size 2048 \
       --per_device_train_batch_size 1 --max_steps 20 "${bf16[@]}" --device cuda --learning_rate 3e-4 \
       --warmup_steps 2 --progress false --log_jsonl "$OUT/llama1b.jsonl"; then
    last=$(tail -1 "$OUT/llama1b.jsonl")
    tps=$(printf '%s' "$last" | sed -n 's/.*"tokens_per_sec_per_device": \([^,]*\),.*/\1/p')
    mfu=$(printf '%s' "$last" | sed -n 's/.*"mfu": \([^,]*\),.*/\1/p')
    peak=$(printf '%s' "$last" | sed -n 's/.*"peak_gflops": \([^,]*\),.*/\1/p')
    l1=$(losses "$OUT/llama1b.jsonl" | head -1) l20=$(losses "$OUT/llama1b.jsonl" | tail -1)
    n=$(wc -l < "$OUT/llama1b.jsonl")
    peak_line=$(grep -m1 '^mfu peak:' "$OUT/llama1b.out")
    if [ "$n" -eq 20 ] && awk -v a="$l1" -v b="$l20" 'BEGIN { exit !(b == b && b < a) }' &&
       awk -v m="$mfu" 'BEGIN { exit !(m > 0 && m <= 1) }' && printf '%s' "$peak_line" | grep -q ', sm_[0-9]'; then
        row "1B bf16: 20 steps, T 2048" ok "loss $l1 -> $l20; $tps tokens/s; MFU $mfu of $peak GFLOP/s (last step)"
    else
        row "1B bf16: 20 steps, T 2048" FAIL "$n steps logged, loss $l1 -> $l20, MFU $mfu; $peak_line"
    fi
    grep -E '^(model|plan|device|memory|mfu peak)' "$OUT/llama1b.out" | head -7
else
    row "1B bf16: 20 steps, T 2048" FAIL "$(tail -3 "$OUT/init1b.out" "$OUT/llama1b.out" 2>/dev/null | tr '\n' ' ')"
fi

table | tee "$OUT/table.txt"
rm -rf "$work"
[ "$failed" -eq 0 ]
