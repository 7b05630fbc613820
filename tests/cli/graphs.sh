# --cuda_graphs auto|on|off and the YAML's ztrain_cuda_graphs (docs/gpu.md, "The captured
# step"): the plan line says it (on for fp16 too); on where the step cannot be captured is
# refused (exit 2, naming the flag and why), auto says why it is off; on the emulated device a captured and
# replayed run writes the plain fast run's log, checkpoints and model byte for byte, with a
# learning rate that moves every step, and resumes across the two.  The host calls a
# replayed step makes are counted by tests/test_step_graph.c; several ranks are
# tests/cli/graphs_ranks.sh's.
. "$(dirname "$0")/lib.bash"
root=$(cd "$(dirname "$0")/../.." && pwd)
fix=$root/tests/fixtures/gqa_tied
args=(train --model "$fix" --data "$fix/tokens.npy" --block_size 16 --per_device_train_batch_size 2 --max_steps 4
      --threads 1 --peak_gflops 1 --progress false --mixed_precision bf16 --weight_decay 0.1
      --lr_scheduler_type linear --warmup_steps 2 --gradient_accumulation_steps 2 --seed 3)

# refusals
expect_exit 2 "--cuda_graphs 'maybe': expected auto, on or off" -- \
    "$ZTRAIN" "${args[@]}" --device emu --kernels fast --cuda_graphs maybe
expect_exit 2 "--cuda_graphs on: the step cannot be captured here \(synchronous step\)" -- \
    "$ZTRAIN" "${args[@]}" --cuda_graphs on
expect_exit 2 "--cuda_graphs on: the step cannot be captured with --profile" -- \
    "$ZTRAIN" "${args[@]}" --device emu --kernels fast --cuda_graphs on --profile "$TMP/trace.json"
expect_exit 2 "--cuda_graphs on: the step cannot be captured here \(staged MPI collectives\)" -- \
    "${mpi[@]}" -np 2 "$ZTRAIN" "${args[@]}" --device emu --kernels fast --cuda_graphs on
printf 'distributed_type: NO\nnum_processes: 1\nztrain_cuda_graphs: on\n' > "$TMP/on.yaml"
expect_exit 2 "--cuda_graphs on: the step cannot be captured here \(synchronous step\)" -- \
    "$ZTRAIN" "${args[@]}" --config_file "$TMP/on.yaml"
printf 'distributed_type: NO\nnum_processes: 1\nztrain_cuda_graphs: always\n' > "$TMP/bad.yaml"
expect_exit 2 "ztrain_cuda_graphs: 'always' is not allowed \(allowed: auto \| on \| off\)" -- \
    "$ZTRAIN" "${args[@]}" --device emu --config_file "$TMP/bad.yaml"

# the plan line: nothing said with exact kernels; on by default in fast mode on one rank
plan_of() { "$ZTRAIN" "${args[@]}" --max_steps 1 "$@" 2>&1 | grep "^plan: " || true; }
plan_of --device emu | grep -q "kernels exact, step sync, activations fp32, graphs off, bf16" || fail "exact plan line: $(plan_of --device emu)"
plan_of --device emu --kernels fast | grep -q "kernels fast, step async, activations [a-z0-9]*, graphs on" ||
    fail "fast plan line: $(plan_of --device emu --kernels fast)"
plan_of --device emu --kernels fast --cuda_graphs off | grep -q "kernels fast, step async, activations [a-z0-9]*, graphs off," ||
    fail "off plan line"
# fp16 is captured (its loss scale lives on the device, where the backward reads it):
# auto turns graphs on, on runs (the numbers: tests/cli/fp16_fast.sh; a loss mask:
# tests/cli/run_ahead.sh)
plan_of --device emu --kernels fast --mixed_precision fp16 | grep -q "kernels fast, step async, activations [a-z0-9]*, graphs on" ||
    fail "auto with fp16: $(plan_of --device emu --kernels fast --mixed_precision fp16)"
out=$("$ZTRAIN" "${args[@]}" --max_steps 2 --device emu --kernels fast --mixed_precision fp16 --cuda_graphs on 2>&1) ||
    fail "--cuda_graphs on with fp16: $out"
printf '%s' "$out" | grep -q "kernels fast, step async, activations [a-z0-9]*, graphs on" || fail "on with fp16: $out"
out=$("${mpi[@]}" -np 2 "$ZTRAIN" "${args[@]}" --max_steps 1 --device emu --kernels fast 2>&1) || fail "2 ranks: $out"
printf '%s' "$out" | grep -q "graphs off (staged MPI collectives)" || fail "2 ranks plan line: $out"
out=$("$ZTRAIN" "${args[@]}" --max_steps 1 --device emu --kernels fast --profile "$TMP/t.json" 2>&1) ||
    fail "auto with --profile: $out"
printf '%s' "$out" | grep -q "^graphs: off (--profile)" || fail "auto with --profile says nothing: $out"
printf '%s' "$out" | grep -q "kernels fast, step async, activations [a-z0-9]*, graphs off (--profile)" || fail "auto with --profile: the plan line: $out"

# the same bytes: the log, a checkpoint, the model; the key gives the mode, so that the
# command lines the checkpoints record are the same (one YAML path, rewritten)
run() { # name mode [args...]: in $TMP/out, then moved to $TMP/name
    local name=$1 mode=$2
    shift 2
    printf 'distributed_type: NO\nnum_processes: 1\nztrain_kernels: fast\nztrain_cuda_graphs: %s\n' "$mode" \
        > "$TMP/g.yaml"
    "$ZTRAIN" "${args[@]}" --device emu --config_file "$TMP/g.yaml" --output_dir "$TMP/out" \
        --log_jsonl "$TMP/out.jsonl" "$@" > "$TMP/$name.log" 2>&1 || fail "$name: $(tail -3 "$TMP/$name.log")"
    mv "$TMP/out" "$TMP/$name"
    mv "$TMP/out.jsonl" "$TMP/$name.jsonl"
}
for mode in on off; do
    run "$mode" "$mode" --save_steps 2
done
grep -q "graphs on" "$TMP/on.log" || fail "the graphed run's plan: $(grep plan: "$TMP/on.log")"
python3 - "$TMP/off.jsonl" "$TMP/on.jsonl" <<'PY' || fail "the graphed run's log differs from the plain one's"
import json, sys
a, b = ([json.loads(l) for l in open(p)] for p in sys.argv[1:3])
assert len(a) == len(b) == 4, (len(a), len(b))
for x, y in zip(a, b):
    for k in ("loss", "grad_norm", "lr", "lost_update_fraction", "update_to_half_ulp", "skipped"):
        assert x[k] == y[k], (x["step"], k, x[k], y[k])
assert all(x["lr"] != y["lr"] for x, y in zip(a, a[1:])), "the schedule should move every step"
PY
d=$(same_checkpoint "$TMP/off/checkpoint-2" "$TMP/on/checkpoint-2") || fail "checkpoint-2 differs: $d"
cmp -s "$TMP/off/model.safetensors" "$TMP/on/model.safetensors" || fail "the final models differ"
# resumed across the modes: a new capture from the checkpoint's step, the same model
for pair in "off on" "on off"; do
    read -r from to <<< "$pair"
    run "resume.$from" "$to" --resume_from_checkpoint "$TMP/$from/checkpoint-2"
    cmp -s "$TMP/resume.$from/model.safetensors" "$TMP/off/model.safetensors" ||
        fail "resumed $from -> $to: the final model differs from the uninterrupted run's"
done
finish
