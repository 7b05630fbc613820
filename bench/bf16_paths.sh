#!/bin/bash
# bf16_paths.sh — is bf16 at least as fast as fp32 on each bf16 path (issue 18 point 3)?
# fp32 and bf16 training side by side, alternating, repeated, under the CPU's own path
# ("native": AVX512-BF16 where the CPU has it) and under DNNL_MAX_CPU_ISA=AVX2 ("avx2":
# the path of a CPU without native bf16, where bf16 products run gemm_bf16.c's kernel and
# fp32 products oneDNN's AVX2 sgemm — a fair comparison on an AVX-512 machine too).
#
#   CONFIGS=a PATHS="native avx2" LAYOUTS="1x2 2x1" ROUNDS=2 STEPS=6 bench/bf16_paths.sh
#
# Configs are bench/configs' a (T 256, B 8) and b (T 512, B 4), as bench/single.py runs
# them, on the bytes of /usr/share/common-licenses.  Layouts: "1xN" is one process with
# N threads (bf16 = --mixed_precision bf16, as bench/single.py); "2x1" is ztrain launch
# with 2 ranks x 1 thread under FSDP FULL_SHARD (ZeRO-3), bf16 being the aligned mode
# (--torch_dtype bfloat16 --mixed_precision bf16, as bench/zero.py).  A run's figure is
# the median step_time_s after its first two steps (after the first when STEPS < 5);
# the best over the rounds counts: on a shared machine other load only slows a run.
# Printed per (config, path, layout): each precision's best median and
# bf16/fp32 = tokens/s of bf16 over fp32 (> 1: bf16 faster), with the plan line's bf16
# path and the CPU.  Each run is short; keep a whole call under two minutes on a
# shared machine by narrowing CONFIGS, PATHS and LAYOUTS.
set -eu
cd "$(dirname "$0")/.."
make -j2 build/ztrain >/dev/null
zt=$PWD/build/ztrain
CONFIGS=${CONFIGS:-a}
PATHS=${PATHS:-native avx2}
LAYOUTS=${LAYOUTS:-1x$(nproc) 2x1}
ROUNDS=${ROUNDS:-2}
STEPS=${STEPS:-6}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
find /usr/share/common-licenses -maxdepth 1 -type f | sort | xargs cat > "$tmp/text.txt"

echo "cpu: $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1), $(nproc) cores"
for p in $PATHS; do
    envs=(); [ "$p" = avx2 ] && envs=(DNNL_MAX_CPU_ISA=AVX2)
    echo "path $p: $(env "${envs[@]}" "$zt" env --measure false | grep -E '^(onednn|bf16 products):' | tr '\n' ';')"
done

# the median step time of a JSONL log after its warm-up steps
figure() { /usr/bin/python3 bench/step_times.py "$1"; }

for cfg in $CONFIGS; do
    case $cfg in a) T=256 B=8 ;; b) T=512 B=4 ;; *) echo "bench: unknown config $cfg (a or b)" >&2; exit 2 ;; esac
    "$zt" init-model --model_config "bench/configs/$cfg/config.json" --output_dir "$tmp/model-$cfg" --seed 0 >/dev/null
    for p in $PATHS; do
        envs=(); [ "$p" = avx2 ] && envs=(DNNL_MAX_CPU_ISA=AVX2)
        for lay in $LAYOUTS; do
            ranks=${lay%x*} threads=${lay#*x}
            declare -A best=()
            path_line=""
            for r in $(seq "$ROUNDS"); do
                for prec in fp32 bf16; do
                    common=(train --model "$tmp/model-$cfg" --data "$tmp/text.txt" --block_size "$T"
                            --per_device_train_batch_size "$B" --max_steps "$STEPS" --progress false
                            --log_jsonl "$tmp/run.jsonl")
                    if [ "$ranks" = 1 ]; then
                        argv=("$zt" "${common[@]}" --threads "$threads")
                        [ "$prec" = bf16 ] && argv+=(--mixed_precision bf16)
                    else
                        argv=("$zt" launch --num_processes "$ranks" --threads_per_process "$threads" "${common[@]}"
                              --use_fsdp --fsdp_sharding_strategy FULL_SHARD)
                        [ "$prec" = bf16 ] && argv+=(--torch_dtype bfloat16 --mixed_precision bf16)
                    fi
                    rm -f "$tmp/run.jsonl"
                    env "${envs[@]}" "${argv[@]}" > "$tmp/run.out" 2>&1 ||
                        { tail -20 "$tmp/run.out"; echo "bench: failed: ${argv[*]}" >&2; exit 1; }
                    [ "$prec" = bf16 ] && path_line=$(sed -n 's/^plan: .*, \(bf16 products: .*\)$/\1/p' "$tmp/run.out")
                    t=$(figure "$tmp/run.jsonl")
                    echo "config $cfg path $p ${ranks}x$threads $prec round $r: median $t s/step"
                    if [ -z "${best[$prec]:-}" ] || /usr/bin/python3 -c "import sys; sys.exit(not $t < ${best[$prec]})"; then
                        best[$prec]=$t
                    fi
                done
            done
            /usr/bin/python3 -c 'import sys
c, p, l, f, b, how = sys.argv[1:]
print("RESULT config %s path %s %s: fp32 %.4f s/step, bf16 %.4f s/step, bf16/fp32 tokens/s %.3f (%s)"
      % (c, p, l, float(f), float(b), float(f) / float(b), how))' "$cfg" "$p" "$lay" "${best[fp32]}" "${best[bf16]}" "$path_line"
            unset best
        done
    done
done
