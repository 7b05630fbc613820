#!/usr/bin/env bash
# bench/ckpt_save.sh — how long a checkpoint of config b's size (124M parameters,
# fp32 master) takes to save on 2 ranks, how many bytes each rank writes, and rank
# 0's peak memory during the save, FULL_STATE_DICT (the gathered HF model too) vs
# SHARDED_STATE_DICT (the shards and the index only); then merge-weights of the
# sharded checkpoint, with its peak resident memory.  Prints the trainer's
# "checkpoint saved" lines, which carry those numbers.
#   bench/ckpt_save.sh [BUILD_DIR]      (needs ~5 GB in /tmp)
set -euo pipefail
build=${1:-build}
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
tmp=$(mktemp -d /tmp/zt_bench_ckpt_XXXXXX)
trap 'rm -rf "$tmp"' EXIT
mpi=(mpirun --oversubscribe --bind-to none -x OMP_NUM_THREADS=1 -np 2)
[ "$(id -u)" -eq 0 ] && mpi+=(--allow-run-as-root)
"$build/ztrain" init-model --model_config bench/configs/b/config.json --output_dir "$tmp/model" > /dev/null
/usr/bin/python3 -c "import numpy as n; n.save('$tmp/tokens.npy', (n.arange(4096) * 7919 % 32000).astype(n.int32))"
args=(train --model "$tmp/model" --data "$tmp/tokens.npy" --block_size 64 --per_device_train_batch_size 1
      --threads 1 --peak_gflops 1 --max_steps 2 --save_steps 1 --progress false --use_fsdp)
for kind in FULL_STATE_DICT SHARDED_STATE_DICT; do
    printf 'distributed_type: FSDP\nfsdp_config:\n  fsdp_state_dict_type: %s\n' "$kind" > "$tmp/$kind.yaml"
    echo "== $kind"
    "${mpi[@]}" "$build/ztrain" "${args[@]}" --config_file "$tmp/$kind.yaml" --output_dir "$tmp/$kind" |
        grep "checkpoint saved"
    du -sb "$tmp/$kind/checkpoint-1" | awk '{printf "checkpoint-1: %.1f MB on disk\n", $1 / 1e6}'
done
echo "== merge-weights of the SHARDED_STATE_DICT checkpoint"
"$build/ztrain" merge-weights "$tmp/SHARDED_STATE_DICT/checkpoint-1" "$tmp/merged"
cmp "$tmp/merged/model.safetensors" "$tmp/FULL_STATE_DICT/checkpoint-1/model.safetensors" &&
    echo "merged model is byte-identical to FULL_STATE_DICT's"
