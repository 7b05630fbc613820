#!/usr/bin/env python3
"""tests/gpu/sdpa_bench.py — PyTorch's fused attention at the shapes tests/gpu/kernels_check
--bench times ztrain's attention_forward_act16 / attention_backward_act16 at, for
tests/gpu/check.sh to set beside them in the same call: the external reference for the
fast attention (docs/gpu.md, "What still waits for a GPU").

For each shape (--shapes NH:NKV:HD,...; batch 1, T --T, causal, bf16 q, k, v in PyTorch's
(B, heads, T, hd) layout) and each of SDPA's flash and cuDNN backends (forced one at a
time with torch.nn.attention.sdpa_kernel): the forward alone, and the backward alone
(the forward's graph kept, autograd.grad of out with a fixed dout), each the median of
7 calls after 2 warm-ups, timed by CUDA events.  k and v are repeated to the query heads
before the timing (the same FLOPs as grouped-query attention; not every backend takes
GQA).  RoPE is not in these times: the model applies it to q and k before SDPA, while
ztrain's _act16 entries apply it as the tiles are staged, inside their time.

Prints one JSON line: for each shape and backend, hd{HD}_{flash|cudnn}_{fwd|bwd}_ms, or
hd{HD}_{backend}_error with the reason that backend refused the shape."""
import argparse, json

ap = argparse.ArgumentParser()
ap.add_argument("--T", type=int, default=2048)
ap.add_argument("--shapes", default="32:8:64,16:8:128")
a = ap.parse_args()

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
import torch.nn.functional as F

dev = torch.device("cuda")
backends = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION}


def median_ms(fn, reps=7, warm=2):
    for _ in range(warm):
        fn()
    times = []
    for _ in range(reps):
        t0, t1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        t0.record()
        fn()
        t1.record()
        torch.cuda.synchronize()
        times.append(t0.elapsed_time(t1))
    return sorted(times)[reps // 2]


out = {"torch": torch.__version__, "T": a.T, "device": torch.cuda.get_device_name()}
g = torch.Generator(device=dev).manual_seed(1)
for shape in a.shapes.split(","):
    nh, nkv, hd = (int(x) for x in shape.split(":"))
    q = torch.randn(1, nh, a.T, hd, device=dev, dtype=torch.bfloat16, generator=g, requires_grad=True)
    k = torch.randn(1, nkv, a.T, hd, device=dev, dtype=torch.bfloat16, generator=g)
    v = torch.randn(1, nkv, a.T, hd, device=dev, dtype=torch.bfloat16, generator=g)
    k = k.repeat_interleave(nh // nkv, dim=1).contiguous().requires_grad_(True)
    v = v.repeat_interleave(nh // nkv, dim=1).contiguous().requires_grad_(True)
    dout = torch.randn(1, nh, a.T, hd, device=dev, dtype=torch.bfloat16, generator=g)
    for name, be in backends.items():
        key = f"hd{hd}_{name}"
        try:
            with sdpa_kernel([be]):
                fwd = median_ms(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True))
                o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
                bwd = median_ms(lambda: torch.autograd.grad(o, (q, k, v), dout, retain_graph=True))
            out[key + "_fwd_ms"], out[key + "_bwd_ms"] = fwd, bwd
        except RuntimeError as e:  # the backend refused the shape or is not in this build
            out[key + "_error"] = str(e).splitlines()[0][:200]
print(json.dumps(out))
