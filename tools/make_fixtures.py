"""Write the small Llama parity fixtures under tests/fixtures/<name>/.

Each fixture is a tiny LlamaForCausalLM (config.json + model.safetensors), a token
stream (tokens.npy), training arguments (train_args.json) and reference results
computed here with a minimal re-implementation of Hugging Face's Llama modeling code
in plain torch (reference.safetensors): logits, loss and gradients of batch 0, three
AdamW steps with clipping and a linear warmup schedule, and the same in ztrain's bf16
compute mode (bf16 matmul inputs, fp32 accumulation and everything else in fp32).

Run with Debian's interpreter (torch 1.13 + numpy; no transformers/safetensors):
    /usr/bin/python3 tools/make_fixtures.py
The output is deterministic: running it twice gives byte-identical files.
"""

import json
import math
import os
import struct
import sys

import numpy as np
import torch
import torch.nn.functional as F

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT_DIR = os.path.join(ROOT, "tests", "fixtures")
TEXT_PATH = "/usr/share/common-licenses/GPL-3"
N_TOKENS = 1024
SEED = 1234

FIXTURES = {
    "gqa_tied": dict(
        hidden_size=64, intermediate_size=172, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, vocab_size=256,
        tie_word_embeddings=True, rope_theta=10000.0, rms_norm_eps=1e-5,
        initializer_range=0.02),
    "untied_odd": dict(
        hidden_size=72, intermediate_size=200, num_hidden_layers=3,
        num_attention_heads=6, num_key_value_heads=3, head_dim=16, vocab_size=300,
        tie_word_embeddings=False, rope_theta=500000.0, rms_norm_eps=1e-6,
        initializer_range=0.05),
    # head_dim 32: the size the bf16-operand attention (src/kernels/attention16.c) takes,
    # so the bf16 parity test runs it against autocast (the others fall back to fp32 tiles)
    "gqa_hd32": dict(
        hidden_size=64, intermediate_size=160, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=32, vocab_size=256,
        tie_word_embeddings=False, rope_theta=10000.0, rms_norm_eps=1e-5,
        initializer_range=0.02),
}

TRAIN_ARGS = {
    "block_size": 16, "batch_size": 2, "grad_accum": 1, "steps": 3, "max_steps": 6,
    "learning_rate": 1e-3, "weight_decay": 0.1, "adam_beta1": 0.9, "adam_beta2": 0.95,
    "adam_epsilon": 1e-8, "max_grad_norm": 3.0, "lr_scheduler_type": "linear",
    "warmup_steps": 2,
}


# ----------------------------------------------------------------------------- config

def hf_config(c):
    """The config.json dict (Hugging Face field names, fixed key order)."""
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": c["hidden_size"],
        "intermediate_size": c["intermediate_size"],
        "num_hidden_layers": c["num_hidden_layers"],
        "num_attention_heads": c["num_attention_heads"],
        "num_key_value_heads": c["num_key_value_heads"],
        "head_dim": c["head_dim"],
        "vocab_size": c["vocab_size"],
        "max_position_embeddings": 128,
        "rms_norm_eps": c["rms_norm_eps"],
        "rope_theta": c["rope_theta"],
        "tie_word_embeddings": c["tie_word_embeddings"],
        "hidden_act": "silu",
        "initializer_range": c["initializer_range"],
        "torch_dtype": "float32",
    }


def param_shapes(c):
    """(HF name, shape) for every parameter, in LlamaForCausalLM.named_parameters() order."""
    h, i, hd = c["hidden_size"], c["intermediate_size"], c["head_dim"]
    nh, nkv, v = c["num_attention_heads"], c["num_key_value_heads"], c["vocab_size"]
    out = [("model.embed_tokens.weight", (v, h))]
    for n in range(c["num_hidden_layers"]):
        p = "model.layers.%d." % n
        out += [
            (p + "self_attn.q_proj.weight", (nh * hd, h)),
            (p + "self_attn.k_proj.weight", (nkv * hd, h)),
            (p + "self_attn.v_proj.weight", (nkv * hd, h)),
            (p + "self_attn.o_proj.weight", (h, nh * hd)),
            (p + "mlp.gate_proj.weight", (i, h)),
            (p + "mlp.up_proj.weight", (i, h)),
            (p + "mlp.down_proj.weight", (h, i)),
            (p + "input_layernorm.weight", (h,)),
            (p + "post_attention_layernorm.weight", (h,)),
        ]
    out.append(("model.norm.weight", (h,)))
    if not c["tie_word_embeddings"]:
        out.append(("lm_head.weight", (v, h)))
    return out


