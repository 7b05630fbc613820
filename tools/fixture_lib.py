"""What the fixture scripts built on transformers' own classes share
(tools/make_mistral_fixtures.py, tools/make_family_fixtures.py): the weights, the text,
one forward and backward, the reference AdamW run, greedy generation, and the files of a
parity fixture.  The data order and ztrain's bf16 linear come from tools/make_fixtures.py,
the Llama fixtures' script, and are re-exported here.

A parity fixture directory (read by tests/test_parity.c) holds config.json and
model.safetensors (save_pretrained), tokens.npy, train_args.json and reference.safetensors:
logits, loss and every gradient of batch 0 under "logits", "loss", "grad.NAME"; the losses,
pre-clip gradient norms and learning rates of `steps` AdamW steps and the weights after them
under "losses", "grad_norms", "lrs", "step3.NAME"; the same in bf16 compute under "bf16.".

Dev-time only: each script says which torch and transformers it needs.
"""

import json
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F
from safetensors.torch import save_file

sys.dont_write_bytecode = True  # leave no __pycache__ in tools/
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_fixtures import Bf16Linear, batch, bf16_round  # noqa: E402,F401  (re-exported)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIX = os.path.join(ROOT, "tests", "fixtures")
TEXT_PATH = "/usr/share/common-licenses/GPL-3"

# greedy generation fixtures: three prompts, 40 new tokens each
MAX_NEW = 40
PROMPTS = [
    "T",
    "The licence",
    "This program is free software: you can redistribute it and/or modify it",
]


def init_weights(model, std, seed):
    """Matrices and biases ~ N(0, std), norm weights 1 + 0.1 N(0, 1), drawn in
    named_parameters order from one generator seeded with seed."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 2 or name.endswith(".bias"):
                p.copy_(torch.empty(p.shape).normal_(0.0, std, generator=g))
            else:
                p.copy_(1.0 + 0.1 * torch.empty(p.shape).normal_(0.0, 1.0, generator=g))


def state(model):
    return {k: v.detach().clone() for k, v in model.named_parameters()}


def load(model, params):
    with torch.no_grad():
        for k, p in model.named_parameters():
            p.copy_(params[k])


def make_tokens(n):
    """n bytes of English text (the GPL-3 from its preamble on) as int32 token ids."""
    with open(TEXT_PATH, "rb") as f:
        text = f.read()
    start = text.index(b"Preamble")
    return np.frombuffer(text[start:start + n], dtype=np.uint8).astype(np.int32)


class RoundedBias(torch.autograd.Function):
    """The bias as ztrain's bf16 compute adds it: the bf16 compute copy widened to fp32;
    its gradient (the column sums of dy, fp32) goes to the fp32 master unrounded."""

    @staticmethod
    def forward(ctx, b):
        return bf16_round(b)

    @staticmethod
    def backward(ctx, db):
        return db


def bf16_linears(model):
    """Every nn.Linear computes as Bf16Linear, its bias (if any) added after the product;
    the rest of the model, the attention included, stays fp32 (as ztrain's bf16 mode with
    these head sizes tiles in bf16 only inside its own attention kernel, which the kernel
    tests hold to the fp32 one)."""
    for m in model.modules():
        if isinstance(m, torch.nn.Linear):
            if m.bias is None:
                m.forward = (lambda mod: (lambda x: Bf16Linear.apply(x, mod.weight)))(m)
            else:
                m.forward = (lambda mod: (lambda x: Bf16Linear.apply(x, mod.weight)
                                          + RoundedBias.apply(mod.bias)))(m)


def loss_of(model, ids, targets):
    """Logits and the mean token cross-entropy, in the model's own dtype (fp32, or
    float64 for the error check)."""
    logits = model(input_ids=ids, use_cache=False).logits
    return logits, F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def forward_backward(model, params, ids, targets):
    load(model, params)
    model.zero_grad(set_to_none=True)
    logits, loss = loss_of(model, ids, targets)
    loss.backward()
    return logits.detach(), loss.detach(), {k: p.grad.detach().clone() for k, p in model.named_parameters()}


def lr_factor(args):
    """The linear schedule with warmup (contract §4): u/w for u < w, else (S-u)/(S-w)."""
    w, S = args["warmup_steps"], args["max_steps"]
    return lambda u: u / max(1, w) if u < w else max(0.0, (S - u) / max(1, S - w))


def train(model, params, tokens, args):
    """args["steps"] steps of torch AdamW in two groups as HF Trainer makes them: weight
    decay on the matrices, none on norm weights and biases; clipping at max_grad_norm.
    Returns the losses, pre-clip norms, learning rates and the weights after the steps."""
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
    """max |a - b| / max |b|, in float64."""
    return ((a.double() - b.double()).abs().max() / b.double().abs().max()).item()


def greedy(model, text):
    """The prompt's byte ids, the MAX_NEW ids generate(do_sample=False) continues them
    with, and the top-2 logit margin of each choice."""
    ids = list(text.encode("utf-8"))
    inp = torch.tensor([ids])
    with torch.no_grad():
        out = model.generate(inp, attention_mask=torch.ones_like(inp), max_new_tokens=MAX_NEW,
                             do_sample=False, pad_token_id=0, output_scores=True,
                             return_dict_in_generate=True)
    margins = [float(torch.topk(s[0], 2).values[0] - torch.topk(s[0], 2).values[1]) for s in out.scores]
    return ids, out.sequences[0, len(ids):].tolist(), margins


def write_json(path, doc, indent):
    with open(path, "w") as f:
        json.dump(doc, f, indent=indent)
        f.write("\n")


def save_parity(d, model, params, args, tokens, ref):
    """The files of a parity fixture in d: the model with params (save_pretrained, without
    the generation_config.json it adds), train_args.json, tokens.npy, reference.safetensors."""
    load(model, params)
    model.save_pretrained(d, safe_serialization=True)
    gc = os.path.join(d, "generation_config.json")
    if os.path.exists(gc):
        os.remove(gc)
    write_json(os.path.join(d, "train_args.json"), args, 2)
    np.save(os.path.join(d, "tokens.npy"), tokens)
    save_file({k: v.contiguous().float() for k, v in ref.items()},
              os.path.join(d, "reference.safetensors"), metadata={"format": "pt"})
