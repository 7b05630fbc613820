#!/bin/sh
# profile_single.sh — where ztrain's time goes in a short bf16 training run of the
# benchmark configs (perf record -g; flat self-time report by symbol and by object).
# Uses the models and data that bench/run_single.sh left in build/bench; reports go to
# build/bench/perf-<config>-bf16.txt.  Usage: bench/profile_single.sh [a] [b]
# RANKS=2 profiles 2 ranks x 1 thread instead, as bench/peers/peers.py runs its FSDP
# bf16 rows (FULL_SHARD, bf16 load with an fp32 master); perf follows mpirun into both
# ranks, so the report sums them (build/bench/perf-<config>-bf16-2x1.txt).  W=DIR reads
# the models and data from DIR (bench/peers/peers.py leaves them in build/bench/peers).
# Sampling starts after a fixed delay (perf record -D: 4 s for a, 12 s for b) that covers
# start-up (load, buffer first touch, peak measurement is skipped with --peak_gflops), so
# the profile is the training steps; the first step, which creates oneDNN's primitives,
# may be partly in it.  oneDNN's JIT kernels live in the object "[JIT] tid N"; the run
# sets DNNL_JIT_PROFILE=2, so oneDNN writes their names to perf's map file
# (/tmp/perf-PID.map, removed after the report) and the products split into micro-kernels
# and operand packing (bench/perf_groups.py).  Raw addresses in libgomp are OpenMP's
# barrier/spin waiting.
set -eu
cd "$(dirname "$0")/.."
w=${W:-build/bench}
[ -e $w/text.txt ] || { echo "profile_single.sh: run bench/run_single.sh first" >&2; exit 2; }
ranks=${RANKS:-1}
case $ranks in
1) run="build/ztrain train --threads $(nproc) --mixed_precision bf16" tag=bf16 ;;
2) run="build/ztrain launch --num_processes 2 --threads_per_process 1 train --use_fsdp
        --fsdp_sharding_strategy FULL_SHARD --torch_dtype bfloat16 --mixed_precision bf16" tag=bf16-2x1 ;;
*) echo "profile_single.sh: RANKS is 1 or 2, not $ranks" >&2; exit 2 ;;
esac
busy_s() { # CPU seconds the whole machine has been busy (/proc/stat), as a decimal
    awk -v hz="$(getconf CLK_TCK)" '/^cpu /{print ($2 + $3 + $4 + $7 + $8 + $9) / hz; exit}' /proc/stat
}
for c in ${*:-a b}; do
    case $c in
    a) args="--data $w/text.txt --block_size 256 --per_device_train_batch_size 8 --max_steps 16"
       delay_ms=4000 ;;
    b) args="--data $w/tokens32k.npy --block_size 512 --per_device_train_batch_size 4 --max_steps 10"
       delay_ms=12000 ;;
    *) echo "profile_single.sh: unknown config $c" >&2; exit 2 ;;
    esac
    busy0=$(busy_s)
    maps0=$(echo /tmp/perf-*.map)
    # shellcheck disable=SC2086  # $run and $args are word lists
    DNNL_JIT_PROFILE=2 /usr/bin/time -f '%U %S' -o $w/perf-$c-$tag.cpu \
        perf record -q -g -D $delay_ms -o $w/perf-$c-$tag.data $run --model $w/model-$c $args \
        --progress false --peak_gflops 1000 >$w/perf-$c-$tag.out 2>&1
    busy1=$(busy_s)
    {
        grep -E '^(trained|activations)' $w/perf-$c-$tag.out
        # CPU seconds the machine was busy minus this run's own: other work sharing the
        # cores makes OpenMP threads wait for each other, which shows up as libgomp time.
        awk -v b0="$busy0" -v b1="$busy1" '{printf "other processes took %.1f CPU s during the run (the run: %.1f s)\n", b1 - b0 - $1 - $2, $1 + $2}' $w/perf-$c-$tag.cpu
        echo "== by part of the step (bench/perf_groups.py)"
        perf report -n -i $w/perf-$c-$tag.data --no-children --sort dso,symbol -g none --stdio \
            2>/dev/null | /usr/bin/python3 bench/perf_groups.py
        echo "== by object"
        perf report -i $w/perf-$c-$tag.data --no-children --sort dso -g none --stdio 2>/dev/null |
            grep -E '^ +[0-9]' | sed 's/ *$//' | head -8
        echo "== by object and symbol"
        perf report -i $w/perf-$c-$tag.data --no-children --sort dso,symbol -g none --stdio \
            2>/dev/null | grep -E '^ +[0-9]' | sed 's/ *$//' | head -30
    } >$w/perf-$c-$tag.txt
    for f in /tmp/perf-*.map; do # the map files this run's processes wrote
        case " $maps0 " in *" $f "*) ;; *) rm -f "$f" ;; esac
    done
    echo "config $c ($tag): $w/perf-$c-$tag.txt"
    cat $w/perf-$c-$tag.txt
done