def init_params(c, seed):
    """Matrices ~ N(0, initializer_range); norm weights 1 + 0.1*N(0,1). fp32, fixed seed."""
    g = torch.Generator().manual_seed(seed)
    params = {}
    for name, shape in param_shapes(c):
        if len(shape) == 2:
            t = torch.empty(shape).normal_(0.0, c["initializer_range"], generator=g)
        else:
            t = 1.0 + 0.1 * torch.empty(shape).normal_(0.0, 1.0, generator=g)
        params[name] = t
    return params


# ----------------------------------------------------------------------------- data

def make_tokens(name):
    """English text bytes (from the GPL-3 preamble on); untied_odd mixes in ids >= 256."""
    with open(TEXT_PATH, "rb") as f:
        text = f.read()
    start = text.index(b"Preamble")
    b = np.frombuffer(text[start:start + N_TOKENS], dtype=np.uint8).astype(np.int32)
    if name == "untied_odd":
        # Odd positions become (byte + 7 * previous byte) % 300, so ids up to 299
        # appear in every batch while even positions keep the text.
        b = b.copy()
        b[1::2] = (b[1::2] + 7 * b[0:-1:2]) % 300
    return b


def batch(tokens, step, B, T):
    """Step s uses samples k = s*B + j; sample k is tokens[k*T : k*T+T+1] (contract §4)."""
    rows = [tokens[k * T:k * T + T + 1] for k in range(step * B, step * B + B)]
    x = torch.from_numpy(np.stack(rows).astype(np.int64))
    return x[:, :T].contiguous(), x[:, 1:].contiguous()


# ----------------------------------------------------------------------------- model

def bf16_round(t):
    return t.bfloat16().to(t.dtype)


class Bf16Linear(torch.autograd.Function):
    """y = x W^T as ztrain's bf16 compute does it: both inputs rounded to bf16, fp32
    accumulation, fp32 output.  The backward products (dx = dy W, dW = dy^T x) do the same,
    so dy is rounded to bf16 too.  Products of bf16 values are exact in fp32, so an fp32
    matmul of the rounded values is a bf16-input / fp32-accumulate product."""

    @staticmethod
    def forward(ctx, x, w):
        xr, wr = bf16_round(x), bf16_round(w)
        ctx.save_for_backward(xr, wr)
        return F.linear(xr, wr)

    @staticmethod
    def backward(ctx, dy):
        xr, wr = ctx.saved_tensors
        dyr = bf16_round(dy)
        dx = dyr.matmul(wr)
        dw = dyr.reshape(-1, dyr.shape[-1]).t().matmul(xr.reshape(-1, xr.shape[-1]))
        return dx, dw


def rms_norm(x, weight, eps):
    """LlamaRMSNorm (the upcast is to the compute dtype: fp32, or fp64 for the check)."""
    input_dtype = x.dtype
    x = x.to(torch.float64 if input_dtype == torch.float64 else torch.float32)
    var = x.pow(2).mean(-1, keepdim=True)
    x = x * torch.rsqrt(var + eps)
    return weight * x.to(input_dtype)


