#!/usr/bin/env bash
# bench/offload.sh — what offload costs and what it buys (docs/zero.md, Offload):
#   1. the largest model (the 1B model's shape, tests/gpu/llama_1b, with more layers)
#      whose estimated device bytes fit the GPU at T 2048, with and without offload, in
#      fp32 and DeepSpeed bf16 (fp32 master, bf16 compute): from the engine's size
#      table (estimate-memory), so it runs anywhere (--estimate-only);
#   2. the host-device bandwidth offload runs over (bench/offload_bandwidth.cu, pinned
#      and pageable, each way), on a GPU;
#   3. the 1B model trained 10 steps at T 2048, bf16, one rank, DeepSpeed ZeRO-2 and
#      ZeRO-3, with and without offload: tokens/s, device and host bytes, and the
#      loss of each step, which offload must not change, on a GPU;
#   4. with --emu, on any machine: bench/configs/a (25M parameters) on the emulated
#      device, T 64, B 1, one rank, ZeRO-2 and ZeRO-3, without offload, with it, and
#      with the delayed update: the median step time.  The emulated device runs its
#      kernels on the host's cores, so this is the cost of offload's own work (the
#      copies, the compute-dtype shards, the thread), not of a PCIe link.
# Prints a table and writes it to $OUT/offload_bench.txt.
#
#   bench/offload.sh [--estimate-only] [--emu] [--limit_gib G] [--host_gib G] [--ztrain BIN] [--steps N]
# ZTRAIN/--ztrain: the binary (default build-cuda/ztrain, else build/ztrain); NVCC: the
# compiler for the bandwidth probe (default: nvcc on PATH, else /usr/local/cuda/bin/nvcc);
# --limit_gib: the device memory to fit (default: the GPU's total per nvidia-smi, else 139);
# --host_gib: the host memory the offloaded state may take (default: this machine's MemTotal).
# tests/gpu/check.sh may call it as: OUT=$OUT ZTRAIN=$Z NVCC=$NVCC bash bench/offload.sh
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
estimate_only=0 emu=0 limit_gib="" host_gib="" steps=10
Z=${ZTRAIN:-}
while [ $# -gt 0 ]; do
    case $1 in
    --estimate-only) estimate_only=1 ;;
    --emu) emu=1 ;;
    --limit_gib) limit_gib=$2; shift ;;
    --host_gib) host_gib=$2; shift ;;
    --ztrain) Z=$2; shift ;;
    --steps) steps=$2; shift ;;
    *) echo "bench/offload.sh: unknown argument '$1' (expected --estimate-only, --emu, --limit_gib G, --host_gib G, --ztrain BIN, --steps N)" >&2
       exit 2 ;;
    esac
    shift
done
[ -n "$Z" ] || { [ -x build-cuda/ztrain ] && Z=build-cuda/ztrain || Z=build/ztrain; }
[ -x "$Z" ] || { echo "bench/offload.sh: no ztrain at $Z (make, or make cuda)" >&2; exit 2; }
OUT=${OUT:-/tmp/zt_offload_bench}
mkdir -p "$OUT"
work=$(mktemp -d /tmp/zt_offload_XXXXXX)
trap 'rm -rf "$work"' EXIT
have_gpu=0
if [ $estimate_only -eq 0 ] && command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
    have_gpu=1
