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

import json
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F
import transformers
from safetensors.torch import save_file

sys.dont_write_bytecode = True  # leave no __pycache__ in tools/
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
# the data order and ztrain's bf16 linear, shared with the Llama fixtures
from make_fixtures import Bf16Linear, batch, bf16_round  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIX = os.path.join(ROOT, "tests", "fixtures")
TEXT_PATH = "/usr/share/common-licenses/GPL-3"
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
MAX_NEW = 40
PROMPTS = [
    "T",
    "The licence",
    "This program is free software: you can redistribute it and/or modify it",
]


def mistral(cfg, window="keep"):
    c = dict(cfg)
    if window != "keep":
        c["sliding_window"] = window
    conf = transformers.MistralConfig(bos_token_id=None, eos_token_id=None, pad_token_id=None,
                                      dtype="float32", **c)
    conf._attn_implementation = "eager"
    return transformers.MistralForCausalLM(conf).eval()


def init_weights(model, std, seed):
    """Matrices ~ N(0, std), norm weights 1 + 0.1 N(0, 1), in named_parameters order."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for _, p in model.named_parameters():
            if p.dim() == 2:
                p.copy_(torch.empty(p.shape).normal_(0.0, std, generator=g))
            else:
                p.copy_(1.0 + 0.1 * torch.empty(p.shape).normal_(0.0, 1.0, generator=g))


def state(model):
    return {k: v.detach().clone() for k, v in model.named_parameters()}


def load(model, params):
    with torch.no_grad():
        for k, p in model.named_parameters():
            p.copy_(params[k])


# ---------------------------------------------------------------------------- parity

def make_tokens():
    with open(TEXT_PATH, "rb") as f:
        text = f.read()
    start = text.index(b"Preamble")
    return np.frombuffer(text[start:start + N_TOKENS], dtype=np.uint8).astype(np.int32)


def bf16_linears(model):
    """Every nn.Linear of the model computes as Bf16Linear (the rest of the model, the
    attention included, stays fp32, as ztrain's bf16 mode with hd 32 tiles in bf16 only
    inside its own attention kernel, which the kernel tests hold to the fp32 one)."""
    for m in model.modules():
        if isinstance(m, torch.nn.Linear):
            m.forward = (lambda mod: (lambda x: Bf16Linear.apply(x, mod.weight)))(m)


def loss_of(model, ids, targets):
    logits = model(input_ids=ids, use_cache=False).logits
    return logits, F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), targets.reshape(-1))


def forward_backward(model, params, ids, targets):
    load(model, params)
    model.zero_grad(set_to_none=True)
    logits, loss = loss_of(model, ids, targets)
    loss.backward()
    return logits.detach(), loss.detach(), {k: p.grad.detach().clone() for k, p in model.named_parameters()}


def lr_factor(args):
    w, S = args["warmup_steps"], args["max_steps"]
    return lambda u: u / max(1, w) if u < w else max(0.0, (S - u) / max(1, S - w))


def train(model, params, tokens, args):
    load(model, params)
    ps = dict(model.named_parameters())
    opt = torch.optim.AdamW(
        [{"params": [p for p in ps.values() if p.dim() == 2], "weight_decay": args["weight_decay"]},
         {"params": [p for p in ps.values() if p.dim() != 2], "weight_decay": 0.0}],
        lr=args["learning_rate"], betas=(args["adam_beta1"], args["adam_beta2"]),
        eps=args["adam_epsilon"], foreach=False)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_factor(args))
    losses, norms, lrs = [], [], []
    for s in range(args["steps"]):
        ids, targets = batch(tokens, s, args["batch_size"], args["block_size"])
        opt.zero_grad(set_to_none=True)
        _, loss = loss_of(model, ids, targets)
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(list(ps.values()), args["max_grad_norm"])
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
        losses.append(loss.item())
        norms.append(norm.item())
    return losses, norms, lrs, state(model)


def vec(values):
    return torch.tensor(values, dtype=torch.float64).float()


def rel(a, b):
    return ((a - b).abs().max() / b.abs().max()).item()


def make_parity():
    d = os.path.join(FIX, "mistral_window")
    os.makedirs(d, exist_ok=True)
    args = dict(TRAIN_ARGS)
    assert args["block_size"] > PARITY["sliding_window"]
    model = mistral(PARITY)
    init_weights(model, PARITY["initializer_range"], SEED)
    params = state(model)
    tokens = make_tokens()
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

    load(model, params)
    model.save_pretrained(d, safe_serialization=True)
    gc = os.path.join(d, "generation_config.json")
    if os.path.exists(gc):
        os.remove(gc)
    with open(os.path.join(d, "train_args.json"), "w") as f:
        json.dump(args, f, indent=2)
        f.write("\n")
    np.save(os.path.join(d, "tokens.npy"), tokens)
    save_file({k: v.contiguous().float() for k, v in ref.items()},
              os.path.join(d, "reference.safetensors"), metadata={"format": "pt"})


# ---------------------------------------------------------------------------- generation

def greedy(model, text):
    ids = list(text.encode("utf-8"))
    inp = torch.tensor([ids])
    with torch.no_grad():
        out = model.generate(inp, attention_mask=torch.ones_like(inp), max_new_tokens=MAX_NEW,
                             do_sample=False, pad_token_id=0, output_scores=True,
                             return_dict_in_generate=True)
    margins = [float(torch.topk(s[0], 2).values[0] - torch.topk(s[0], 2).values[1]) for s in out.scores]
    return ids, out.sequences[0, len(ids):].tolist(), margins


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
    with open(os.path.join(d, "greedy.json"), "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
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
