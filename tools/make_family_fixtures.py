"""Write the fixtures of the model families beyond Llama 2 and Mistral, computed by
transformers' own classes:

  tests/fixtures/llama3_rope/  LlamaForCausalLM with Llama 3.1's rope_scaling
      ({"rope_type": "llama3", factor, low_freq_factor, high_freq_factor,
      original_max_position_embeddings}), tied embeddings as in Llama 3.2 1B.
  tests/fixtures/qwen2_bias/   Qwen2ForCausalLM: q, k and v projections with biases, o_proj
      without, tied embeddings as in Qwen2.5 0.5B.

Each directory is a parity fixture in the format of tools/make_fixtures.py (config.json,
model.safetensors, tokens.npy, train_args.json, reference.safetensors: logits, loss and
every gradient of batch 0, three AdamW steps, the same in bf16 compute) read by
tests/test_parity.c, and a generation fixture (greedy.json: the ids generate(do_sample=False)
continues three prompts with) read by tests/test_generate.c.  One model serves both, to keep
the files small: hidden 64, 2 layers, vocabulary 128 (the bytes of ASCII text).  Matrices
and biases ~ N(0, 0.15), norm weights 1 + 0.1 N(0, 1): weights that large give the greedy
continuations clear margins (see tests/fixtures/README.md, generate/).

The script asserts that what the fixture is about matters: without rope_scaling (Llama) or
with the biases zeroed (Qwen2) the same weights give logits and gradients more than 1 % away,
and other greedy continuations.  It also recomputes batch 0 in float64 and prints the fp32
reference's own error.

Dev-time only: transformers 4.46.3 beside Debian's torch 1.13 (/usr/bin/python3):
    /usr/bin/python3 -m venv --system-site-packages V && V/bin/pip install transformers==4.46.3
    V/bin/python tools/make_family_fixtures.py
Attention is "eager", fp32, one thread, deterministic algorithms.  Tests read the stored
files and never need this environment.
"""

import os
import sys

import torch
import transformers

sys.dont_write_bytecode = True  # leave no __pycache__ in tools/ (set before the import below)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fixture_lib import (FIX, MAX_NEW, PROMPTS, batch, bf16_linears, bf16_round, forward_backward,  # noqa: E402
                         greedy, init_weights, load, make_tokens, rel, save_parity, state, train, vec,
                         write_json)

SEED = 1234
STD = 0.15
N_TOKENS = 1024

COMMON = dict(hidden_size=64, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
              num_key_value_heads=2, vocab_size=128, max_position_embeddings=128,
              tie_word_embeddings=True, initializer_range=STD, bos_token_id=None,
              eos_token_id=None, pad_token_id=None, torch_dtype="float32")
# original_max_position_embeddings 64 puts pair 0 of the 16-wide heads in the high band
# (wavelength 6.3 < 64/4), pair 1 in the medium one and pairs 2-7 in the low one
# (wavelength > 64), so all three of _compute_llama3_parameters' cases are exercised.
LLAMA3 = dict(COMMON, head_dim=16, rms_norm_eps=1e-5, rope_theta=500000.0,
              rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                            "high_freq_factor": 4.0, "original_max_position_embeddings": 64})
# Qwen2.5's keys: sliding_window is inert without use_sliding_window
QWEN2 = dict(COMMON, rms_norm_eps=1e-6, rope_theta=1000000.0, use_sliding_window=False,
             sliding_window=32, max_window_layers=2)

TRAIN_ARGS = {
    "block_size": 32, "batch_size": 2, "grad_accum": 1, "steps": 3, "max_steps": 6,
    "learning_rate": 1e-3, "weight_decay": 0.1, "adam_beta1": 0.9, "adam_beta2": 0.95,
    "adam_epsilon": 1e-8, "max_grad_norm": 3.0, "lr_scheduler_type": "linear",
    "warmup_steps": 2,
}


def llama3(scaled=True):
    c = dict(LLAMA3)
    if not scaled:
        c["rope_scaling"] = None
    conf = transformers.LlamaConfig(**c)
    conf._attn_implementation = "eager"
    return transformers.LlamaForCausalLM(conf).eval()


def qwen2():
    conf = transformers.Qwen2Config(**QWEN2)
    conf._attn_implementation = "eager"
    return transformers.Qwen2ForCausalLM(conf).eval()


# Debian's torch 1.13 cannot import torch.distributed.fsdp under Python 3.11 (a dataclass
# with a mutable default), which generate() imports only to ask whether the model is
# FSDP-wrapped; it is not.
transformers.generation.utils.is_fsdp_managed_module = lambda module: False


