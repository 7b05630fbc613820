"""Writes tests/fixtures/smollm2/: transformers' own numbers for SmolLM2-135M-Instruct, the
real pretrained model that scripts/setup.sh installs as a GGUF file, for
tests/cli/smollm2_parity.sh to hold ztrain against (issue 40, point 6).

transformers reads the GGUF file itself (from_pretrained(dir, gguf_file=...), which
dequantizes through the gguf package): an independent path to the same weights that
`ztrain convert --from gguf` produces.  Everything here is fp32, one thread.

  tokens.npy      int32 (193,): GPL-3's preamble in SmolLM2's tokens.  3 steps x 2
                  sequences x 32 tokens, sample k = tokens[32k : 32k+33] (docs/contract.md
                  section 4); as eval data, 192 predictions in 6 whole windows of 32.
  reference.json  eval_loss: the mean next-token cross-entropy of the 192 predictions (6 windows)
                  with the pretrained weights.
                  losses, grad_norms, lrs: 3 optimizer steps of ztrain train's defaults at
                  the settings in "train" (torch.optim.AdamW, weight decay on 2-D tensors
                  only, clipping to norm 1.0, linear schedule to 0 over the 3 steps); the
                  grad norm is the pre-clip global L2 norm (summed in float64: see clip).
                  sample_names: every tensor, in sorted order, as ztrain saves them
                  (model.embed_tokens.weight once: the head is tied).
                  prompt, generated_ids, generated_text: 64 greedy tokens after the
                  prompt (no eos stop), and their decoding.
  sample_index.npy int64 (tensors, 32): flat indices drawn per tensor (numpy
                  default_rng(40)); sample_before.npy / sample_after.npy float32: the
                  weights there before and after the 3 steps.

Run with the dev venv (versions are written into reference.json):
    OMP_NUM_THREADS=1 PYTHON tools/make_smollm2_fixtures.py [GGUF]
"""
import json
import os
import sys

import numpy as np
import torch
import transformers

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "fixtures", "smollm2")
GGUF = os.environ.get("ZT_SMOLLM2_GGUF", "/usr/local/lib/ztrain/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")
T, B, STEPS, SAMPLES = 32, 2, 3, 32
TRAIN = {"block_size": T, "per_device_train_batch_size": B, "max_steps": STEPS, "learning_rate": 1e-4,
         "weight_decay": 0.1, "max_grad_norm": 1.0, "adam_beta1": 0.9, "adam_beta2": 0.999, "adam_epsilon": 1e-8}
PROMPT = "The GNU General Public License is a free, copyleft license for"


def load(path):
    """The model as transformers reads the GGUF file (the file has no output.weight: the head
    is the embedding, which transformers 4.4x's GGUF loader missed, leaving it random)."""
    d, f = os.path.split(os.path.abspath(path))
    m = transformers.AutoModelForCausalLM.from_pretrained(d, gguf_file=f, dtype=torch.float32)
    assert m.lm_head.weight is m.model.embed_tokens.weight, "the head is not tied to the embedding"
    tok = transformers.AutoTokenizer.from_pretrained(d, gguf_file=f)
    return m.eval(), tok


def make_tokens(tok):
    text = open("/usr/share/common-licenses/GPL-3", encoding="utf-8").read()
    ids = tok(text[text.index("Preamble"):], add_special_tokens=False)["input_ids"]
    return np.asarray(ids[:STEPS * B * T + 1], dtype=np.int32)


def mean_loss(model, seqs):
    logits = model(input_ids=seqs[:, :-1]).logits
    return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), seqs[:, 1:].reshape(-1))


def greedy(model, prompt, n):
    """n greedy tokens through the model's KV cache, no eos stop (generate's own loop, written
    out: torch 1.13's FSDP module, which generate imports, does not load under Python 3.11)."""
    out = model(input_ids=prompt, use_cache=True)
    ids = []
    for _ in range(n):
        ids.append(int(out.logits[0, -1].argmax()))
        out = model(input_ids=torch.tensor([[ids[-1]]]), past_key_values=out.past_key_values, use_cache=True)
    return ids


def clip(params, max_norm):
    """clip_grad_norm_ with the norm summed in float64: torch's own sums the squares in fp32,
    which on this model's 28M-element embedding gradient is 3.5e-5 (relative) off the
    float64 norm, more than the tolerance; ztrain sums in double (2e-6 off)."""
    grads = [p.grad for p in params if p.grad is not None]
    norm = float(torch.sqrt(sum((g.double() ** 2).sum() for g in grads)))
    coef = max_norm / (norm + 1e-6)
    if coef < 1.0:
        for g in grads:
            g.mul_(coef)
    return norm


