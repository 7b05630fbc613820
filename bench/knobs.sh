#!/bin/bash
# knobs.sh — the speed effect of DeepSpeed's and FSDP's limits (docs/zero.md): one
# 2-rank stage-3 (and stage-2) run per setting on config a of bench/configs, alternated
# over rounds, each setting's fastest median kept, printed beside the run without it.
# The numbers of every run are the same (tests/test_zero.c test_knob_*); only when data
# moves, in how many calls, and how much stays gathered differ.
#
#   bench/knobs.sh [rounds] [steps]      (T and B from the environment: 64 and 2)
#
# Runs ranks x 1 thread (mpirun --oversubscribe --bind-to none).  On a shared machine read
# the ratios with the spread of the rounds: a few per cent is noise there.
set -eu
rounds=${1:-2}
steps=${2:-6}
cd "$(dirname "$0")/.."
zt=$PWD/build/ztrain
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
find /usr/share/common-licenses -maxdepth 1 -type f | sort | xargs cat > "$tmp/text.txt"
"$zt" init-model --model_config bench/configs/a/config.json --output_dir "$tmp/model" --seed 0 >/dev/null
T=${T:-64}
B=${B:-2}
mpi=(mpirun --oversubscribe --bind-to none -x OMP_NUM_THREADS=1)
[ "$(id -u)" -eq 0 ] && mpi+=(--allow-run-as-root)
ds() { # NAME STAGE PERSISTENCE EXTRA: a DeepSpeed JSON (persistence 0 unless said: DeepSpeed's
       # default, 1e5, would keep most units of this small model gathered)
    local p=""
    [ "$2" = 3 ] && p=", \"stage3_param_persistence_threshold\": $3"
    printf '{"train_micro_batch_size_per_gpu": "auto", "zero_optimization": {"stage": %s%s%s}}\n' \
        "$2" "$p" "$4" >"$tmp/$1.json"
}
H2=$((512 * 512))
ds s3 3 0 ""
ds s3_reduce_bucket 3 0 ", \"reduce_bucket_size\": $H2"
ds s3_persist_all 3 100000000 ""
ds s3_max_live 3 0 ", \"stage3_max_live_parameters\": 100000"
ds s2 2 0 ""
ds s2_buckets 2 0 ", \"reduce_bucket_size\": $H2, \"allgather_bucket_size\": $H2"
settings=(
    "s3|--deepspeed_config_file $tmp/s3.json"
    "s3_reduce_bucket|--deepspeed_config_file $tmp/s3_reduce_bucket.json"
    "s3_persist_all|--deepspeed_config_file $tmp/s3_persist_all.json"
    "s3_max_live|--deepspeed_config_file $tmp/s3_max_live.json"
    "fsdp_limit|--use_fsdp --fsdp_forward_prefetch"
    "fsdp_nolimit|--use_fsdp --fsdp_forward_prefetch --fsdp_limit_all_gathers false"
    "s2|--deepspeed_config_file $tmp/s2.json"
    "s2_buckets|--deepspeed_config_file $tmp/s2_buckets.json"
)
median() { /usr/bin/python3 bench/step_times.py "$1" --skip 2; }
declare -A best
for r in $(seq "$rounds"); do
    for s in "${settings[@]}"; do
        IFS='|' read -r name flags <<<"$s"
        # shellcheck disable=SC2086  # the flags are words without spaces
        "${mpi[@]}" -np 2 "$zt" train --model "$tmp/model" --data "$tmp/text.txt" --block_size "$T" \
            --per_device_train_batch_size "$B" --max_steps "$steps" --threads 1 --peak_gflops 1000 \
            --progress false --log_jsonl "$tmp/$name.jsonl" $flags >/dev/null 2>"$tmp/err" ||
            { cat "$tmp/err"; exit 1; }
        m=$(median "$tmp/$name.jsonl")
        echo "round $r $name: median $m s/step"
        if [ -z "${best[$name]:-}" ] || /usr/bin/python3 -c "import sys; sys.exit(not $m < ${best[$name]})"; then
            best[$name]=$m
        fi
    done
done
ratio() { /usr/bin/python3 -c "print('%s: %.4f s/step, %.3f x %s' % ('$1', ${best[$1]}, ${best[$1]} / ${best[$2]}, '$2'))"; }
for pair in "s3_reduce_bucket s3" "s3_persist_all s3" "s3_max_live s3" "fsdp_nolimit fsdp_limit" "s2_buckets s2"; do
    ratio $pair
done