def make(name, build, variant, what, **train_args):
    """build() makes the model; variant(params) gives the model and weights without the
    feature (what names it), whose results must differ; train_args override TRAIN_ARGS."""
    d = os.path.join(FIX, name)
    os.makedirs(d, exist_ok=True)
    args = dict(TRAIN_ARGS, **train_args)
    model = build()
    init_weights(model, STD, SEED)
    params = state(model)
    tokens = make_tokens(N_TOKENS)
    assert int(tokens.max()) < COMMON["vocab_size"]
    assert len(tokens) >= args["max_steps"] * args["batch_size"] * args["block_size"] + 1
    ids, targets = batch(tokens, 0, args["batch_size"], args["block_size"])

    # transformers' inverse frequencies (fp32), which ztrain's must equal bit for bit
    ref = {"rope.inv_freq": model.model.rotary_emb.inv_freq.detach().clone()}
    logits, loss, grads = forward_backward(model, params, ids, targets)
    ref["logits"], ref["loss"] = logits, loss.reshape(1)
    ref.update({"grad." + k: g for k, g in grads.items()})
    losses, norms, lrs, step3 = train(model, params, tokens, args)
    ref["losses"], ref["grad_norms"], ref["lrs"] = vec(losses), vec(norms), vec(lrs)
    ref.update({"step3." + k: v for k, v in step3.items()})
    print("%s: loss %.6f; losses %s; grad norms %s" % (
        name, loss.item(), ["%.6f" % x for x in losses], ["%.6f" % x for x in norms]))
    assert sum(n > args["max_grad_norm"] for n in norms) >= 2, "clipping should be active"

    # the fp32 reference against float64
    m64 = build().double()
    load(m64, {k: v.double() for k, v in params.items()})
    l64, s64, g64 = forward_backward(m64, {k: v.double() for k, v in params.items()}, ids, targets)
    _, _, _, step3_64 = train(m64, {k: v.double() for k, v in params.items()}, tokens, args)
    print("  fp32 vs fp64: logits %.3g, loss %.3g, worst gradient %.3g, worst weight after the steps %.3g" % (
        rel(logits, l64), rel(loss.reshape(1), s64.reshape(1)), max(rel(grads[k], g64[k]) for k in grads),
        max(rel(step3[k], step3_64[k]) for k in step3)))

    # what the fixture is about must matter
    other, other_params = variant(params)
    o_logits, _, o_grads = forward_backward(other, other_params, ids, targets)
    dl = rel(o_logits, logits)
    dg = max(rel(o_grads[k], grads[k]) for k in grads)
    print("  %s: logits differ by %.3g, gradients by up to %.3g (relative)" % (what, dl, dg))
    assert dl > 1e-2 and dg > 1e-2

    bf = build()
    bf16_linears(bf)
    master = {k: bf16_round(v) for k, v in params.items()}
    logits_b, loss_b, grads_b = forward_backward(bf, master, ids, targets)
    ref["bf16.logits"], ref["bf16.loss"] = logits_b, loss_b.reshape(1)
    ref.update({"bf16.grad." + k: g for k, g in grads_b.items()})
    losses_b, norms_b, _, _ = train(bf, master, tokens, args)
    ref["bf16.losses"], ref["bf16.grad_norms"] = vec(losses_b), vec(norms_b)
    print("  bf16: loss %.6f; losses %s" % (loss_b.item(), ["%.6f" % x for x in losses_b]))

    # greedy generation, with and without the feature
    load(model, params)
    load(other, other_params)
    prompts, outputs, margins, differ = [], [], [], 0
    for text in PROMPTS:
        p, new, m = greedy(model, text)
        _, new_other, _ = greedy(other, text)
        differ += new != new_other
        prompts.append(p)
        outputs.append(new)
        margins += m
    assert differ >= 2, "%s changed fewer than 2 of the 3 continuations" % what
    doc = {
        "generator": "transformers %s %s.generate(do_sample=False), torch %s, fp32, eager"
                     % (transformers.__version__, type(model).__name__, torch.__version__),
        "max_new_tokens": MAX_NEW,
        "min_margin": min(margins),
        "continuations_changed": differ,
        "changed_by": what,
        "prompts": prompts,
        "outputs": outputs,
    }
    print("  greedy: min top-2 margin %.4g; %d of %d continuations differ %s"
          % (min(margins), differ, len(PROMPTS), what))

    save_parity(d, model, params, args, tokens, ref)
    write_json(os.path.join(d, "greedy.json"), doc, 1)


def unscaled(params):
    return llama3(scaled=False), params


def unbiased(params):
    return qwen2(), {k: torch.zeros_like(v) if k.endswith(".bias") else v for k, v in params.items()}


def main():
    torch.manual_seed(SEED)
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    make("llama3_rope", llama3, unscaled, "without rope_scaling")
    # adam_epsilon 1e-5: k_proj.bias barely moves the scores (softmax ignores a shift shared
    # by every key; only RoPE's rotation of the bias makes it matter), so some of its
    # gradients are ~1e-8, fp32 rounding noise, which Adam with eps 1e-8 would blow up into
    # full-size updates: the fp32 reference itself was 3.8e-5 away from float64 after the
    # three steps, above the parity test's 1e-5; with eps 1e-5 it is 1.1e-6.
    make("qwen2_bias", qwen2, unbiased, "with the biases zeroed", adam_epsilon=1e-5)


if __name__ == "__main__":
    main()