def train(model, tokens):
    decay = [p for p in model.parameters() if p.dim() >= 2]
    rest = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": TRAIN["weight_decay"]},
                             {"params": rest, "weight_decay": 0.0}], lr=TRAIN["learning_rate"],
                            betas=(TRAIN["adam_beta1"], TRAIN["adam_beta2"]), eps=TRAIN["adam_epsilon"])
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda u: max(0.0, (STEPS - u) / STEPS))
    losses, norms, lrs = [], [], []
    model.train()
    for s in range(STEPS):
        seqs = torch.stack([torch.from_numpy(tokens[k * T:k * T + T + 1]).long() for k in range(s * B, s * B + B)])
        lrs.append(opt.param_groups[0]["lr"])
        loss = mean_loss(model, seqs)
        opt.zero_grad()
        loss.backward()
        norms.append(clip(model.parameters(), TRAIN["max_grad_norm"]))
        opt.step()
        sched.step()
        losses.append(loss.item())
    model.eval()
    return losses, norms, lrs


def train_sampled(gguf, tokens, dtype):
    """A fresh copy of the model (nothing left from generation's cache or modes), in dtype,
    trained 3 steps; the sampled weights before and after, as float64."""
    model, _ = load(gguf)
    model = model.to(dtype)
    params = dict(model.named_parameters())  # the tied head once, as model.embed_tokens.weight
    names = sorted(params)
    rng = np.random.default_rng(40)
    index = np.stack([rng.choice(params[n].numel(), SAMPLES, replace=params[n].numel() < SAMPLES) for n in names])
    flat = lambda: np.stack([params[n].detach().double().reshape(-1).numpy()[index[i]] for i, n in enumerate(names)])
    before = flat()
    result = train(model, tokens)
    return names, index, before, result, flat()


def main():
    torch.manual_seed(0)
    torch.set_num_threads(1)
    gguf = sys.argv[1] if len(sys.argv) > 1 else GGUF
    model, tok = load(gguf)
    tokens = make_tokens(tok)
    assert len(tokens) == STEPS * B * T + 1
    ref = {"versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                        "numpy": np.__version__}, "gguf": os.path.basename(gguf), "train": TRAIN}
    with torch.no_grad():
        windows = torch.stack([torch.from_numpy(tokens[k * T:k * T + T + 1]).long() for k in range(STEPS * B)])
        ref["eval_loss"] = float(mean_loss(model, windows))
        prompt = tok(PROMPT, add_special_tokens=False, return_tensors="pt")["input_ids"]
        gen = greedy(model, prompt, 64)
    ref.update(prompt=PROMPT, prompt_ids=prompt[0].tolist(), generated_ids=gen,
               generated_text=tok.decode(gen))
    assert tok.eos_token_id not in gen, "the greedy continuation holds eos: ztrain would stop there"
    runs = {dt: train_sampled(gguf, tokens, dt) for dt in (torch.float64, torch.float32)}
    names, index, before, (ref["losses"], ref["grad_norms"], ref["lrs"]), after = runs[torch.float64]
    f32 = runs[torch.float32]
    rel = lambda a, b: float(np.max(np.abs(np.subtract(a, b)) / np.abs(b)))
    ref["fp32_against_fp64"] = {"losses": rel(f32[3][0], ref["losses"]), "grad_norms": rel(f32[3][1], ref["grad_norms"]),
                                "weights_max_abs": float(np.max(np.abs(f32[4] - after)))}
    ref["sample_names"] = names
    os.makedirs(OUT, exist_ok=True)
    np.save(os.path.join(OUT, "tokens.npy"), tokens)
    np.save(os.path.join(OUT, "sample_index.npy"), index.astype(np.int64))
    np.save(os.path.join(OUT, "sample_before.npy"), before.astype(np.float32))
    np.save(os.path.join(OUT, "sample_after.npy"), after)
    with open(os.path.join(OUT, "reference.json"), "w") as f:
        json.dump(ref, f, indent=1)
        f.write("\n")
    print(json.dumps({k: ref[k] for k in ("eval_loss", "losses", "grad_norms", "lrs", "fp32_against_fp64")}, indent=1))
    print("update size: median |after - before| %.3g" % float(np.median(np.abs(after - before))))


if __name__ == "__main__":
    main()
