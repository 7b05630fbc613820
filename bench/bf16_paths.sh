#!/bin/bash
# bf16_paths.sh — is bf16 at least as fast as fp32 on each bf16 path (issue 18 point 3)?
# And fp16, which no CPU here multiplies natively (PRECS="fp32 bf16 fp16")?
# fp32 and bf16 training side by side, alternating, repeated, under the CPU's own path
# ("native": AVX512-BF16 where the CPU has it) and under DNNL_MAX_CPU_ISA=AVX2 ("avx2":
# the path of a CPU without native bf16, where bf16 products run gemm_bf16.c's kernel and
# fp32 products oneDNN's AVX2 sgemm — a fair comparison on an AVX-512 machine too).
#
#   CONFIGS=a PATHS="native avx2" LAYOUTS="1x2 2x1" ROUNDS=2 STEPS=6 bench/bf16_paths.sh
#   CONFIGS=b PATHS=native LAYOUTS="1x2 2x1" PRECS="fp32 fp16" bench/bf16_paths.sh
#
# Configs are bench/configs' a (T 256, B 8) and b (T 512, B 4), as bench/single.py runs
# them, on the bytes of /usr/share/common-licenses.  Layouts: "1xN" is one process with
# N threads (bf16 = --mixed_precision bf16, as bench/single.py); "2x1" is ztrain launch
# with 2 ranks x 1 thread under FSDP FULL_SHARD (ZeRO-3), bf16 being the aligned mode
# (--torch_dtype bfloat16 --mixed_precision bf16, as bench/zero.py); fp16 is
# --mixed_precision fp16 in both layouts (fp32 weights and master, fp16 compute and
# reduction, loss scaling: DeepSpeed's fp16 and FSDP's fp16 MixedPrecision).  A run's figure is
# the median step_time_s after its first two steps (after the first when STEPS < 5);
# the best over the rounds counts: on a shared machine other load only slows a run.
# Printed per (config, path, layout): each precision's best median and, for each
# 16-bit one, e.g. bf16/fp32 = tokens/s of bf16 over fp32 (> 1: bf16 faster), with the plan line's bf16
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
PRECS=${PRECS:-fp32 bf16}
case " $PRECS " in *" fp32 "*) ;; *) echo "bench: PRECS must include fp32, the baseline" >&2; exit 2 ;; esac
for prec in $PRECS; do
    case $prec in fp32 | bf16 | fp16) ;; *) echo "bench: unknown precision $prec in PRECS (fp32, bf16, fp16)" >&2; exit 2 ;; esac
done
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
                for prec in $PRECS; do
                    common=(train --model "$tmp/model-$cfg" --data "$tmp/text.txt" --block_size "$T"
                            --per_device_train_batch_size "$B" --max_steps "$STEPS" --progress false
                            --log_jsonl "$tmp/run.jsonl")
                    if [ "$ranks" = 1 ]; then
                        argv=("$zt" "${common[@]}" --threads "$threads")
                        [ "$prec" = fp32 ] || argv+=(--mixed_precision "$prec")
                    else
                        argv=("$zt" launch --num_processes "$ranks" --threads_per_process "$threads" "${common[@]}"
                              --use_fsdp --fsdp_sharding_strategy FULL_SHARD)
                        [ "$prec" = bf16 ] && argv+=(--torch_dtype bfloat16 --mixed_precision bf16)
                        [ "$prec" = fp16 ] && argv+=(--mixed_precision fp16)
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
            args=("$cfg" "$p" "$lay" "$path_line")
            for prec in $PRECS; do args+=("$prec=${best[$prec]}"); done
            /usr/bin/python3 -c 'import sys
c, p, l, how = sys.argv[1:5]
t = dict(a.split("=") for a in sys.argv[5:])
parts = ["%s %.4f s/step" % (k, float(v)) for k, v in t.items()]
parts += ["%s/fp32 tokens/s %.3f" % (k, float(t["fp32"]) / float(v)) for k, v in t.items() if k != "fp32"]
print("RESULT config %s path %s %s: %s%s" % (c, p, l, ", ".join(parts), " (%s)" % how if how else ""))' "${args[@]}"
            unset best
        done
    done
done
