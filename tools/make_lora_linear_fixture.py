"""Write tests/fixtures/lora/linear.safetensors: one LoRA linear layer's forward and
backward as PEFT computes them, which tests/test_lora.c holds ztrain's (model/lora.h:
zt_lora_forward, zt_lora_backward) against.

For each case, a bias-free nn.Linear(in, out) wrapped by PEFT's own LoRA layer
(peft.tuners.lora.layer.Linear, the class get_peft_model puts in a model's place),
its A and B set from a seeded generator (B non-zero, unlike PEFT's initial zeros, so
that every product of the backward is exercised), fp32:

  <case>.x (N, in), .w (out, in), .a (r, in), .b (out, r), .dy (N, out)   the inputs
  <case>.y = layer(x)                                                       the forward
  <case>.dx, .da, .db                                                       the backward of
                                                                            sum(y * dy)
and the metadata key "cases", "name N out in r scale" per case, separated by ";": the
shapes and PEFT's `scaling` for the adapter (alpha / r, or alpha / sqrt(r) with use_rslora).  The base weight is frozen
as get_peft_model freezes it (requires_grad False), and the script asserts that it got
no gradient.

Dev-time only (the test reads the stored file):
    OMP_NUM_THREADS=1 /work/devvenv/bin/python tools/make_lora_linear_fixture.py
Generated with torch 2.15, peft 0.21.2, one thread.  Deterministic.
"""
import os

import torch
from peft import LoraConfig
from peft.tuners.lora.layer import Linear as LoraLinear
from safetensors.torch import save_file

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
OUT = os.path.join(ROOT, "tests", "fixtures", "lora", "linear.safetensors")

CASES = [
    # name, N, in, out, r, alpha, use_rslora: scales 5/3 and 7/sqrt(4)=3.5 are not powers of two,
    # so scaling before or after B would round differently
    ("plain", 7, 24, 20, 3, 5, False),
    ("rslora", 10, 16, 40, 4, 7, True),
]


def case(name, N, fin, fout, r, alpha, rslora, gen, tensors, meta):
    base = torch.nn.Linear(fin, fout, bias=False)
    with torch.no_grad():
        base.weight.copy_(torch.randn(fout, fin, generator=gen) * 0.2)
    cfg = LoraConfig(r=r, lora_alpha=alpha, lora_dropout=0.0, use_rslora=rslora, bias="none")
    layer = LoraLinear(base, "default", cfg, r=r, lora_alpha=alpha, lora_dropout=0.0, use_rslora=rslora)
    base.weight.requires_grad_(False)  # what get_peft_model's mark_only_lora_as_trainable does
    with torch.no_grad():
        layer.lora_A["default"].weight.copy_(torch.randn(r, fin, generator=gen) * 0.3)
        layer.lora_B["default"].weight.copy_(torch.randn(fout, r, generator=gen) * 0.3)
    x = torch.randn(N, fin, generator=gen).requires_grad_(True)
    dy = torch.randn(N, fout, generator=gen)
    y = layer(x)
    (y * dy).sum().backward()
    assert base.weight.grad is None, "PEFT left the base weight trainable"
    a, b = layer.lora_A["default"].weight, layer.lora_B["default"].weight
    for k, v in {"x": x, "w": base.weight, "a": a, "b": b, "dy": dy, "y": y, "dx": x.grad, "da": a.grad,
                 "db": b.grad}.items():
        tensors[f"{name}.{k}"] = v.detach().clone().contiguous()
    meta.append("%s %d %d %d %d %.17g" % (name, N, fout, fin, r, layer.scaling["default"]))


def main():
    torch.set_num_threads(1)
    gen = torch.Generator().manual_seed(46)
    tensors, meta = {}, []
    for c in CASES:
        case(*c, gen, tensors, meta)
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    save_file(tensors, OUT, metadata={"cases": ";".join(meta)})


if __name__ == "__main__":
    main()
