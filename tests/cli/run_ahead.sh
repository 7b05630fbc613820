# Running ahead (docs/gpu.md, "Running ahead"): in fast mode the host queues step
# n+1's forward and backward before it reads step n's numbers.  On the emulated
# device fast and exact mode run the same kernels (in fp32: with bf16 compute fast
# mode also keeps bf16 activations, docs/gpu.md), so everything the host decides
# must come out the same as the exact (synchronous) run: every JSONL record (one per
# step, in order, the step's own loss, norm, learning rate, skip and audit), the
# log lines of --logging_steps, the checkpoints (the state after their step, the
# step and optimizer step counts) and the final model; on 1 rank and on 2 (FSDP
# and ZeRO-2 with the verdict agreed over the ranks).  The waits are counted by
# tests/test_async_step.c.
. "$(dirname "$0")/lib.bash"
fix=tests/fixtures/gqa_tied
args=(train --model "$fix" --data "$fix/tokens.npy" --block_size 16 --per_device_train_batch_size 2 --max_steps 7
      --threads 1 --peak_gflops 1 --progress false --mixed_precision no --weight_decay 0.1 --device emu
      --save_steps 3 --logging_steps 2 --lr_scheduler_type linear --warmup_steps 3)

# same DIR_EXACT DIR_FAST WHAT: the records, the log lines, the checkpoints and the model agree
same() {
    /usr/bin/python3 - "$1" "$2" <<'PY' || fail "running ahead changed the run: $3"
import json, os, struct, sys
a, b = sys.argv[1:3]
ra, rb = ([json.loads(l) for l in open(os.path.join(d, 'log.jsonl'))] for d in (a, b))
assert [r['step'] for r in ra] == [r['step'] for r in rb] == list(range(1, 8)), ([r['step'] for r in rb])
for x, y in zip(ra, rb):
    for k in ('loss', 'grad_norm', 'lr', 'skipped', 'lost_update_fraction', 'update_to_half_ulp', 'comm_bytes'):
        assert x[k] == y[k], (x['step'], k, x[k], y[k])
la, lb = ([l for l in open(os.path.join(d, 'out.txt')) if l.startswith('step ')] for d in (a, b))
assert la == lb and len(la) == 4, (la, lb)   # steps 2, 4, 6 and the last, 7

def tensors(path):
    raw = open(path, 'rb').read()
    n = struct.unpack('<Q', raw[:8])[0]
    head = json.loads(raw[8:8 + n])
    head.pop('__metadata__', None)   # the run's id differs, the bytes must not
    return {k: (v['dtype'], v['shape'], raw[8 + n + v['data_offsets'][0]:8 + n + v['data_offsets'][1]])
            for k, v in head.items()}

for ck in ('checkpoint-3', 'checkpoint-6', 'checkpoint-7', '.'):
    da, db = os.path.join(a, 'out', ck), os.path.join(b, 'out', ck)
    files = sorted(os.path.relpath(os.path.join(r, f), da) for r, _, fs in os.walk(da) for f in fs
                   if f.endswith('.safetensors') and (ck != '.' or r == da))
    assert files, da
    for f in files:
        assert tensors(os.path.join(da, f)) == tensors(os.path.join(db, f)), (ck, f)
    if ck != '.':
        sa, sb = (json.load(open(os.path.join(d, 'trainer_state.json'))) for d in (da, db))
        for k in ('step', 'optimizer_steps', 'data_position', 'loss_scaler'):
            assert sa[k] == sb[k], (ck, k, sa[k], sb[k])
PY
}

run() { # DIR LAUNCH... -- ZTRAIN ARGS...
    local d=$1; shift
    mkdir -p "$d"
    "$@" --output_dir "$d/out" --log_jsonl "$d/log.jsonl" >"$d/out.txt" 2>&1 || fail "$d: $(cat "$d/out.txt")"
}

run "$TMP/exact1" "$ZTRAIN" "${args[@]}" --kernels exact
run "$TMP/fast1" "$ZTRAIN" "${args[@]}" --kernels fast
same "$TMP/exact1" "$TMP/fast1" "1 rank"

for plan in "--use_fsdp" "--use_deepspeed --zero_stage 2"; do
    tag=$(printf '%s' "$plan" | tr -dc 'a-z0-9')
    run "$TMP/exact_$tag" "${mpi[@]}" -np 2 "$ZTRAIN" "${args[@]}" $plan --kernels exact
    run "$TMP/fast_$tag" "${mpi[@]}" -np 2 "$ZTRAIN" "${args[@]}" $plan --kernels fast
    same "$TMP/exact_$tag" "$TMP/fast_$tag" "2 ranks, $plan"
done
finish
