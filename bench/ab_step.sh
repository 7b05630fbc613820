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
# /usr/share/common-licenses, --threads $(nproc).  A run's figure is the median of
# its steps' step_time_s after the first two; each build's best over the rounds is
# printed, then NEW / OLD.  On a shared machine, alternate several rounds: the
# machine's speed drifts by several per cent over minutes.
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
threads=$(nproc)
T=${T:-256}
B=${B:-8}

# median step_time_s of a JSONL log, skipping the first two steps
median() {
    /usr/bin/python3 -c 'import json,statistics,sys
t=[json.loads(l)["step_time_s"] for l in open(sys.argv[1])][2:]
print("%.4f" % statistics.median(t))' "$1"
}

for prec in $precisions; do
    flags=()
    [ "$prec" = bf16 ] && flags=(--mixed_precision bf16)
    best_old=""; best_new=""
    for r in $(seq "$rounds"); do
        for which in old new; do
            bin=$old; [ $which = new ] && bin=$new
            "$bin" train --model "$tmp/model" --data "$tmp/text.txt" --block_size "$T" \
                --per_device_train_batch_size "$B" --max_steps "$steps" --threads "$threads" \
                --log_jsonl "$tmp/$which.jsonl" --progress false "${flags[@]}" > /dev/null
            t=$(median "$tmp/$which.jsonl")
            echo "$prec round $r $which: $t s/step"
            if [ $which = old ]; then
                best_old=$(/usr/bin/python3 -c "print(min(float(x) for x in '$best_old $t'.split()))")
            else
                best_new=$(/usr/bin/python3 -c "print(min(float(x) for x in '$best_new $t'.split()))")
            fi
        done
    done
    /usr/bin/python3 -c "print('$prec: old best %.4f s/step, new best %.4f s/step, new/old %.3f' % ($best_old, $best_new, $best_new / $best_old))"
done
