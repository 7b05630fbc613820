# The numerical guard: a fixed matrix of short training runs, each reduced to two
# SHA-256 digests (the saved weights and the per-step losses; tests/digests/digest.py
# says exactly what is hashed), compared with the digests committed in
# tests/digests/expected.txt.  A refactor must leave every digest identical; a run
# whose numbers moved is named with both digests.
#
# The matrix covers each value at least once, not their product:
#   precision  fp32, aligned bf16 (bf16 load, fp32 master), memory-constrained bf16
#              (bf16 master and optimizer), Kahan-compensated bf16, fp16 with loss scaling
#   stage      0 (DDP-like), 1, 2, 3, hybrid (FSDP HYBRID_SHARD)
#   ranks      1, 2, 4 (mpirun, oversubscribed)
#   and        gradient accumulation, activation checkpointing, seeded shuffle,
#              save + resume (the resumed run must end on the same weights as the
#              uninterrupted one: both lines carry the same weights digest)
# All runs use --threads 1, so the numbers do not depend on the core count.  They do
# depend on the vector instructions: oneDNN picks its kernels at run time, and the
# build picks FMA and AVX-512 paths at compile time (the sanitizer build has no
# -march=native).  So expected.txt holds one section per pair, headed
# "[onednn ISA | build ISA]" as `ztrain env` prints them; a build with no section
# fails and says so.
#
# tests/cli/digests.sh --write FILE runs the matrix and writes FILE instead of
# comparing (scripts/regen_digests.sh); that is only legitimate when a change is
# meant to change the numbers.
#
# --device DEV runs the matrix (or, with --only "NAME ...", those rows) on another
# backend table and holds it to the same digests: tests/cli/device.sh runs it on
# the emulated device (kernels/backend_emu.c), whose numbers must be the CPU's.
. "$(dirname "$0")/lib.bash"
root=$(cd "$(dirname "$0")/../.." && pwd)
expected=$root/tests/digests/expected.txt
write="" device="" only=""
while [ $# -gt 0 ]; do
    case $1 in
        --write) write=${2:?"--write needs a file"}; shift 2 ;;
        --device) device=${2:?"--device needs a name"}; shift 2 ;;
        --only) only=${2:?"--only needs run names"}; shift 2 ;;
        *) echo "digests.sh: unknown argument $1" >&2; exit 2 ;;
    esac
done
[ -n "$write" ] && [ -n "$device$only" ] && { echo "digests.sh: --write takes the whole matrix on the CPU" >&2; exit 2; }

t=$root/tests/fixtures/gqa_tied
u=$root/tests/fixtures/untied_odd
h=$root/tests/fixtures/gqa_hd32
bf16=(--torch_dtype bfloat16 --mixed_precision bf16)  # aligned: bf16 load, fp32 master
mc=(--torch_dtype bfloat16 --mixed_precision no)      # memory-constrained: bf16 master
# name | ranks | model | flags ({NAME} is the output directory of the earlier run NAME)
matrix=(
    "fp32_s0_r1|1|$t|"
    "bf16_accum_r1|1|$t|${bf16[*]} --gradient_accumulation_steps 2"
    "mc_ckpt_r1|1|$u|${mc[*]} --use_fsdp --gradient_checkpointing"
    "kahan_r1|1|$t|${mc[*]} --use_fsdp --master_compensation kahan"
    "fp16_shuffle_r1|1|$h|--mixed_precision fp16 --shuffle --seed 7"
    "fp32_ds1_r2|2|$t|--use_deepspeed --zero_stage 1"
    "bf16_s2_accum_r2|2|$u|${bf16[*]} --use_fsdp --fsdp_sharding_strategy SHARD_GRAD_OP --gradient_accumulation_steps 2"
    "bf16_s3_ckpt_r2|2|$t|${bf16[*]} --use_fsdp --fsdp_sharding_strategy FULL_SHARD --gradient_checkpointing"
    "mc_s0_r2|2|$h|${mc[*]} --use_fsdp --fsdp_sharding_strategy NO_SHARD"
    "kahan_s3_r2|2|$t|${mc[*]} --use_fsdp --fsdp_sharding_strategy FULL_SHARD --master_compensation kahan"
    "fp32_hybrid_r4|4|$t|--use_fsdp --fsdp_sharding_strategy HYBRID_SHARD --ranks_per_node 2"
    "fp16_ds3_r4|4|$u|--use_deepspeed --zero_stage 3 --mixed_precision fp16"
    "fp32_save_r1|1|$t|--max_steps 4 --save_steps 2"
    "fp32_resume_r1|1|$t|--max_steps 4 --resume_from_checkpoint {fp32_save_r1}/checkpoint-2"
    "bf16_s3_save_r2|2|$t|${bf16[*]} --use_fsdp --max_steps 4 --save_steps 2"
    "bf16_s3_resume_r2|2|$t|${bf16[*]} --use_fsdp --max_steps 4 --resume_from_checkpoint {bf16_s3_save_r2}/checkpoint-2"
)

