# --device and --comm_backend on a machine without a GPU: what is refused (exit 2,
# naming the flag), what the plan line says, and the emulated device
# (kernels/backend_emu.c: the CPU kernels behind buffers the host cannot read, its
# collectives staged through host memory) held to the CPU's digests of
# tests/digests/expected.txt at 1, 2 and 4 ranks, checkpoints written on one
# device resumed on the other, and eval.  Nothing here runs on a GPU; the GPU's
# own check is tests/gpu/check.sh.
. "$(dirname "$0")/lib.bash"
root=$(cd "$(dirname "$0")/../.." && pwd)
fix=$root/tests/fixtures/gqa_tied
args=(train --model "$fix" --data "$fix/tokens.npy" --block_size 16 --per_device_train_batch_size 2 --max_steps 2
      --threads 1 --peak_gflops 1 --progress false)

# refused, with the flag named
# (a CUDA build on a machine without a GPU refuses it too: its bind finds no device)
cuda_msg="--device cuda: (this ztrain was built without CUDA|.*(GPU|CUDA|device))"
expect_exit 2 "$cuda_msg" -- "$ZTRAIN" "${args[@]}" --device cuda
expect_exit 2 "--device 'tpu': expected cpu or cuda" -- "$ZTRAIN" "${args[@]}" --device tpu
expect_exit 2 "--comm_backend 'gloo': expected auto, nccl or mpi" -- "$ZTRAIN" "${args[@]}" --comm_backend gloo
expect_exit 2 "--comm_backend nccl needs --device cuda" -- "$ZTRAIN" "${args[@]}" --comm_backend nccl
expect_exit 2 "$cuda_msg" -- "$ZTRAIN" eval --model "$fix" --data "$fix/tokens.npy" --block_size 16 --device cuda
# Accelerate's use_cpu: true pins the CPU; a flag that says otherwise contradicts it
printf 'distributed_type: NO\nuse_cpu: true\nnum_processes: 1\n' > "$TMP/cpu.yaml"
expect_exit 2 "--device cuda contradicts $TMP/cpu.yaml's use_cpu: true" -- \
    "$ZTRAIN" "${args[@]}" --config_file "$TMP/cpu.yaml" --device cuda
out=$("$ZTRAIN" "${args[@]}" --config_file "$TMP/cpu.yaml" 2>&1) || fail "use_cpu: true: $out"
printf '%s' "$out" | grep -q "^plan: .*, device cpu, comm mpi, kernels exact, step sync, activations fp32, graphs off$" || fail "use_cpu: true plan line: $out"

# the plan line names the device; the device line what it is and how collectives travel
out=$("$ZTRAIN" "${args[@]}" 2>&1) || fail "cpu run: $out"
printf '%s' "$out" | grep -q "^plan: MULTI_CPU, .*, device cpu, comm mpi, kernels exact, step sync, activations fp32, graphs off$" || fail "cpu plan line: $out"
printf '%s' "$out" | grep -q "^device: rank 0 on cpu; collectives: host MPI$" || fail "cpu device line: $out"
out=$("$ZTRAIN" "${args[@]}" --device emu 2>&1) || fail "emu run: $out"
printf '%s' "$out" | grep -q "^plan: .*, device emu, comm auto, kernels exact, step sync, activations fp32, graphs off$" || fail "emu plan line: $out"
printf '%s' "$out" | grep -q "^device: rank 0 on emu:0 (CPU kernels behind opaque buffers); collectives: staged MPI$" ||
    fail "emu device line: $out"

# the emulated device gives the CPU's digests: every precision, stages 0-3 and hybrid,
# 1, 2 and 4 ranks (the staged path), checkpoints saved and resumed on the device
bash "$root/tests/cli/digests.sh" --device emu --only "fp32_s0_r1 bf16_accum_r1 mc_ckpt_r1 kahan_r1 fp16_shuffle_r1 \
fp32_ds1_r2 bf16_s3_ckpt_r2 mc_s0_r2 fp32_hybrid_r4 fp32_save_r1 fp32_resume_r1" ||
    fail "the emulated device's digests are not the CPU's"

# across devices: a checkpoint saved on the CPU resumes on emu and one saved on emu
# resumes on the CPU, each ending on the uninterrupted run's weights (digest.py)
common=(--model "$fix" --data "$fix/tokens.npy" --block_size 16 --per_device_train_batch_size 2 --learning_rate 1e-3
        --warmup_steps 1 --weight_decay 0.1 --threads 1 --peak_gflops 1 --progress false --max_steps 4)
"$ZTRAIN" train "${common[@]}" --output_dir "$TMP/full" --log_jsonl "$TMP/full.jsonl" >/dev/null 2>&1 ||
    fail "uninterrupted run"
for pair in "cpu emu" "emu cpu"; do
    read -r from to <<< "$pair"
    "$ZTRAIN" train "${common[@]}" --device "$from" --save_steps 2 --output_dir "$TMP/$from.save" \
        >/dev/null 2>&1 || { fail "save on $from"; continue; }
    out=$("$ZTRAIN" train "${common[@]}" --device "$to" --resume_from_checkpoint "$TMP/$from.save/checkpoint-2" \
          --output_dir "$TMP/$to.resumed" 2>&1) || { fail "resume on $to of $from's checkpoint: $out"; continue; }
    printf '%s' "$out" | grep -q "bit-exact: the same plan" || fail "$from -> $to resume: $out"
    a=$(/usr/bin/python3 "$root/tests/digests/digest.py" "$TMP/full" "$TMP/full.jsonl" | cut -d' ' -f1)
    b=$(/usr/bin/python3 "$root/tests/digests/digest.py" "$TMP/$to.resumed" "$TMP/full.jsonl" | cut -d' ' -f1)
    [ -n "$a" ] && [ "$a" = "$b" ] || fail "$from -> $to: resumed weights $b, uninterrupted $a"
done

# eval on the device: the same loss, to the last printed digit
e_cpu=$("$ZTRAIN" eval --model "$fix" --data "$fix/tokens.npy" --block_size 16 --threads 1 2>&1) || fail "eval: $e_cpu"
e_emu=$("$ZTRAIN" eval --model "$fix" --data "$fix/tokens.npy" --block_size 16 --threads 1 --device emu 2>&1) ||
    fail "eval --device emu: $e_emu"
[ -n "$e_cpu" ] && [ "$e_cpu" = "$e_emu" ] || fail "eval: '$e_cpu' on the cpu, '$e_emu' on emu"
finish
