#!/bin/bash
# ab_step.sh — two ztrain builds side by side on one training shape, alternating,
# each one's fastest run kept: the before/after check for a change that must not
# cost speed (the backend table, issue 11 point 3).  Shorter than run_single.sh
# and without the PyTorch peer: it compares ztrain with ztrain.
#
#   bench/ab_step.sh OLD_ZTRAIN NEW_ZTRAIN [rounds] [steps] [precisions]
#
# Config a of bench/configs (8 layers, hidden 512; T 256 and B 8 unless the
# environment sets T and B: a smaller batch weighs the per-call overhead more) on the bytes of
# /usr/share/common-licenses, --threads $(nproc) unless THREADS is set.  A run's
# figures are the median and the fastest of its steps' step_time_s after the first
# two; each build's best of each over the rounds is printed, then NEW / OLD.  On a
# shared machine, alternate several rounds and read the fastest steps (the least
# disturbed): the machine's speed drifts by several per cent over minutes, and
# other load slows single steps by far more.
set -eu
old=${1:?"usage: bench/ab_step.sh OLD_ZTRAIN NEW_ZTRAIN [rounds] [steps] [precisions]"}
new=${2:?"usage: bench/ab_step.sh OLD_ZTRAIN NEW_ZTRAIN [rounds] [steps] [precisions]"}
rounds=${3:-3}
steps=${4:-6}
precisions=${5:-"fp32 bf16"}
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
find /usr/share/common-licenses -maxdepth 1 -type f | sort | xargs cat > "$tmp/text.txt"
"$new" init-model --model_config bench/configs/a/config.json --output_dir "$tmp/model" --seed 0 >/dev/null
threads=${THREADS:-$(nproc)}
T=${T:-256}
B=${B:-8}

# "median fastest" step_time_s of a JSONL log, skipping the first two steps
figures() { /usr/bin/python3 bench/step_times.py "$1" --skip 2 --fastest; }

best() { /usr/bin/python3 -c 'import sys; print(min(float(x) for x in sys.argv[1:]))' "$@"; }

for prec in $precisions; do
    flags=()
    [ "$prec" = bf16 ] && flags=(--mixed_precision bf16)
    med_old=(); med_new=(); min_old=(); min_new=()
    for r in $(seq "$rounds"); do
        for which in old new; do
            bin=$old; [ $which = new ] && bin=$new
            "$bin" train --model "$tmp/model" --data "$tmp/text.txt" --block_size "$T" \
                --per_device_train_batch_size "$B" --max_steps "$steps" --threads "$threads" \
                --log_jsonl "$tmp/$which.jsonl" --progress false "${flags[@]}" > /dev/null
            read -r med fast <<< "$(figures "$tmp/$which.jsonl")"
            echo "$prec round $r $which: median $med s/step, fastest $fast s/step"
            if [ $which = old ]; then med_old+=("$med"); min_old+=("$fast"); else med_new+=("$med"); min_new+=("$fast"); fi
        done
    done
    /usr/bin/python3 -c 'import sys
p, mo, mn, fo, fn = sys.argv[1], *map(float, sys.argv[2:])
print("%s: best median old %.4f new %.4f (new/old %.3f); fastest step old %.4f new %.4f (new/old %.3f)"
      % (p, mo, mn, mn / mo, fo, fn, fn / fo))' "$prec" "$(best "${med_old[@]}")" "$(best "${med_new[@]}")" \
        "$(best "${min_old[@]}")" "$(best "${min_new[@]}")"
done
