#!/usr/bin/env python3
"""Dev-time: the reference for packed examples (TRL's padding_free / packing):
transformers running each example ALONE, to which ztrain's packed batch (positions
restarting at each example, attention inside it) must be equal.

Model: tests/fixtures/gqa_tied (its config.json and model.safetensors), loaded by
transformers' LlamaForCausalLM in float64 (so the reference carries no rounding of
its own), eager attention.  Examples: slices of the fixture's tokens.npy with
lengths chosen so that examples start and end inside and across ztrain's attention
tiles of 64 keys, packed into B = 2 rows of T = 160 tokens each:
  row 0: 70, 50, 40        row 1: 3, 100, 57
Each example's last token is set to EOS (id 2, which those slices do not hold), so
the same examples also make a token stream whose documents end at eos, which
--packing (tests/test_packed.c) bin-packs into windows of T.
Each example alone: loss_e = the sum over its len - 1 next-token cross-entropies
(model(ids, labels=ids) shifts inside); the reference loss is sum_e loss_e / n with
n = sum_e (len_e - 1) targets, and every parameter's gradient is that of this loss.

Writes tests/fixtures/packed/:
  examples.json          {"B", "T", "eos", "lengths", "input_ids", "position_ids", "labels"
                          (-100 at each example's last token: no target across
                          examples), "n_targets", "loss", versions}
  reference.safetensors  grad.<HF name>, float32 (the float64 gradient rounded once)

    OMP_NUM_THREADS=1 /work/devvenv/bin/python tools/make_packed_fixtures.py
"""
import json
import os

import numpy as np
import torch
import transformers
from safetensors.torch import save_file
from transformers import LlamaConfig, LlamaForCausalLM

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SRC = os.path.join(ROOT, "tests", "fixtures", "gqa_tied")
OUT = os.path.join(ROOT, "tests", "fixtures", "packed")
ROWS = [[70, 50, 40], [3, 100, 57]]
T = 160
EOS = 2


def main():
    torch.manual_seed(0)
    cfg = LlamaConfig.from_pretrained(SRC)
    cfg._attn_implementation = "eager"
    model = LlamaForCausalLM.from_pretrained(SRC, config=cfg, torch_dtype=torch.float64)
    model.eval()
    tokens = np.load(os.path.join(SRC, "tokens.npy")).astype(np.int64)
    at = 0
    ids, pos, labels, lengths = [], [], [], []
    total = torch.zeros((), dtype=torch.float64)
    n = 0
    for row in ROWS:
        assert sum(row) == T
        r_ids, r_pos, r_lab = [], [], []
        for length in row:
            ex = tokens[at:at + length].copy()
            assert EOS not in ex
            ex[-1] = EOS
            at += length
            x = torch.tensor(ex[None, :])
            out = model(input_ids=x, labels=x)
            # the mean over len - 1 targets back to their sum
            total = total + out.loss * (length - 1)
            n += length - 1
            r_ids += ex.tolist()
            r_pos += list(range(length))
            r_lab += ex[1:].tolist() + [-100]
            lengths.append(length)
        ids.append(r_ids)
        pos.append(r_pos)
        labels.append(r_lab)
    loss = total / n
    loss.backward()
    grads = {"grad." + k: p.grad.detach().to(torch.float32).contiguous() for k, p in model.named_parameters()}
    if cfg.tie_word_embeddings:
        grads.pop("grad.lm_head.weight", None)
    os.makedirs(OUT, exist_ok=True)
    save_file(grads, os.path.join(OUT, "reference.safetensors"))
    with open(os.path.join(OUT, "examples.json"), "w") as f:
        json.dump({"B": len(ROWS), "T": T, "eos": EOS, "lengths": lengths, "input_ids": ids, "position_ids": pos,
                   "labels": labels, "n_targets": n, "loss": float(loss.detach()),
                   "torch": torch.__version__, "transformers": transformers.__version__}, f)
    print("loss %.17g over %d targets; %d gradients" % (float(loss), n, len(grads)))


if __name__ == "__main__":
    main()
