# --cuda_graphs on several ranks (docs/gpu.md, "The captured step"): the step is captured
# with its collectives where the device queues them (NCCL; on the emulated device its
# stand-in, --comm_backend nccl, comm.h), and refused on the staged path.  On 2 emulated
# ranks a graphed run writes the plain fast run's log (its collectives' bytes and calls
# included: a replay adds what its capture counted), checkpoint and final model byte for
# byte, for FSDP FULL_SHARD, DeepSpeed ZeRO-3, -2 and -1 and data parallel (gathers in
# the passes, reduce-scatters in the backward or at the step, all-reduces, the verdict's
# sum over the ranks), while it runs ahead.  The emulated collectives give the staged
# path's numbers.  What only two GPUs with NCCL show is in docs/gpu.md ("What still
# waits for a GPU").
. "$(dirname "$0")/lib.bash"
root=$(cd "$(dirname "$0")/../.." && pwd)
fix=$root/tests/fixtures/gqa_tied
args=(train --model "$fix" --data "$fix/tokens.npy" --block_size 16 --per_device_train_batch_size 2 --max_steps 4
      --threads 1 --peak_gflops 1 --progress false --mixed_precision bf16 --weight_decay 0.1
      --lr_scheduler_type linear --warmup_steps 2 --gradient_accumulation_steps 2 --seed 3 --device emu
      --kernels fast)

# the captured step's host calls and waits on 2 ranks, running ahead (tests/test_step_graph.c)
out=$("${mpi[@]}" -np 2 "$(dirname "$ZTRAIN")/tests/test_step_graph" 2>&1)
rc=$?
printf '%s\n' "$out" | grep -q "2 rank(s), stage 3: host calls per step" && [ "$rc" -eq 0 ] &&
    printf '%s\n' "$out" | grep -Eq "^[1-9][0-9]* passed, 0 failed" ||
    { fail "test_step_graph on 2 ranks (exit $rc)"; printf '%s\n' "$out" | tail -20; }

# refusals and plan lines: the staged path (emu's default, --comm_backend mpi) cannot be captured
for comm in auto mpi; do
    expect_exit 2 "--cuda_graphs on: the step cannot be captured here \(staged MPI collectives\); it needs --kernels fast \(on several ranks, NCCL's collectives\)" -- \
        "${mpi[@]}" -np 2 "$ZTRAIN" "${args[@]}" --comm_backend "$comm" --cuda_graphs on
    out=$("${mpi[@]}" -np 2 "$ZTRAIN" "${args[@]}" --max_steps 1 --comm_backend "$comm" 2>&1) || fail "$comm: $out"
    printf '%s' "$out" | grep -q "comm $comm, kernels fast, step async, activations [a-z0-9]*, graphs off (staged MPI collectives)" ||
        fail "2 ranks, comm $comm: $(printf '%s' "$out" | grep plan:)"
    printf '%s' "$out" | grep -q "collectives: staged MPI" || fail "comm $comm: not staged: $out"
done
expect_exit 2 "--comm_backend nccl needs --device cuda" -- "$ZTRAIN" "${args[@]}" --device cpu --kernels exact \
    --comm_backend nccl
out=$("${mpi[@]}" -np 2 "$ZTRAIN" "${args[@]}" --max_steps 1 --comm_backend nccl 2>&1) || fail "nccl: $out"
printf '%s' "$out" | grep -q "comm nccl, kernels fast, step async, activations [a-z0-9]*, graphs on" || fail "emulated NCCL plan: $out"
printf '%s' "$out" | grep -q "collectives: emulated NCCL" || fail "emulated NCCL path: $out"

