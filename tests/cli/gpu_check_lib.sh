# gpu_check_lib.sh — the readers that tests/gpu/check.sh applies to its runs' outputs
# (tests/gpu/check_lib.sh), held to ztrain's real output on the emulated device, so the
# speed section's numbers are right before the GPU run that needs them: the losses of a
# 20-step JSONL, fast against exact within bf16 error (and not the same bits), inf for
# logs of other lengths; the median of tokens/s and MFU over steps 3-20 but the profiled
# 11-12, as Python computes it; PyTorch's JSON line found behind a warning; the profile
# table's top 10.
. "$(dirname "$0")/lib.bash"
root=$(cd "$(dirname "$0")/../.." && pwd)
# shellcheck disable=SC1091
. "$root/tests/gpu/check_lib.sh"
fix=$root/tests/fixtures/gqa_tied
T=(train --model "$fix" --data "$fix/tokens.npy" --block_size 16 --per_device_train_batch_size 2 --max_steps 20
   --threads 1 --peak_gflops 1 --progress false --device emu --torch_dtype bfloat16 --mixed_precision bf16)
"$ZTRAIN" "${T[@]}" --kernels fast --log_jsonl "$TMP/fast.jsonl" --profile "$TMP/p.json" --profile_steps 11-12 \
    >"$TMP/fast.out" 2>&1 || fail "fast run: $(tail -3 "$TMP/fast.out")"
"$ZTRAIN" "${T[@]}" --kernels exact --log_jsonl "$TMP/exact.jsonl" >"$TMP/exact.out" 2>&1 ||
    fail "exact run: $(tail -3 "$TMP/exact.out")"

# losses: the JSONL's, in order
python3 - "$TMP/fast.jsonl" <(losses "$TMP/fast.jsonl") <<'PY' || fail "losses does not read the JSONL's losses"
import json, sys
want = [json.loads(l)["loss"] for l in open(sys.argv[1])]
got = [float(x) for x in open(sys.argv[2]).read().split()]
assert len(want) == 20 and got == want, (got, want)
PY
r=$(max_rel "$TMP/fast.jsonl" "$TMP/exact.jsonl")
le "$r" 2e-2 || fail "max_rel fast vs exact: $r, over bf16 error"
le "$r" 0 && fail "max_rel fast vs exact: $r: bf16 activations should move the losses"
[ "$(max_rel "$TMP/fast.jsonl" "$TMP/fast.jsonl")" = 0 ] || fail "max_rel of a log with itself is not 0"
head -19 "$TMP/exact.jsonl" > "$TMP/short.jsonl"
[ "$(max_rel "$TMP/fast.jsonl" "$TMP/short.jsonl")" = inf ] || fail "max_rel over logs of 20 and 19 steps is not inf"
le inf 1 && fail "le inf 1 holds"

# the medians check.sh reports, against Python's over the same steps
for key in tokens_per_sec_per_device mfu; do
    m=$(zt_median "$TMP/fast.jsonl" $key)
    python3 - "$TMP/fast.jsonl" $key "$m" <<'PY' || fail "zt_median $key: $m"
import json, sys
v = sorted(d[sys.argv[2]] for d in map(json.loads, open(sys.argv[1])) if d["step"] > 2 and d["step"] not in (11, 12))
assert len(v) == 16 and float(sys.argv[3]) == v[7] and v[7] > 0, (sys.argv[3], v)
PY
done
m=$(zt_median "$TMP/fast.jsonl" mfu)
awk -v m="$m" 'BEGIN { exit !(m > 0 && m <= 1) }' || fail "MFU median $m not in (0, 1]"

# PyTorch's line, with a warning after it
printf 'compiling...\n{"mode": "eager", "tokens_per_sec": 17672.5, "step_s": 0.1159}\nUserWarning: something\n' > "$TMP/torch.out"
[ "$(jget "$TMP/torch.out" tokens_per_sec)" = 17672.5 ] || fail "jget tokens_per_sec: $(jget "$TMP/torch.out" tokens_per_sec)"
[ -z "$(jget "$TMP/torch.out" peak_alloc_gib)" ] || fail "jget of a missing key is not empty"

# kernels_check --bench's rows (its printf's layout): the fast time of the row named
printf 'bench: B=1 T=2048\nbench %-46s exact %9.3f ms %8.1f %-7s fast %9.3f ms %8.1f %-7s x%.2f\n' \
    "attention_forward_act16 (hd 64, rope)" 12.5 110.2 TFLOP/s 1.25 220.4 TFLOP/s 10.0 \
    "attention_backward_act16 (hd 64, rope)" 30.125 114.1 TFLOP/s 3.5 98.1 TFLOP/s 8.6 > "$TMP/bench.out"
[ "$(bench_ms "$TMP/bench.out" "attention_forward_act16 (hd 64")" = 1.250 ] || fail "bench_ms forward: $(bench_ms "$TMP/bench.out" "attention_forward_act16 (hd 64")"
[ "$(bench_ms "$TMP/bench.out" "attention_backward_act16 (hd 64")" = 3.500 ] || fail "bench_ms backward"
[ -z "$(bench_ms "$TMP/bench.out" "attention_forward_act16 (hd 128")" ] || fail "bench_ms of a missing row is not empty"
# the cuDNN rows: the own kernels against cuDNN's, read after the label "cudnn"
printf 'bench %-46s own %9.3f ms %8.1f %-7s cudnn %9.3f ms %8.1f %-7s x%.2f\n' \
    "cudnn attention_forward_act16 (hd 64, rope)" 1.25 220.4 TFLOP/s 0.5 551.0 TFLOP/s 2.5 >> "$TMP/bench.out"
[ "$(bench_ms "$TMP/bench.out" "cudnn attention_forward_act16 (hd 64" cudnn)" = 0.500 ] || fail "bench_ms cudnn"
[ -z "$(bench_ms "$TMP/bench.out" "cudnn attention_forward_act16 (hd 64")" ] || fail "bench_ms fast of a cudnn row"

# the profile's top 10: the table's line, its header, ten classes, largest first
top10 "$TMP/fast.out" > "$TMP/top"
[ "$(wc -l < "$TMP/top")" -eq 12 ] || fail "top10: $(cat "$TMP/top")"
grep -q '^profile: steps 11-12' "$TMP/top" || fail "top10 lacks the table's line"
sed -n '3,12p' "$TMP/top" | awk '{ print $3 }' | sort -grc 2>/dev/null || fail "top10 is not sorted by time: $(cat "$TMP/top")"
finish
