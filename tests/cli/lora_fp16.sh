# LoRA with fp16 compute (issue 46; docs/lora.md, "fp16 compute"): the adapter units are
# units like any other under DeepSpeed's fp16 (the fp32 master, the dynamic loss scale,
# the skipped-step rule: engine/loss_scale.c).  At a loss scale of 2^30 every step
# overflows: each is skipped, the adapters stay where they started bit for bit (the run
# at learning rate 0 saves them) and the later losses are that run's; at 2^8 none is
# skipped, the adapters train (the later losses move), step 1's loss is full
# fine-tuning's with fp16 compute bit for bit (B = 0), and the losses follow the fp32 run
# within fp16's rounding (measured 3.4e-6 relative, bound 1e-4: the operands stay fp32).  Every target.
. "$(dirname "$0")/lib.bash"
fix=tests/fixtures/gqa_tied
args=(train --model $fix --data $fix/tokens.npy --block_size 16 --per_device_train_batch_size 2 --threads 1
      --progress false --shuffle false --max_steps 3 --learning_rate 1e-3)
peft=(--use_peft --lora_r 4 --lora_alpha 8 --lora_target_modules all-linear)
for p in 30 8; do
    printf '{"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 1, "zero_optimization": {"stage": 1},
 "fp16": {"enabled": true, "loss_scale_window": 2, "hysteresis": 1, "initial_scale_power": %d}}\n' $p >"$TMP/ds$p.json"
done
run() { # name args...
    local name=$1
    shift
    "$ZTRAIN" "${args[@]}" --log_jsonl "$TMP/$name.jsonl" "$@" >"$TMP/$name.log" 2>&1 ||
        fail "$name: $(tail -3 "$TMP/$name.log")"
}
run over "${peft[@]}" --deepspeed "$TMP/ds30.json" --output_dir "$TMP/over"
run still "${peft[@]}" --deepspeed "$TMP/ds8.json" --output_dir "$TMP/still" --learning_rate 0
run fp16 "${peft[@]}" --deepspeed "$TMP/ds8.json" --output_dir "$TMP/fp16"
run fp32 "${peft[@]}" --output_dir "$TMP/fp32"
run full --max_steps 1 --deepspeed "$TMP/ds8.json"
grep -q "none applied (3 skipped on fp16 overflow)" "$TMP/over.log" || fail "2^30: $(tail -2 "$TMP/over.log")"
cmp -s "$TMP/over/adapter_model.safetensors" "$TMP/still/adapter_model.safetensors" ||
    fail "the skipped steps moved the adapters"
/usr/bin/python3 - "$TMP" <<'PY' || fail "LoRA with fp16 compute ($TMP)"
import json, sys
def log(name):
    return [json.loads(l) for l in open(f"{sys.argv[1]}/{name}.jsonl")]
over, still, fp16, fp32, full = (log(n) for n in ("over", "still", "fp16", "fp32", "full"))
assert [r["skipped"] for r in over] == [1, 1, 1], [r["skipped"] for r in over]
assert [r["skipped"] for r in fp16] == [0, 0, 0], [r["skipped"] for r in fp16]
assert [r["loss"] for r in over] == [r["loss"] for r in still], (over, still)
assert fp16[0]["loss"] == full[0]["loss"], (fp16[0]["loss"], full[0]["loss"])
assert all(x["loss"] != y["loss"] for x, y in zip(fp16[1:], still[1:])), "the adapters did not train"
for x, y in zip(fp16, fp32):
    assert abs(x["loss"] - y["loss"]) <= 1e-4 * abs(y["loss"]), (x["step"], x["loss"], y["loss"])
PY
finish