env=$("$ZTRAIN" env --threads 1) || fail "ztrain env"
key="[$(printf '%s\n' "$env" | sed -n 's/^onednn: .*(isa: \(.*\))$/onednn \1/p') | $(
        printf '%s\n' "$env" | sed -n 's/^build isa: *\(.*\)$/build \1/p')]"
if [ -n "$only" ]; then
    kept=()
    for row in "${matrix[@]}"; do
        case " $only " in *" ${row%%|*} "*) kept+=("$row") ;; esac
    done
    [ "${#kept[@]}" -eq "$(wc -w <<< "$only")" ] || { fail "--only $only: not every name is in the matrix"; finish; }
    matrix=("${kept[@]}")
fi
results=()
for row in "${matrix[@]}"; do
    IFS='|' read -r name ranks model flags <<< "$row"
    [ -n "$device" ] && flags="$flags --device $device"
    flags=$(printf '%s' "$flags" | sed -E "s|\{([a-z0-9_]+)\}|$TMP/\1|g")
    # in order unless a row says --shuffle (later, so it wins): the digests predate the
    # shuffled default
    # shellcheck disable=SC2206  # the flags are words without spaces
    cmd=("$ZTRAIN" train --model "$model" --data "$model/tokens.npy" --block_size 16
         --per_device_train_batch_size 2 --max_steps 3 --learning_rate 1e-3 --warmup_steps 1
         --weight_decay 0.1 --threads 1 --peak_gflops 1 --progress false --shuffle false
         --output_dir "$TMP/$name" --log_jsonl "$TMP/$name.jsonl" $flags)
    [ "$ranks" -gt 1 ] && cmd=("${mpi[@]}" -np "$ranks" "${cmd[@]}")
    if ! out=$("${cmd[@]}" 2>&1); then
        fail "$name: training failed: ${cmd[*]}"
        printf '%s\n' "$out" | tail -5
        continue
    fi
    d=$(/usr/bin/python3 "$root/tests/digests/digest.py" "$TMP/$name" "$TMP/$name.jsonl") ||
        { fail "$name: no digest"; continue; }
    results+=("$name $d")
done

# the lines of section $key in file $1
section() { awk -v key="$key" '/^\[/ { on = ($0 == key); next } on && !/^#/ && NF' "$1"; }

if [ -n "$write" ]; then
    [ "$fails" -eq 0 ] || finish
    [ -f "$write" ] || printf '%s\n' "# tests/digests/expected.txt: see tests/cli/digests.sh; written by scripts/regen_digests.sh" \
        "# one section per [oneDNN ISA | build ISA]; each line: run weights_sha256 losses_sha256" > "$write"
    # keep the other sections, replace this one
    awk -v key="$key" '/^\[/ { skip = ($0 == key) } !skip' "$write" > "$TMP/expected"
    { cat "$TMP/expected"; echo "$key"; printf '%s\n' "${results[@]}"; } > "$write"
    echo "wrote ${#results[@]} digests for $key to $write"
    finish
fi

want=$(section "$expected")
[ -n "$want" ] || { fail "$expected has no digests for $key (it has: $(grep '^\[' "$expected" | tr '\n' ' '))"; finish; }
checked=0
for r in "${results[@]}"; do
    read -r name w l <<< "$r"
    line=$(printf '%s\n' "$want" | grep "^$name ") || { fail "$name: not in $expected $key"; continue; }
    read -r _ ew el <<< "$line"
    checked=$((checked + 1))
    [ "$w" = "$ew" ] || fail "$name: weights digest $w, expected $ew"
    [ "$l" = "$el" ] || fail "$name: losses digest $l, expected $el"
done
[ "$checked" -eq "${#matrix[@]}" ] || fail "checked $checked of ${#matrix[@]} runs"
[ -n "$only" ] || [ "$(printf '%s\n' "$want" | wc -l)" -eq "${#matrix[@]}" ] ||
    fail "$expected $key lists runs that are not in the matrix"
finish
