"""Write tests/fixtures/lora/linear_bf16.safetensors: one LoRA linear layer in bf16 compute,
which tests/test_lora.c holds ztrain's (model/lora.h: zt_lora_forward and zt_lora_backward
with w_dt and x_dt bf16) against.

For each case, the inputs x, W, A, B and dy, seeded and rounded to bf16 (the model holds its
weights and operands in bf16 with bf16 compute, so the inputs are bf16 values), stored as fp32,
and two references, each y = layer(x) and the backward of sum(y * dy) (dx, dA, dB):

  <case>.ref.*   the arithmetic ztrain states for bf16 compute (lora.h), in float64: every
                 product's operands rounded to bf16 (t = x A^T, du = s dy and dt = du B are
                 rounded where a product reads them, as autocast's bf16 outputs are), the
                 sums exact, the results and the scaled sums fp32;
  <case>.peft.*  PEFT's own layer (peft.tuners.lora.layer.Linear, base frozen as
                 get_peft_model freezes it) under torch.autocast("cpu", bfloat16), fp32
                 parameters: what a bf16-autocast PEFT run computes, every product's output
                 rounded to bf16 as well (y, t, u and the gradients that flow back).

The first holds the rounding rule tightly; the second says the rule is autocast's up to the
extra roundings of the outputs.  Metadata "cases": "name N out in r scale" per case, ";"
between cases.

Dev-time only (the test reads the stored file):
    OMP_NUM_THREADS=1 /work/devvenv/bin/python tools/make_lora_bf16_fixture.py
Generated with torch 2.15, peft 0.21.2, one thread.  Deterministic.
"""
import os

import torch
from peft import LoraConfig
from peft.tuners.lora.layer import Linear as LoraLinear
from safetensors.torch import save_file

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
OUT = os.path.join(ROOT, "tests", "fixtures", "lora", "linear_bf16.safetensors")

CASES = [
    # name, N, in, out, r, alpha, use_rslora (the fp32 fixture's shapes and scales)
    ("plain", 7, 24, 20, 3, 5, False),
    ("rslora", 10, 16, 40, 4, 7, True),
]


def bf(x):
    """x rounded to bf16 (nearest even), as float64."""
    return x.to(torch.bfloat16).to(torch.float64)


def f32(x):
    return x.to(torch.float32).to(torch.float64)


def stated(x, w, a, b, dy, s):
    """ztrain's bf16-compute arithmetic (lora.h), in float64 with its roundings."""
    x, w, a, b, dy = (v.double() for v in (x, w, a, b, dy))
    t = f32(x @ a.T)                      # fp32 result of bf16 operands
    u = f32(bf(t) @ b.T)
    y = f32(f32(x @ w.T) + f32(s * u))    # the base's product, then y += s u (u rounded by s first)
    du = f32(s * dy)
    db = f32(bf(du).T @ bf(t))
    dt = f32(bf(du) @ b)
    da = f32(bf(dt).T @ x)
    dx = f32(f32(bf(dy) @ w) + f32(bf(dt) @ a))
    return {"y": y, "dx": dx, "da": da, "db": db}


def peft_autocast(x, w, a, b, dy, r, alpha, rslora):
    fout, fin = w.shape
    base = torch.nn.Linear(fin, fout, bias=False)
    cfg = LoraConfig(r=r, lora_alpha=alpha, lora_dropout=0.0, use_rslora=rslora, bias="none")
    layer = LoraLinear(base, "default", cfg, r=r, lora_alpha=alpha, lora_dropout=0.0, use_rslora=rslora)
    base.weight.requires_grad_(False)  # get_peft_model's mark_only_lora_as_trainable
    with torch.no_grad():
        base.weight.copy_(w)
        layer.lora_A["default"].weight.copy_(a)
        layer.lora_B["default"].weight.copy_(b)
    xx = x.clone().requires_grad_(True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = layer(xx)
    assert y.dtype == torch.bfloat16, "autocast did not run the layer in bf16"
    (y.float() * dy).sum().backward()
    assert base.weight.grad is None, "PEFT left the base weight trainable"
    la, lb = layer.lora_A["default"].weight, layer.lora_B["default"].weight
    return {"y": y.float(), "dx": xx.grad.float(), "da": la.grad, "db": lb.grad}, layer.scaling["default"]


def case(name, N, fin, fout, r, alpha, rslora, gen, tensors, meta):
    rnd = lambda *shape, k: (torch.randn(*shape, generator=gen) * k).to(torch.bfloat16).float()
    w, a, b = rnd(fout, fin, k=0.2), rnd(r, fin, k=0.3), rnd(fout, r, k=0.3)
    x, dy = rnd(N, fin, k=1.0), rnd(N, fout, k=1.0)
    peft, s = peft_autocast(x, w, a, b, dy, r, alpha, rslora)
    ref = stated(x, w, a, b, dy, s)
    for k, v in {"x": x, "w": w, "a": a, "b": b, "dy": dy}.items():
        tensors[f"{name}.{k}"] = v.contiguous()
    for k in ref:
        tensors[f"{name}.ref.{k}"] = ref[k].float().contiguous()
        tensors[f"{name}.peft.{k}"] = peft[k].detach().float().contiguous()
        d = (ref[k] - peft[k].double()).abs().max() / ref[k].abs().max()
        print(f"{name} {k}: stated rule vs PEFT autocast {d:.3g} of the largest")
    meta.append("%s %d %d %d %d %.17g" % (name, N, fout, fin, r, s))


def main():
    torch.set_num_threads(1)
    gen = torch.Generator().manual_seed(4646)
    tensors, meta = {}, []
    for c in CASES:
        case(*c, gen, tensors, meta)
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    save_file(tensors, OUT, metadata={"cases": ";".join(meta)})


if __name__ == "__main__":
    main()
