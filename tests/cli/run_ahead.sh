# Running ahead (docs/gpu.md, "Running ahead"): in fast mode the host queues step
# n+1's forward and backward before it reads step n's numbers.  On the emulated
# device fast and exact mode run the same kernels (in fp32: with bf16 compute fast
# mode also keeps bf16 activations, docs/gpu.md), so everything the host decides
# must come out the same as the exact (synchronous) run: every JSONL record (one per
# step, in order, the step's own loss, norm, learning rate, skip and audit), the
# log lines of --logging_steps, the checkpoints (the state after their step, the
# step and optimizer step counts) and the final model; on 1 rank and on 2 (FSDP
# and ZeRO-2 with the verdict agreed over the ranks).  fp16 with overflows (its
# loss scale decided on the device, where the backward reads it) and SFT data (a
# loss mask: each step's gradient scale is its own count of targets, uploaded with
# its passes) run ahead too, graphed (the plan's `graphs on`) and not.  The waits
# are counted by tests/test_async_step.c.
. "$(dirname "$0")/lib.bash"
fix=tests/fixtures/gqa_tied
base=(train --block_size 16 --per_device_train_batch_size 2 --max_steps 7
      --threads 1 --peak_gflops 1 --progress false --weight_decay 0.1 --device emu
      --save_steps 3 --logging_steps 2 --lr_scheduler_type linear --warmup_steps 3
      --shuffle false) # in order: the fp16 case's overflow pattern was found on these windows
args=("${base[@]}" --model "$fix" --data "$fix/tokens.npy" --mixed_precision no)

# same DIR_EXACT DIR_FAST WHAT: the records, the log lines, the checkpoints and the model agree
same() {
    /usr/bin/python3 - "$1" "$2" <<'PY' || fail "running ahead changed the run: $3"
import json, os, sys
a, b = sys.argv[1:3]
ra, rb = ([json.loads(l) for l in open(os.path.join(d, 'log.jsonl'))] for d in (a, b))
assert [r['step'] for r in ra] == [r['step'] for r in rb] == list(range(1, 8)), ([r['step'] for r in rb])
for x, y in zip(ra, rb):
    for k in ('loss', 'grad_norm', 'lr', 'skipped', 'lost_update_fraction', 'update_to_half_ulp', 'comm_bytes',
              'loss_scale'):
        assert x[k] == y[k], (x['step'], k, x[k], y[k])
la, lb = ([l for l in open(os.path.join(d, 'out.txt')) if l.startswith('step ')] for d in (a, b))
assert la == lb and len(la) == 4, (la, lb)   # steps 2, 4, 6 and the last, 7

PY
    d=$(same_checkpoint "$1/out" "$2/out" checkpoint-3 checkpoint-6 checkpoint-7 .) ||
        fail "running ahead changed the checkpoints: $3: $d"
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

# fp16 with overflows (2^20 at first, window 2, hysteresis 2: skips, a halving, a
# growth), and SFT data: TRL's prompt/completion records, the loss on the
# completions only, so each step divides by its own count of targets
cat >"$TMP/ds.json" <<'JSON'
{"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 1,
 "fp16": {"enabled": true, "loss_scale_window": 2, "hysteresis": 2, "initial_scale_power": 20}}
JSON
export ZTRAIN_CACHE_DIR="$TMP/cache"
tok=tests/fixtures/tokenizers/ztrain_trained # 400 tokens
sed 's/"vocab_size": 256/"vocab_size": 400/' "$fix/config.json" > "$TMP/config.json"
"$ZTRAIN" init-model --model_config "$TMP/config.json" --output_dir "$TMP/init" --seed 5 >/dev/null || fail "init-model"
/usr/bin/python3 - "$TMP/sft.jsonl" <<'PY'
import json, sys
lines = [l for l in open("tests/fixtures/text/multilingual.txt", encoding="utf-8").read().splitlines() if l.strip()]
with open(sys.argv[1], "w") as f:
    for i, t in enumerate(lines * 3):   # prompts of varying share: the steps' counts differ
        c = len(t) * (1 + i % 4) // 6
        f.write(json.dumps({"prompt": t[:c], "completion": t[c:]}) + "\n")
PY
fp16=("${base[@]}" --model "$fix" --data "$fix/tokens.npy" --deepspeed "$TMP/ds.json")
sft=("${base[@]}" --model "$TMP/init" --data "$TMP/sft.jsonl" --tokenizer "$tok" --mixed_precision no)
for what in fp16 sft; do
    declare -n a=$what
    run "$TMP/${what}_exact" "$ZTRAIN" "${a[@]}" --kernels exact
    run "$TMP/${what}_fast" "$ZTRAIN" "${a[@]}" --kernels fast
    run "$TMP/${what}_plain" "$ZTRAIN" "${a[@]}" --kernels fast --cuda_graphs off
    grep -q "^plan: .*kernels fast, step async, activations [a-z0-9]*, graphs on" "$TMP/${what}_fast/out.txt" ||
        fail "$what: not graphed: $(grep plan: "$TMP/${what}_fast/out.txt")"
    same "$TMP/${what}_exact" "$TMP/${what}_fast" "$what, graphed"
    same "$TMP/${what}_exact" "$TMP/${what}_plain" "$what"
    unset -n a
done
grep -q "^loss: on the completions only" "$TMP/sft_fast/out.txt" || fail "sft: no loss mask: $(cat "$TMP/sft_fast/out.txt")"
# --cuda_graphs on takes a loss mask (it used to refuse it)
out=$("$ZTRAIN" "${sft[@]}" --max_steps 2 --kernels fast --cuda_graphs on --output_dir "$TMP/sft_on" 2>&1) ||
    fail "sft, --cuda_graphs on: $out"
printf '%s' "$out" | grep -q "kernels fast, step async, activations [a-z0-9]*, graphs on" || fail "sft, --cuda_graphs on: $out"
/usr/bin/python3 - "$TMP/fp16_fast/log.jsonl" <<'PY' || fail "fp16: no skips, halving and growth to run ahead over"
import json, sys
r = [json.loads(l) for l in open(sys.argv[1])]
s = [x['loss_scale'] for x in r]
assert sum(x['skipped'] for x in r) >= 2 and min(s) < s[0] and s[-1] > min(s), s
PY
finish
