# Fast mode's bf16 activations (docs/gpu.md, "Kernel modes") across the model's
# variants on the emulated device: Qwen2's q/k/v biases (added in the qkv product before
# its one rounding to bf16; backward, the attention writes the fp32 dqkv too, RoPE
# undone, for the bias's gradient) and its rope_theta 1e6, Llama 3.1's scaled RoPE
# frequencies (llama3_rope: the tables the attention rotates q and k by as it reads
# them), Mistral's sliding window, head size 32 (the bf16-operand attention with its
# pack) and 16 (the fp32 attention on widened copies).  5 bf16 steps in fast
# mode against exact mode: losses and norms within bf16 error (2^-8 relative), and not
# exact mode's bits (the bf16 activations were used).
. "$(dirname "$0")/lib.bash"
args=(--block_size 16 --per_device_train_batch_size 2 --max_steps 5 --threads 1 --peak_gflops 1 --progress false
      --mixed_precision bf16 --learning_rate 1e-3 --device emu)
for fam in qwen2_bias llama3_rope mistral_window gqa_hd32 gqa_tied; do
    fix=tests/fixtures/$fam
    for k in exact fast; do
        out=$("$ZTRAIN" train --model $fix --data $fix/tokens.npy "${args[@]}" --kernels $k \
              --log_jsonl "$TMP/$fam.$k.jsonl" 2>&1) || fail "$fam, $k: $out"
    done
    python3 - "$TMP/$fam.exact.jsonl" "$TMP/$fam.fast.jsonl" <<'PY' || fail "$fam: fast mode beyond bf16 error of exact"
import json, sys
a, b = ([json.loads(l) for l in open(p)] for p in sys.argv[1:3])
assert len(a) == len(b) == 5, (len(a), len(b))
for x, y in zip(a, b):
    for k in ("loss", "grad_norm"):
        # the loss within 2^-8, the norm within 2^-6 (four bf16 roundings: test_async_step.c)
        assert abs(x[k] - y[k]) <= abs(x[k]) / (64 if k == "grad_norm" else 256), (x["step"], k, x[k], y[k])
assert any(x["loss"] != y["loss"] for x, y in zip(a, b)), "fast mode's losses are exact mode's bits"
PY
done
finish