fi
if [ -z "$limit_gib" ]; then
    mib=$([ $have_gpu -eq 1 ] && nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
    limit_gib=$(awk -v m="${mib:-0}" 'BEGIN { printf "%.1f", (m > 0 ? m / 1024 : 139) }')
fi
[ -n "$host_gib" ] || host_gib=$(awk '/^MemTotal:/ { printf "%.1f", $2 / 1048576 }' /proc/meminfo)
rows=()
row() { rows+=("$(printf '%-58s %s' "$1" "$2")"); }

ds_json() { # file stage offload(0|1)
    local o=""
    [ "$3" = 1 ] && o='"offload_optimizer": {"device": "cpu"},'
    [ "$3" = 1 ] && [ "$2" = 3 ] && o="$o \"offload_param\": {\"device\": \"cpu\"},"
    printf '{"zero_optimization": {%s "stage": %s}, "train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto"}\n' \
        "$o" "$2" > "$1"
}
for s in 2 3; do for o in 0 1; do ds_json "$work/s$s.o$o.json" "$s" "$o"; done; done

# ---- 1. the largest model that fits, from the size table -------------------------------------
# device bytes of the 1B shape with L layers (the estimate's "device" line, MiB), or
# "inf" when the offloaded host bytes (its "host (offload)" line) exceed the host's share
device_mib() { # layers mixed(no|bf16) offload(0|1)
    python3 - "$1" > "$work/c$1.json" <<'EOF'
import json, sys
c = json.load(open("tests/gpu/llama_1b/config.json"))
c["num_hidden_layers"] = int(sys.argv[1])
print(json.dumps(c))
EOF
    "$Z" estimate-memory --model_config "$work/c$1.json" --use_deepspeed --deepspeed_config_file "$work/s3.o$3.json" \
        --device cuda --block_size 2048 --per_device_train_batch_size 1 --mixed_precision "$2" \
        --gradient_checkpointing > "$work/est.txt" 2>&1
    local d h
    d=$(sed -n 's/^  device *\([0-9.]*\) MiB.*/\1/p' "$work/est.txt")
    h=$(sed -n 's/^  host (offload) *\([0-9.]*\) MiB.*/\1/p' "$work/est.txt")
    awk -v d="$d" -v h="${h:-0}" -v l="$host_gib" 'BEGIN { if (d == "") exit; if (h > l * 1024) print 1e18; else print d }'
}
params_of() { "$Z" estimate-memory --model_config "$work/c$1.json" 2>&1 | sed -n 's/.*; model \([0-9]*\) parameters$/\1/p'; }
limit_mib=$(awk -v g="$limit_gib" 'BEGIN { printf "%d", g * 1024 }')
for mixed in no bf16; do
    for o in 0 1; do
        lo=1 hi=4096 # largest L with device_mib(L) <= limit, by bisection
        d=$(device_mib 1 "$mixed" "$o")
        if [ -z "$d" ] || awk -v d="$d" -v l="$limit_mib" 'BEGIN { exit !(d > l) }'; then
            row "fits in $limit_gib GiB: $([ "$mixed" = no ] && echo fp32 || echo bf16), offload $o" "none (1 layer: ${d:-?} MiB)"
            continue
        fi
        while [ $((hi - lo)) -gt 1 ]; do
            mid=$(( (lo + hi) / 2 ))
            d=$(device_mib "$mid" "$mixed" "$o")
            if [ -n "$d" ] && awk -v d="$d" -v l="$limit_mib" 'BEGIN { exit !(d <= l) }'; then lo=$mid; else hi=$mid; fi
        done
        device_mib "$lo" "$mixed" "$o" >/dev/null
        p=$(params_of "$lo")
         row "fits in $limit_gib GiB + $host_gib GiB host (estimate): $([ "$mixed" = no ] && echo fp32 || echo 'DeepSpeed bf16'), ZeRO-3, offload $o" \
            "$lo layers, $(awk -v p="$p" 'BEGIN { printf "%.2fB", p / 1e9 }') parameters, T 2048, B 1, checkpointing"
    done
done

if [ $have_gpu -eq 1 ]; then
    # ---- 2. the link ---------------------------------------------------------------------------
    NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
    if "$NVCC" -O2 ${ZT_BENCH_NVCCFLAGS:-} bench/offload_bandwidth.cu -o "$work/bw" >"$OUT/bw_build.log" 2>&1 &&
       timeout 60 "$work/bw" 256 >"$OUT/bandwidth.txt" 2>&1; then
        while read -r line; do row "bandwidth: ${line%%:*}" "${line#*: }"; done < "$OUT/bandwidth.txt"
    else
        row "bandwidth" "FAILED: $(tail -2 "$OUT/bw_build.log" "$OUT/bandwidth.txt" 2>/dev/null | tr '\n' ' ')"
    fi

    # ---- 3. the 1B model, offload against none ---------------------------------------------------
    cat docs/*.md README.md docs/*.md > "$work/data.txt"
    if timeout 150 "$Z" init-model --model_config tests/gpu/llama_1b/config.json --output_dir "$work/m1b" --seed 1 \
           --torch_dtype bf16 >"$OUT/offload_init.out" 2>&1; then
        for s in 2 3; do
            for o in 0 1; do
                name=s$s.o$o
                timeout 200 "$Z" train --model "$work/m1b" --data "$work/data.txt" --block_size 2048 \
                    --per_device_train_batch_size 1 --max_steps "$steps" --use_deepspeed \
                    --deepspeed_config_file "$work/$name.json" --mixed_precision bf16 --device cuda \
                    --learning_rate 3e-4 --warmup_steps 2 --progress false --log_jsonl "$OUT/offload_$name.jsonl" \
                    >"$OUT/offload_$name.out" 2>&1 || { row "1B ZeRO-$s offload $o" "FAILED: $(tail -2 "$OUT/offload_$name.out" | tr '\n' ' ')"; continue; }
                # steady state: the median step time past the first two, and the last step's bytes
                python3 - "$OUT/offload_$name.jsonl" > "$work/$name.sum" <<'EOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
t = statistics.median(r["step_time_s"] for r in rows[2:] or rows)
last = rows[-1]
dev = sum(last["memory_bytes"].values()) / 2**30
host = sum(last.get("host_memory_bytes", {}).values()) / 2**30
print(f"{2048 / t:.0f} tokens/s, step {t:.3f} s, device {dev:.2f} GiB, host {host:.2f} GiB")
EOF
                row "1B ZeRO-$s bf16 T 2048, offload $o" "$(cat "$work/$name.sum")"
            done
            a=$(sed -n 's/.*"loss": \([^,]*\),.*/\1/p' "$OUT/offload_s$s.o0.jsonl" 2>/dev/null)
            b=$(sed -n 's/.*"loss": \([^,]*\),.*/\1/p' "$OUT/offload_s$s.o1.jsonl" 2>/dev/null)
            row "1B ZeRO-$s: losses with offload = without" "$([ -n "$a" ] && [ "$a" = "$b" ] && echo "same, $steps steps" ||
                echo "DIFFER (the host's AdamW is the CPU kernel, the device's the CUDA one)")"
        done
    else
        row "1B init-model" "FAILED: $(tail -2 "$OUT/offload_init.out" | tr '\n' ' ')"
    fi