def rope_cos_sin(c, T, dtype):
    """LlamaRotaryEmbedding (default rope, no scaling); fp32, or fp64 for the check."""
    hd = c["head_dim"]
    fdt = torch.float64 if dtype == torch.float64 else torch.float32
    inv_freq = 1.0 / (c["rope_theta"] ** (torch.arange(0, hd, 2, dtype=torch.int64).to(fdt) / hd))
    freqs = torch.arange(T).to(fdt)[:, None] * inv_freq[None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos().to(dtype), emb.sin().to(dtype)


def rotate_half(x):
    x1, x2 = x[..., :x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def repeat_kv(x, n_rep):
    """(B, nkv, T, hd) -> (B, nkv*n_rep, T, hd); head h uses kv head h // n_rep."""
    if n_rep == 1:
        return x
    B, nkv, T, hd = x.shape
    return x[:, :, None, :, :].expand(B, nkv, n_rep, T, hd).reshape(B, nkv * n_rep, T, hd)


def attention(c, p, pre, x, cos, sin, linear):
    B, T, _ = x.shape
    nh, nkv, hd = c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]
    q = linear(x, p[pre + "q_proj.weight"]).view(B, T, nh, hd).transpose(1, 2)
    k = linear(x, p[pre + "k_proj.weight"]).view(B, T, nkv, hd).transpose(1, 2)
    v = linear(x, p[pre + "v_proj.weight"]).view(B, T, nkv, hd).transpose(1, 2)
    q = q * cos + rotate_half(q) * sin
    k = k * cos + rotate_half(k) * sin
    k, v = repeat_kv(k, nh // nkv), repeat_kv(v, nh // nkv)
    scores = torch.matmul(q, k.transpose(2, 3)) * hd ** -0.5
    mask = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)
    scores = scores.masked_fill(mask, float("-inf"))
    sm_dtype = torch.float64 if q.dtype == torch.float64 else torch.float32
    probs = F.softmax(scores, dim=-1, dtype=sm_dtype).to(q.dtype)
    out = torch.matmul(probs, v).transpose(1, 2).reshape(B, T, nh * hd)
    return linear(out, p[pre + "o_proj.weight"])


def mlp(p, pre, x, linear):
    gate = linear(x, p[pre + "gate_proj.weight"])
    up = linear(x, p[pre + "up_proj.weight"])
    return linear(F.silu(gate) * up, p[pre + "down_proj.weight"])


def forward(c, p, ids, linear):
    """LlamaForCausalLM logits (B, T, V) for input ids (B, T)."""
    eps = c["rms_norm_eps"]
    x = F.embedding(ids, p["model.embed_tokens.weight"])
    cos, sin = rope_cos_sin(c, ids.shape[1], x.dtype)
    for n in range(c["num_hidden_layers"]):
        pre = "model.layers.%d." % n
        h = x + attention(c, p, pre + "self_attn.",
                          rms_norm(x, p[pre + "input_layernorm.weight"], eps), cos, sin, linear)
        x = h + mlp(p, pre + "mlp.",
                    rms_norm(h, p[pre + "post_attention_layernorm.weight"], eps), linear)
    x = rms_norm(x, p["model.norm.weight"], eps)
    head = p["model.embed_tokens.weight"] if c["tie_word_embeddings"] else p["lm_head.weight"]
    return linear(x, head)


def loss_fn(logits, targets):
    """Mean token cross-entropy (HF upcasts logits to float; they are fp32/fp64 here)."""
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


LINEARS = {"fp": F.linear, "bf16": Bf16Linear.apply}


# ----------------------------------------------------------------------------- reference runs

def leaf_params(params, dtype):
    return {k: v.detach().clone().to(dtype).requires_grad_(True) for k, v in params.items()}


def forward_backward(c, params, ids, targets, mode, dtype):
    """Logits, loss and {name: grad} of one batch from fresh leaf copies of params."""
    p = leaf_params(params, dtype)
    logits = forward(c, p, ids, LINEARS[mode])
    loss = loss_fn(logits, targets)
    loss.backward()
    return logits.detach(), loss.detach(), {k: v.grad.detach() for k, v in p.items()}


def lr_lambda(args):
    w, S = args["warmup_steps"], args["max_steps"]

    def factor(u):
        if u < w:
            return u / max(1, w)
        return max(0.0, (S - u) / max(1, S - w))
    return factor


def train(c, params, tokens, args, mode, dtype=torch.float32):
    """args['steps'] AdamW steps; returns losses, pre-clip grad norms, lrs, final params."""
    p = leaf_params(params, dtype)
    decay = [v for v in p.values() if v.dim() == 2]
    no_decay = [v for v in p.values() if v.dim() != 2]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": args["weight_decay"]},
         {"params": no_decay, "weight_decay": 0.0}],
        lr=args["learning_rate"], betas=(args["adam_beta1"], args["adam_beta2"]),
        eps=args["adam_epsilon"], foreach=False)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_lambda(args))
    losses, norms, lrs = [], [], []
    for s in range(args["steps"]):
        ids, targets = batch(tokens, s, args["batch_size"], args["block_size"])
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(forward(c, p, ids, LINEARS[mode]), targets)
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(list(p.values()), args["max_grad_norm"])
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
        losses.append(loss.item())
        norms.append(norm.item())
    return losses, norms, lrs, {k: v.detach() for k, v in p.items()}


def rel_err(a, ref):
    """max |a - ref| / max |ref| (normwise; elementwise ratios are noisy near zero)."""
    a, ref = a.double(), ref.double()
    return ((a - ref).abs().max() / ref.abs().max().clamp_min(1e-300)).item()


def report_fp64(name, c, params, ids, targets, logits, grads, step3, tokens, args):
    logits64, loss64, grads64 = forward_backward(c, params, ids, targets, "fp", torch.float64)
    g_err = {k: rel_err(grads[k], grads64[k]) for k in grads}
    worst = max(g_err, key=g_err.get)
    print("  fp32 vs fp64: logits %.2e, loss %.2e, grads worst %.2e (%s), median %.2e"
          % (rel_err(logits, logits64), rel_err(loss64.float(), loss64),
             g_err[worst], worst, float(np.median(list(g_err.values())))))
    _, _, _, p64 = train(c, params, tokens, args, "fp", torch.float64)
    s_err = {k: rel_err(step3[k], p64[k]) for k in step3}
    worst = max(s_err, key=s_err.get)
    print("  fp32 vs fp64: step3 params worst %.2e (%s)" % (s_err[worst], worst))


