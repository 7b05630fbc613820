"""Write the sliding-window fixtures, computed by transformers' own MistralForCausalLM:

  tests/fixtures/mistral_window/   a parity fixture in the format of tools/make_fixtures.py
      (config.json, model.safetensors, tokens.npy, train_args.json, reference.safetensors)
      whose block_size (160) is longer than its sliding_window (50), so the mask cuts
      every sequence; read by tests/test_parity.c like the Llama fixtures.
  tests/fixtures/generate_window/  a byte-level Mistral with sliding_window 8 and the greedy
      continuations MistralForCausalLM.generate gives for three prompts (the KV-cache path
      runs well past the window); read by tests/test_generate.c like tests/fixtures/generate.

Both models are saved by transformers' save_pretrained, so their config.json is what
transformers 5 writes for Mistral (sliding_window as an integer, rope_parameters, dtype).
Attention is "eager": the explicit mask of masking_utils (kv_idx > q_idx - sliding_window,
and causal), softmax in fp32.  One thread, deterministic algorithms.

The script also runs each model with sliding_window None and asserts that the results
change: a fixture whose window masked nothing would prove nothing.

Dev-time only (PyPI): the peers' virtual environment (torch 2.x, transformers 5.24), which
bench/peers/setup.sh makes in build/peers-venv (or $PEERS_VENV):
    bench/peers/setup.sh && build/peers-venv/bin/python tools/make_mistral_fixtures.py
Tests read the stored files with Debian's tools and never need this environment.
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

PARITY = dict(hidden_size=64, intermediate_size=160, num_hidden_layers=2,
              num_attention_heads=4, num_key_value_heads=2, head_dim=32, vocab_size=256,
              max_position_embeddings=256, sliding_window=50, rms_norm_eps=1e-5,
              rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
              tie_word_embeddings=False, initializer_range=0.02)
TRAIN_ARGS = {
    "block_size": 160, "batch_size": 2, "grad_accum": 1, "steps": 3, "max_steps": 6,
    "learning_rate": 1e-3, "weight_decay": 0.1, "adam_beta1": 0.9, "adam_beta2": 0.95,
    "adam_epsilon": 1e-8, "max_grad_norm": 3.0, "lr_scheduler_type": "linear",
    "warmup_steps": 2,
}
N_TOKENS = 2048

GENERATE = dict(hidden_size=64, intermediate_size=160, num_hidden_layers=3,
                num_attention_heads=4, num_key_value_heads=2, vocab_size=256,
                max_position_embeddings=128, sliding_window=8, rms_norm_eps=1e-5,
                rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
                tie_word_embeddings=False, initializer_range=0.15)
GEN_SEED = 4321


def mistral(cfg, window="keep"):
    c = dict(cfg)
    if window != "keep":
        c["sliding_window"] = window
    conf = transformers.MistralConfig(bos_token_id=None, eos_token_id=None, pad_token_id=None,
                                      dtype="float32", **c)
    conf._attn_implementation = "eager"
    return transformers.MistralForCausalLM(conf).eval()


# ---------------------------------------------------------------------------- parity

def make_parity():
    d = os.path.join(FIX, "mistral_window")
    os.makedirs(d, exist_ok=True)
    args = dict(TRAIN_ARGS)
    assert args["block_size"] > PARITY["sliding_window"]
    model = mistral(PARITY)
    init_weights(model, PARITY["initializer_range"], SEED)
    params = state(model)
    tokens = make_tokens(N_TOKENS)
    assert len(tokens) >= args["max_steps"] * args["batch_size"] * args["block_size"] + 1
    ids, targets = batch(tokens, 0, args["batch_size"], args["block_size"])

    ref = {}
    logits, loss, grads = forward_backward(model, params, ids, targets)
    ref["logits"], ref["loss"] = logits, loss.reshape(1)
    ref.update({"grad." + k: g for k, g in grads.items()})
    losses, norms, lrs, step3 = train(model, params, tokens, args)
    ref["losses"], ref["grad_norms"], ref["lrs"] = vec(losses), vec(norms), vec(lrs)
    ref.update({"step3." + k: v for k, v in step3.items()})
    print("mistral_window: loss %.6f; losses %s; grad norms %s" % (
        loss.item(), ["%.6f" % x for x in losses], ["%.6f" % x for x in norms]))
    assert sum(n > args["max_grad_norm"] for n in norms) >= 2

    # the window must matter: the same weights without it give other logits and gradients
    full = mistral(PARITY, window=None)
    full_logits, _, full_grads = forward_backward(full, params, ids, targets)
    dl = rel(full_logits, logits)
    dg = max(rel(full_grads[k], grads[k]) for k in grads)
    print("  without the window: logits differ by %.3g, gradients by up to %.3g (relative)" % (dl, dg))
    assert dl > 1e-2 and dg > 1e-2

    bf = mistral(PARITY)
    bf16_linears(bf)
    master = {k: bf16_round(v) for k, v in params.items()}
    logits_b, loss_b, grads_b = forward_backward(bf, master, ids, targets)
    ref["bf16.logits"], ref["bf16.loss"] = logits_b, loss_b.reshape(1)
    ref.update({"bf16.grad." + k: g for k, g in grads_b.items()})
    losses_b, norms_b, _, _ = train(bf, master, tokens, args)
    ref["bf16.losses"], ref["bf16.grad_norms"] = vec(losses_b), vec(norms_b)
    print("  bf16: loss %.6f; losses %s" % (loss_b.item(), ["%.6f" % x for x in losses_b]))

    save_parity(d, model, params, args, tokens, ref)


# ---------------------------------------------------------------------------- generation

def make_generate():
    d = os.path.join(FIX, "generate_window")
    os.makedirs(d, exist_ok=True)
    model = mistral(GENERATE)
    init_weights(model, GENERATE["initializer_range"], GEN_SEED)
    full = mistral(GENERATE, window=None)
    load(full, state(model))
    prompts, outputs, margins, differ = [], [], [], 0
    for text in PROMPTS:
        ids, new, m = greedy(model, text)
        assert len(ids) + MAX_NEW > 2 * GENERATE["sliding_window"]
        _, new_full, _ = greedy(full, text)
        differ += new != new_full
        prompts.append(ids)
        outputs.append(new)
        margins += m
    assert differ >= 2, "the window changed fewer than 2 of the 3 continuations"
    model.save_pretrained(d, safe_serialization=True)
    doc = {
        "generator": "transformers %s MistralForCausalLM.generate(do_sample=False), torch %s, fp32, eager"
                     % (transformers.__version__, torch.__version__),
        "sliding_window": GENERATE["sliding_window"],
        "max_new_tokens": MAX_NEW,
        "min_margin": min(margins),
        "continuations_changed_by_the_window": differ,
        "prompts": prompts,
        "outputs": outputs,
    }
    write_json(os.path.join(d, "greedy.json"), doc, 1)
    print("generate_window: min top-2 margin %.4g; %d of %d continuations differ without the window"
          % (min(margins), differ, len(PROMPTS)))
    for p, o in zip(prompts, outputs):
        print("  ", repr(bytes(p)), "->", repr(bytes(o)))


def main():
    torch.manual_seed(SEED)
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    make_parity()
    make_generate()


if __name__ == "__main__":
    main()
