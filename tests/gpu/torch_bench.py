#!/usr/bin/env python3
"""tests/gpu/torch_bench.py — PyTorch's training step on the GPU, for tests/gpu/check.sh to
set beside ztrain's: the same model directory (the weights ztrain's init-model wrote,
loaded by Hugging Face's LlamaForCausalLM), the same token data (the file's bytes as
ids, as ztrain reads a .txt without a tokenizer: consecutive windows of T + 1), the same
T, batch, learning rate and precision plan as the ztrain run it is compared with:

  fp32 parameters and optimizer state, autocast to bf16 for the compute (Accelerate's
  --mixed_precision bf16, which ztrain's "--torch_dtype bfloat16 --mixed_precision bf16"
  plan matches: bf16 compute, fp32 master), SDPA attention, fused AdamW, and the
  gradient clipped to a global norm of --max_grad_norm (1.0, the Trainer's default and
  ztrain's: the norm's reduction and the clip are work both sides do).

--compile wraps the model in torch.compile; its first steps (the compilation) are the
warm-up.  Prints one JSON line: tokens/s (mean over the timed steps, after a device
synchronize), s/step, the allocator's peak (GiB), the first and last loss."""
import argparse, json, sys, time

ap = argparse.ArgumentParser()
ap.add_argument("--model", required=True)
ap.add_argument("--data", required=True)
ap.add_argument("--T", type=int, default=2048)
ap.add_argument("--batch", type=int, default=1)
ap.add_argument("--steps", type=int, default=20)
ap.add_argument("--warmup", type=int, default=5)
ap.add_argument("--lr", type=float, default=3e-4)
ap.add_argument("--max_grad_norm", type=float, default=1.0)
ap.add_argument("--compile", action="store_true")
a = ap.parse_args()

import torch
from transformers import LlamaForCausalLM

dev = torch.device("cuda")
torch.backends.cuda.matmul.allow_tf32 = False  # ztrain's fp32 is fp32; the products run in bf16 anyway
model = LlamaForCausalLM.from_pretrained(a.model, torch_dtype=torch.float32, attn_implementation="sdpa").to(dev)
model.config.use_cache = False
model.train()
opt = torch.optim.AdamW(model.parameters(), lr=a.lr, weight_decay=0.0, fused=True)
step_model = torch.compile(model) if a.compile else model

raw = open(a.data, "rb").read()
ids = torch.tensor(list(raw), dtype=torch.long)
win = a.T + 1
nwin = len(ids) // win
if nwin < a.batch:
    sys.exit(f"torch_bench.py: {a.data} holds {nwin} windows of {win}, fewer than a batch of {a.batch}")

def batch(i):
    rows = [ids[((i * a.batch + b) % nwin) * win:((i * a.batch + b) % nwin) * win + win] for b in range(a.batch)]
    x = torch.stack(rows).to(dev, non_blocking=True)
    return x[:, :-1], x[:, 1:]

def step(i):
    x, y = batch(i)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        logits = step_model(input_ids=x).logits
    loss = torch.nn.functional.cross_entropy(logits.float().view(-1, logits.size(-1)), y.reshape(-1))
    loss.backward()
    if a.max_grad_norm > 0:
        torch.nn.utils.clip_grad_norm_(model.parameters(), a.max_grad_norm)
    opt.step()
    opt.zero_grad(set_to_none=True)
    return loss

losses = []
for i in range(a.warmup):
    losses.append(step(i).item())
torch.cuda.synchronize()
torch.cuda.reset_peak_memory_stats()
t0 = time.perf_counter()
for i in range(a.warmup, a.warmup + a.steps):
    loss = step(i)
torch.cuda.synchronize()
dt = time.perf_counter() - t0
losses.append(loss.item())
print(json.dumps({
    "mode": "compile" if a.compile else "eager", "torch": torch.__version__,
    "tokens_per_sec": a.steps * a.batch * a.T / dt, "step_s": dt / a.steps,
    "peak_alloc_gib": torch.cuda.max_memory_allocated() / 2**30,
    "peak_reserved_gib": torch.cuda.max_memory_reserved() / 2**30,
    "loss_first": losses[0], "loss_last": losses[-1]}))
