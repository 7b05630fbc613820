#!/usr/bin/env bash
# bench/multinode.sh — the cost of the network (issue 13 point 6): FULL_SHARD against
# HYBRID_SHARD on benchmark config (a) across 2 simulated machines of 1 and of 2 ranks
# (tests/cli/netns.bash: network namespaces on a bridge, Open MPI's TCP transport
# only), first on the bare veth links, then with every machine's outgoing link held to
# RATE by tc's token bucket (tbf).  Reports tokens/s per device (median of steps 2..S),
# the step time, and the bytes each rank moved per step with its own machine and with
# the other one (the JSONL's comm_link_bytes).
#
#   bench/multinode.sh [--steps S] [--batch B] [--rate RATE]     (root; default 4, 1, 1gbit)
#
# The simulated machines share this machine's cores: a 2x2 layout puts 4 ranks (1
# thread each) on them, so its tokens/s measure the cores as much as the network.
# The byte counts are exact whatever the load.  netem is not used (this kernel has no
# sch_netem); tbf limits the rate only, it adds no latency.
set -u
steps=4 batch=1 rate=1gbit
while [ $# -gt 0 ]; do
    case $1 in
        --steps) steps=$2; shift 2 ;;
        --batch) batch=$2; shift 2 ;;
        --rate) rate=$2; shift 2 ;;
        *) echo "usage: bench/multinode.sh [--steps S] [--batch B] [--rate RATE]" >&2; exit 2 ;;
    esac
done
[ "$(id -u)" -eq 0 ] || { echo "bench/multinode.sh: needs root (ip netns)" >&2; exit 1; }
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
make -j2 build/ztrain > /dev/null || exit 1
ZTRAIN=$root/build/ztrain
work=$(mktemp -d /tmp/zt_bench_mn_XXXXXX)
. tests/cli/netns.bash
net_init "$work"
trap 'net_cleanup; rm -rf "$work"' EXIT

# config (a): its model, and bytes of English text as tokens (as bench/single.py makes them)
find /usr/share/common-licenses -maxdepth 1 -type f | sort | xargs cat > "$work/text.txt"
"$ZTRAIN" init-model --model_config bench/configs/a/config.json --output_dir "$work/model" --seed 0 > /dev/null ||
    exit 1

echo "config a, block 256, micro-batch $batch per rank, $steps steps, 1 thread per rank; limit: $rate (tbf)"
for layout in "2 1" "2 2"; do
    set -- $layout
    machines=$1 ranks=$2
    net_up "$machines" "$ranks" || { echo "could not make the namespaces" >&2; exit 1; }
    for limit in none "$rate"; do
        [ "$limit" = none ] || net_limit "$limit" || { echo "tc tbf failed" >&2; exit 1; }
        for strategy in FULL_SHARD HYBRID_SHARD; do
            tag=${machines}x${ranks}-$strategy-$limit
            on_machines --threads_per_process 1 train --model "$work/model" --data "$work/text.txt" \
                --block_size 256 --per_device_train_batch_size "$batch" --max_steps "$steps" \
                --use_fsdp --fsdp_sharding_strategy "$strategy" --progress false \
                --log_jsonl "$work/$tag.jsonl" > "$work/$tag.out" 2>&1 ||
                { echo "$tag failed:"; tail -20 "$work/$tag.out"; exit 1; }
            /usr/bin/python3 - "$work/$tag.jsonl" "$tag" "$(grep '^plan:' "$work/$tag.out")" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
later = rows[1:] or rows
tps = statistics.median(r["tokens_per_sec_per_device"] for r in later)
dt = statistics.median(r["step_time_s"] for r in later)
link = rows[-1]["comm_link_bytes"]
MB = 1e6
print("%-28s %8.1f tok/s/device  step %6.2f s  intra %7.1f MB  inter %7.1f MB  | %s"
      % (sys.argv[2], tps, dt, link["intra_machine"] / MB, link["inter_machine"] / MB,
         sys.argv[3].split(", ", 2)[2] if sys.argv[3].count(", ") >= 2 else sys.argv[3]))
PY
        done
    done
    net_cleanup
done