# ----------------------------------------------------------------------------- writers

def write_safetensors(path, tensors, metadata=None):
    """Minimal safetensors writer: F32 tensors, data in sorted-name order, header padded
    with spaces to a multiple of 8 bytes (as the reference implementation does)."""
    header, blobs, off = {}, [], 0
    if metadata:
        header["__metadata__"] = metadata
    for name in sorted(tensors):
        t = tensors[name].detach().to(torch.float32).contiguous()
        data = t.numpy().astype("<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(t.shape),
                        "data_offsets": [off, off + len(data)]}
        blobs.append(data)
        off += len(data)
    hjson = json.dumps(header, separators=(",", ":")).encode("utf-8")
    hjson += b" " * (-len(hjson) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hjson)))
        f.write(hjson)
        for b in blobs:
            f.write(b)


def write_json(path, obj):
    with open(path, "w") as f:
        json.dump(obj, f, indent=2)
        f.write("\n")


def vec(values):
    return torch.tensor(values, dtype=torch.float64).float()


# ----------------------------------------------------------------------------- main

def make_fixture(name, c):
    print("%s:" % name)
    d = os.path.join(OUT_DIR, name)
    os.makedirs(d, exist_ok=True)
    args = dict(TRAIN_ARGS)
    params = init_params(c, SEED)
    tokens = make_tokens(name)
    needed = args["max_steps"] * args["batch_size"] * args["block_size"] + 1
    assert len(tokens) >= needed and tokens.max() < c["vocab_size"]
    ids, targets = batch(tokens, 0, args["batch_size"], args["block_size"])
    if name == "untied_odd":
        assert int(ids.max()) >= 256 and int(targets.max()) >= 256

    ref = {}
    logits, loss, grads = forward_backward(c, params, ids, targets, "fp", torch.float32)
    ref["logits"], ref["loss"] = logits, loss.reshape(1)
    ref.update({"grad." + k: g for k, g in grads.items()})
    losses, norms, lrs, step3 = train(c, params, tokens, args, "fp")
    ref["losses"], ref["grad_norms"], ref["lrs"] = vec(losses), vec(norms), vec(lrs)
    ref.update({"step3." + k: v for k, v in step3.items()})
    clipped = sum(n > args["max_grad_norm"] for n in norms)
    print("  loss %.6f; losses %s" % (loss.item(), ["%.6f" % x for x in losses]))
    print("  pre-clip grad norms %s (max_grad_norm %g: clipped in %d of %d steps); lrs %s"
          % (["%.6f" % x for x in norms], args["max_grad_norm"], clipped, len(norms), lrs))
    assert clipped >= 2, "max_grad_norm must clip in at least 2 of the 3 steps"

    master = {k: bf16_round(v) for k, v in params.items()}   # weights loaded in bf16
    logits_b, loss_b, grads_b = forward_backward(c, master, ids, targets, "bf16", torch.float32)
    ref["bf16.logits"], ref["bf16.loss"] = logits_b, loss_b.reshape(1)
    ref.update({"bf16.grad." + k: g for k, g in grads_b.items()})
    losses_b, norms_b, _, _ = train(c, master, tokens, args, "bf16")
    ref["bf16.losses"], ref["bf16.grad_norms"] = vec(losses_b), vec(norms_b)
    print("  bf16: loss %.6f; losses %s; grad norms %s"
          % (loss_b.item(), ["%.6f" % x for x in losses_b], ["%.6f" % x for x in norms_b]))

    report_fp64(name, c, params, ids, targets, logits, grads, step3, tokens, args)

    write_json(os.path.join(d, "config.json"), hf_config(c))
    write_json(os.path.join(d, "train_args.json"), args)
    np.save(os.path.join(d, "tokens.npy"), tokens.astype(np.int32))
    write_safetensors(os.path.join(d, "model.safetensors"), params, {"format": "pt"})
    write_safetensors(os.path.join(d, "reference.safetensors"), ref)
    total = sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d))
    print("  wrote %s (%d bytes)" % (d, total))


def main():
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    print("torch %s, numpy %s" % (torch.__version__, np.__version__))
    for name, c in FIXTURES.items():
        make_fixture(name, c)


if __name__ == "__main__":
    sys.exit(main())
