# LoRA with bf16 activations (issue 46; docs/lora.md, "bf16 activations"; docs/gpu.md):
# --activations bf16 (fast mode's preset with bf16 compute) writes the base's q|k|v and
# gate|up products and their gradients in bf16; the adapters add to those products widened
# to fp32 and rounded back once, and read the bf16 gradients widened.  Every target, so
# both widenings run.  Checked: the first step's loss is full fine-tuning's with bf16
# activations bit for bit (B = 0: the adapters add exactly nothing); the run follows the
# same run with fp32 activations within bf16 error (losses 2^-8 relative, grad norms 2^-6,
# kernels.sh's fast-against-exact bounds) and is not its bits; gradient checkpointing (the
# recomputed forward) keeps its bits; the trained adapters change the later losses; and on the emulated device --kernels fast (bf16
# activations, the asynchronous step, graphs) against exact mode, the same bounds.
. "$(dirname "$0")/lib.bash"
fix=tests/fixtures/gqa_tied
args=(train --model $fix --data $fix/tokens.npy --block_size 16 --per_device_train_batch_size 2 --threads 1
      --peak_gflops 1000 --progress false --shuffle false --learning_rate 1e-3 --mixed_precision bf16)
peft=(--use_peft --lora_r 4 --lora_alpha 8 --lora_target_modules all-linear)
run() { # name plan-pattern args...
    local name=$1 want=$2
    shift 2
    "$ZTRAIN" "${args[@]}" --log_jsonl "$TMP/$name.jsonl" "$@" >"$TMP/$name.log" 2>&1 ||
        { fail "$name: $(tail -3 "$TMP/$name.log")"; return; }
    grep -q "^plan: .*$want" "$TMP/$name.log" || fail "$name: the plan line: $(grep plan: "$TMP/$name.log")"
}
run a16 "activations bf16" "${peft[@]}" --max_steps 3 --activations bf16
run a16ck "activations bf16" "${peft[@]}" --max_steps 3 --activations bf16 --gradient_checkpointing true
run a16lr0 "activations bf16" "${peft[@]}" --max_steps 3 --activations bf16 --learning_rate 0
run a32 "activations fp32" "${peft[@]}" --max_steps 3 --activations fp32
run full16 "activations bf16" --max_steps 1 --activations bf16
run emu_exact "kernels exact, step sync, activations fp32" "${peft[@]}" --max_steps 3 --device emu
run emu_fast "kernels fast, step async, activations bf16" "${peft[@]}" --max_steps 3 --device emu --kernels fast
run emu_full "kernels fast, step async, activations bf16" --max_steps 1 --device emu --kernels fast
/usr/bin/python3 - "$TMP" <<'PY' || fail "LoRA with bf16 activations ($TMP)"
import json, sys
def log(name):
    return [json.loads(l) for l in open(f"{sys.argv[1]}/{name}.jsonl")]
def first_loss(name): # the log's own digits, as written
    return open(f"{sys.argv[1]}/{name}.jsonl").readline().split('"loss": ')[1].split(",")[0]
def near(a, b, what):
    assert len(a) == len(b) == 3, (what, len(a), len(b))
    for x, y in zip(a, b):
        assert not x["skipped"] and not y["skipped"], (what, x["step"])
        for k, tol in (("loss", 2.0 ** -8), ("grad_norm", 2.0 ** -6)):
            assert abs(x[k] - y[k]) <= tol * abs(y[k]), (what, x["step"], k, x[k], y[k])
    assert any(x["loss"] != y["loss"] for x, y in zip(a, b)), (what, "the bf16 activations were not used")
a16, a32 = log("a16"), log("a32")
assert first_loss("a16") == first_loss("full16"), ("step 1 against full fine-tuning", first_loss("a16"), first_loss("full16"))
assert first_loss("emu_fast") == first_loss("emu_full"), ("emu fast step 1", first_loss("emu_fast"), first_loss("emu_full"))
assert [x["loss"] for x in a16] == [x["loss"] for x in log("a16ck")], "gradient checkpointing changed the bits"
# the trained adapters change the later losses (against the same run at learning rate 0)
assert all(x["loss"] != y["loss"] for x, y in zip(a16[1:], log("a16lr0")[1:])), "the adapters add nothing"
near(a16, a32, "bf16 against fp32 activations")
near(log("emu_fast"), log("emu_exact"), "emu fast against exact")
PY
finish