else
    row "bandwidth, 1B runs" "skipped: no GPU here (the estimates above need none)"
fi

if [ $emu -eq 1 ]; then
    # ---- 4. offload's own cost, on the emulated device ---------------------------------------------
    cat docs/*.md README.md > "$work/data.txt"
    "$Z" init-model --model_config bench/configs/a/config.json --output_dir "$work/ma" --seed 1 >/dev/null 2>&1 ||
        row "config a init-model" "FAILED"
    for s in 2 3; do
        for o in 0 1 dpu; do
            name=emu.s$s.o$o
            extra=()
            [ "$o" = dpu ] && extra=(--offload_delayed_update)
            timeout 600 "$Z" train --model "$work/ma" --data "$work/data.txt" --block_size 64 \
                --per_device_train_batch_size 1 --max_steps "$steps" --use_deepspeed --device emu \
                --deepspeed_config_file "$work/s$s.o$([ "$o" = 0 ] && echo 0 || echo 1).json" --learning_rate 3e-4 \
                --progress false --log_jsonl "$OUT/offload_$name.jsonl" "${extra[@]}" >"$OUT/offload_$name.out" 2>&1 ||
                { row "config a ZeRO-$s emu, offload $o" "FAILED: $(tail -2 "$OUT/offload_$name.out" | tr '\n' ' ')"; continue; }
            t=$(python3 -c 'import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print("%.3f" % statistics.median(r["step_time_s"] for r in rows[2:] or rows))' "$OUT/offload_$name.jsonl")
            row "config a ZeRO-$s fp32 T 64 B 1 emu, offload $o" "step $t s (median past the first two)"
        done
    done
fi

{
    echo "== bench/offload.sh ($(date -u +%Y-%m-%dT%H:%MZ), $Z)"
    printf '%s\n' "${rows[@]}"
} | tee "$OUT/offload_bench.txt"
