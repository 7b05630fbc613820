# Fast mode reads the device's numbers back at the logged steps only (docs/gpu.md,
# "Running ahead"): steps are queued back to back, several in flight, the learning
# rate of each chosen on the device from the count of applied steps.  On the emulated
# device fast mode in fp32 computes exact mode's bits, and exact mode reads every step
# at once, so the two runs must write the same records (all but the clocks and the
# memory counters), the same log lines, the same checkpoints and the same model:
# a warm-up and cosine schedule (a new lr every step), --logging_steps 4 with an
# evaluation every 3 steps and a checkpoint every 5 in between, on 1 rank and on 2
# (FSDP); and a run whose gradient is NaN stops on the same step with the same
# message and exit code, with and without --skip_nonfinite_steps, saving nothing.
# (Mid-run NaNs, skips under a warm-up and a SIGTERM stop: tests/test_async_step.c.)
. "$(dirname "$0")/lib.bash"
fix=tests/fixtures/gqa_tied
args=(train --model "$fix" --data "$fix/tokens.npy" --block_size 16 --per_device_train_batch_size 2 --max_steps 11
      --threads 1 --peak_gflops 1e6 --progress false --mixed_precision no --weight_decay 0.1 --device emu
      --logging_steps 4 --lr_scheduler_type cosine --warmup_steps 3 --eval_data "$fix/tokens.npy" --eval_steps 3
      --per_device_eval_batch_size 4 --save_steps 5)

# the records without the clocks and memory counters, which differ between any two runs
same() {
    /usr/bin/python3 - "$1" "$2" <<'PY' || fail "reading at logged steps changed the run: $3"
import json, os, re, sys
a, b = sys.argv[1:3]
clocks = ('step_time_s', 'tokens_per_sec_per_device', 'mfu', 'peak_gflops', 'memory_bytes',
          'host_memory_bytes', 'comm_wait_s', 'comm_progress_s', 'eval_runtime')
def records(d):
    return [{k: v for k, v in json.loads(l).items() if k not in clocks} for l in open(os.path.join(d, 'log.jsonl'))]
ra, rb = records(a), records(b)
assert ra == rb, [(x, y) for x, y in zip(ra, rb) if x != y][:2]
steps = [r['step'] for r in ra if 'loss' in r]
assert steps == list(range(1, 12)), steps
assert len({r['lr'] for r in ra if 'lr' in r}) == 11   # a new learning rate every step
assert sum('eval_loss' in r for r in ra) == 3          # after steps 3, 6 and 9
la, lb = ([re.sub(r', [0-9.]+ s\)', ')', l) for l in open(os.path.join(d, 'out.txt')) if l.startswith('step ')]
          for d in (a, b))   # an evaluation's seconds aside
assert la == lb and len(la) == 6, (la, lb)             # logs after 4, 8 and 11; evals after 3, 6 and 9

PY
    d=$(same_checkpoint "$1/out" "$2/out" checkpoint-5 checkpoint-10 checkpoint-11 .) ||
        fail "reading at logged steps changed the checkpoints: $3: $d"
}

run() { # DIR LAUNCH... -- ZTRAIN ARGS...
    local d=$1; shift
    mkdir -p "$d"
    "$@" --output_dir "$d/out" --log_jsonl "$d/log.jsonl" >"$d/out.txt" 2>&1 || fail "$d: $(cat "$d/out.txt")"
}

run "$TMP/exact1" "$ZTRAIN" "${args[@]}" --kernels exact
run "$TMP/fast1" "$ZTRAIN" "${args[@]}" --kernels fast
same "$TMP/exact1" "$TMP/fast1" "1 rank"
# a resume in fast mode from step 5: the device's count of applied steps starts at the
# checkpoint's, so steps 6-11 get the same learning rates and the same final model
run "$TMP/resumed" "$ZTRAIN" "${args[@]}" --kernels fast --resume_from_checkpoint "$TMP/exact1/out/checkpoint-5"
/usr/bin/python3 - "$TMP/exact1" "$TMP/resumed" <<'PY' || fail "a resume in fast mode changed the run"
import json, os, sys
keep = ('step', 'loss', 'grad_norm', 'lr', 'skipped')
ra, rb = ([{k: r[k] for k in keep} for r in map(json.loads, open(os.path.join(d, 'log.jsonl'))) if 'loss' in r]
          for d in sys.argv[1:3])
assert ra[5:] == rb and len(rb) == 6, (ra[5:], rb)
assert open(os.path.join(sys.argv[1], 'out', 'model.safetensors'), 'rb').read()[-4096:] == \
       open(os.path.join(sys.argv[2], 'out', 'model.safetensors'), 'rb').read()[-4096:]
PY
run "$TMP/exact2" "${mpi[@]}" -np 2 "$ZTRAIN" "${args[@]}" --use_fsdp --kernels exact
run "$TMP/fast2" "${mpi[@]}" -np 2 "$ZTRAIN" "${args[@]}" --use_fsdp --kernels fast
same "$TMP/exact2" "$TMP/fast2" "2 ranks, FSDP"

# a NaN gradient (a norm weight so large that the forward overflows): the same stop
mkdir -p "$TMP/big"; cp $fix/config.json "$TMP/big/"
/usr/bin/python3 - "$fix/model.safetensors" "$TMP/big/model.safetensors" <<'PY'
import json, struct, sys
b = bytearray(open(sys.argv[1], 'rb').read())
n = struct.unpack('<Q', b[:8])[0]
t = json.loads(b[8:8 + n])['model.layers.0.input_layernorm.weight']
s, e = (8 + n + o for o in t['data_offsets'])
for o in range(s, e, 4):
    b[o:o + 4] = struct.pack('<f', 3e38)
open(sys.argv[2], 'wb').write(b)
PY
for skip in 0 2; do
    for k in exact fast; do
        d="$TMP/nan_${k}_$skip"; mkdir -p "$d"
        "$ZTRAIN" "${args[@]:0:2}" "$TMP/big" "${args[@]:3}" --max_steps 8 --kernels $k --skip_nonfinite_steps $skip \
            --output_dir "$d/out" --log_jsonl "$d/log.jsonl" >"$d/out.txt" 2>"$d/err.txt"
        echo $? >"$d/rc"
        [ -e "$d/out/model.safetensors" ] || [ -e "$d/out/checkpoint-5" ] && fail "skip $skip, $k: a stopped run saved"
    done
    a="$TMP/nan_exact_$skip" b="$TMP/nan_fast_$skip"
    [ "$(cat "$a/rc")" = 1 ] && [ "$(cat "$b/rc")" = 1 ] || fail "skip $skip: exit $(cat "$a/rc") (exact), $(cat "$b/rc") (fast)"
    diff "$a/err.txt" "$b/err.txt" >/dev/null || fail "skip $skip: the messages differ: $(diff "$a/err.txt" "$b/err.txt")"
    grep -q "step $((skip + 1)): an inf or NaN" "$b/err.txt" || fail "skip $skip: $(cat "$b/err.txt")"
    /usr/bin/python3 - "$a/log.jsonl" "$b/log.jsonl" $((skip + 1)) <<'PY' || fail "skip $skip: the records differ"
import json, sys
keep = ('step', 'loss', 'grad_norm', 'lr', 'skipped', 'nonfinite', 'lost_update_fraction', 'comm_bytes')
ra, rb = ([{k: r.get(k) for k in keep} for r in map(json.loads, open(p))] for p in sys.argv[1:3])
assert ra == rb and len(ra) == int(sys.argv[3]), (ra, rb)
PY
done
finish