# the same bytes; the YAML gives the mode, so that the checkpoints' command lines agree
run() { # name yaml-lines [args...]
    local name=$1 yaml=$2
    shift 2
    printf '%b' "$yaml" > "$TMP/g.yaml"
    "${mpi[@]}" -np 2 "$ZTRAIN" "${args[@]}" --config_file "$TMP/g.yaml" --output_dir "$TMP/out" \
        --log_jsonl "$TMP/out.jsonl" --save_steps 2 "$@" > "$TMP/$name.log" 2>&1 ||
        fail "$name: $(tail -3 "$TMP/$name.log")"
    rm -rf "$TMP/$name" && mv "$TMP/out" "$TMP/$name" && mv "$TMP/out.jsonl" "$TMP/$name.jsonl"
}
same_log() { # a.jsonl b.jsonl: every field but the clocks and the host's memory (the graphs' own)
    python3 - "$1" "$2" <<'PY'
import json, sys
a, b = ([json.loads(l) for l in open(p)] for p in sys.argv[1:3])
assert len(a) == len(b) == 4, (len(a), len(b))
clocks = {"tokens_per_sec_per_device", "step_time_s", "mfu", "peak_gflops", "comm_wait_s", "comm_progress_s",
          "memory_bytes", "host_memory_bytes"}
for x, y in zip(a, b):
    assert x.keys() == y.keys(), (x.keys(), y.keys())
    for k in x.keys() - clocks:
        assert x[k] == y[k], (x["step"], k, x[k], y[k])
    assert x["memory_bytes"]["params"] == y["memory_bytes"]["params"]
assert all(x["lr"] != y["lr"] for x, y in zip(a, a[1:])), "the schedule should move every step"
assert all(sum(x["comm_bytes"].values()) > 0 for x in a), "every step moves bytes"
PY
}
plans=("fsdp|distributed_type: FSDP\n"
       "ds3|distributed_type: DEEPSPEED\ndeepspeed_config:\n  zero_stage: 3\n"
       "ds2|distributed_type: DEEPSPEED\ndeepspeed_config:\n  zero_stage: 2\n"
       "ds1|distributed_type: DEEPSPEED\ndeepspeed_config:\n  zero_stage: 1\n"
       "ddp|distributed_type: MULTI_CPU\n")
for p in "${plans[@]}"; do
    tag=${p%%|*} yaml=${p#*|}
    run "$tag.on" "${yaml}ztrain_cuda_graphs: on\n" --comm_backend nccl
    run "$tag.off" "${yaml}ztrain_cuda_graphs: off\n" --comm_backend nccl
    grep -q "graphs on" "$TMP/$tag.on.log" || fail "$tag: the graphed run's plan: $(grep plan: "$TMP/$tag.on.log")"
    grep -q "collectives: emulated NCCL" "$TMP/$tag.on.log" || fail "$tag: not on the emulated NCCL"
    d=$(same_log "$TMP/$tag.off.jsonl" "$TMP/$tag.on.jsonl" 2>&1) || fail "$tag: the graphed run's log differs: $d"
    d=$(same_checkpoint "$TMP/$tag.off/checkpoint-2" "$TMP/$tag.on/checkpoint-2") || fail "$tag: checkpoint-2: $d"
    cmp -s "$TMP/$tag.off/model.safetensors" "$TMP/$tag.on/model.safetensors" || fail "$tag: the final models differ"
done
# the emulated NCCL's numbers are the staged path's (the same MPI calls, the same sum)
run fsdp.staged "distributed_type: FSDP\nztrain_cuda_graphs: off\n" --comm_backend mpi
d=$(same_log "$TMP/fsdp.staged.jsonl" "$TMP/fsdp.off.jsonl" 2>&1) || fail "staged vs emulated NCCL: $d"
cmp -s "$TMP/fsdp.staged/model.safetensors" "$TMP/fsdp.off/model.safetensors" ||
    fail "staged vs emulated NCCL: the final models differ"
# resumed from the graphed run's checkpoint into a new capture: the uninterrupted model
run fsdp.resume "distributed_type: FSDP\nztrain_cuda_graphs: on\n" --comm_backend nccl \
    --resume_from_checkpoint "$TMP/fsdp.on/checkpoint-2"
cmp -s "$TMP/fsdp.resume/model.safetensors" "$TMP/fsdp.off/model.safetensors" ||
    fail "resumed graphed: the final model differs from the uninterrupted run's"
finish
