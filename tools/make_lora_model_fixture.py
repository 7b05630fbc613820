"""Write tests/fixtures/lora/model.safetensors: a whole model's loss and adapter gradients
with LoRA adapters, as PEFT computes them on transformers' model, which tests/test_lora.c
holds ztrain's model pass (model/llama.h with zt_model_set_lora) against.

For each case (a fixture model of tests/fixtures, a rank, alpha, rsLoRA and targets),
transformers' AutoModelForCausalLM loads the fixture's model.safetensors (fp32, eager
attention), peft.get_peft_model wraps it, and every A and B is set from a seeded
generator (B non-zero, unlike PEFT's initial zeros, so that every gradient is
exercised; both sides read the same values from this file).  Batch 0 of the fixture's
tokens.npy (B = 2 rows of T = 16: sample k = tokens[kT : kT + T + 1], inputs the first T,
targets the last T) gives the mean token cross-entropy and its gradients:

  <case>.<name>        each adapter tensor, under the name PEFT saves it with
                       (get_peft_model_state_dict: base_model.model....lora_A.weight)
  <case>.grad.<name>   its gradient
  <case>.loss          the loss [1]
and then three optimizer steps as Trainer takes them over the adapters (batch s = samples
sB .. sB + B - 1; torch.optim.AdamW at lr 1e-3, weight decay 0.1 on every adapter, betas
0.9 / 0.95, eps 1e-8; clip_grad_norm_ at 0.5, active in every step):

  <case>.losses, <case>.grad_norms   (3,) each step's loss and pre-clip global norm
  <case>.step3.<name>                each adapter tensor after the three steps
  <case>.step3_f64.<name>            the same steps computed in float64 (F64), from the
                                     same fp32 start: fp32's own distance from them is
                                     the noise any fp32 implementation carries
and the metadata key "cases": "name model r alpha rslora targets" per case, ";" between
cases (targets comma-separated).  The script asserts that no base weight got a gradient,
and prints how far this fp32 reference is from the same computation in float64 (the
noise the test's tolerance must admit): loss 2e-8 and 8e-8 relative, the gradients 1.4e-6
and 1.3e-6 of each tensor's largest magnitude (worst over the tensors); and the same for
the three steps.

It also writes, for tests/cli/lora_peft.sh (the same steps through `ztrain train
--adapter`), one directory a case of CLI_CASES under tests/fixtures/lora/cli/<case>/:

  adapter/              the seeded adapters as PEFT saves them (save_pretrained:
                        adapter_model.safetensors and adapter_config.json; its README
                        left out), which both sides start from
  expected.safetensors  losses, grad_norms (3,) and step3.<name> as above (the float64 run's
                        distance printed, not stored), and the
                        metadata "model", "T" and "max_norm"
  ill.<name>            1 where the element is ill-conditioned for Adam (below), else 0
Adam's update m/(sqrt(v) + eps) moves by lr eps / (sqrt(v) + eps)^2 per unit of gradient
at the first step, up to lr / eps = 1e5: an element whose gradients stay within a few eps of
zero (sqrt(v) below ILL = 1e-5 at some step; a few in each case, as some inputs barely
reach some adapter rows) turns any implementation's last-bit rounding of g (1e-7 of the
largest gradient is ordinary fp32 noise) into a visibly different update.  The first draw
of the Llama case has one with a gradient of 1.8e-7 after clipping, where torch's fp32
lands 2e-7 of the tensor's largest from float64 and ztrain 7e-6.  The test holds those
elements to a looser bound.
The Mistral case uses rows of T = 64, longer than mistral_window's window of 50, so that
the window masks keys (at T = 16 the case would be Llama's again).

And tests/fixtures/lora/merge/qwen2.safetensors: PEFT's merge_and_unload() of the qwen2
case's adapter directory into the fp32 base, the tensors it changed (qwen2_bf16: the same
into the base rounded to bf16, merged in bf16 as PEFT does) (tests/cli/lora_merge.sh
holds `ztrain merge-adapter` against them).

Dev-time only (the test reads the stored file):
    OMP_NUM_THREADS=1 /work/devvenv/bin/python tools/make_lora_model_fixture.py
Generated with torch 2.15, transformers 5.25, peft 0.21.2, one thread, deterministic
algorithms.  Deterministic in every value; the bytes of the files under lora/cli/ may not
be, as PEFT keeps target_modules as a Python set (its order in adapter_config.json, and
the order of the tensors in the files, follow the string hash seed: PYTHONHASHSEED=0 fixes it).
"""
import os

import numpy as np
import torch
from peft import LoraConfig, PeftModel, get_peft_model, get_peft_model_state_dict
from safetensors.torch import save_file
from transformers import AutoModelForCausalLM

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
FIX = os.path.join(ROOT, "tests", "fixtures")
OUT = os.path.join(FIX, "lora", "model.safetensors")
B, T = 2, 16
CLI = os.path.join(FIX, "lora", "cli")
LR, WD, BETAS, EPS, MAX_NORM = 1e-3, 0.1, (0.9, 0.95), 1e-8, 0.5
ILL = 1e-5  # an Adam denominator below this, at any step, marks an element ill-conditioned

CASES = [
    # name, model, r, alpha, rslora, targets
    ("llama", "gqa_tied", 4, 6, False, ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]),
    ("qwen2", "qwen2_bias", 2, 3, True, ["q_proj", "v_proj", "down_proj"]),
]

CLI_CASES = [
    # name, model, r, alpha, rslora, targets, T, max_norm (below each step's norm: clipping active)
    ("llama", "gqa_tied", 4, 6, False, ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"], 16,
     MAX_NORM),
    ("qwen2", "qwen2_bias", 2, 3, True, ["q_proj", "v_proj", "down_proj"], 16, MAX_NORM),
    ("mistral", "mistral_window", 4, 8, False, ["q_proj", "k_proj", "v_proj", "o_proj"], 64, 0.4),
]


def batch_loss(pm, tok, s, t=T):
    """Batch s's mean token cross-entropy (rows of t tokens), after its backward."""
    rows = torch.tensor(np.stack([tok[k * t:k * t + t + 1] for k in range(s * B, s * B + B)]))
    logits = pm(input_ids=rows[:, :t]).logits
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), rows[:, 1:].reshape(-1))
    loss.backward()
    return loss


def run(model, r, alpha, rslora, targets, dtype, adapters, t=T):
    """PEFT's model in dtype, its adapters from adapters(name, shape), batch 0's loss
    after its backward, and the token stream."""
    base = AutoModelForCausalLM.from_pretrained(os.path.join(FIX, model), dtype=dtype, attn_implementation="eager")
    pm = get_peft_model(base, LoraConfig(r=r, lora_alpha=alpha, lora_dropout=0.0, target_modules=targets,
                                         use_rslora=rslora, bias="none", task_type="CAUSAL_LM"))
    with torch.no_grad():
        for n, p in sorted(pm.named_parameters()):
            if "lora_" in n:
                p.copy_(adapters(n, p.shape))
    tok = np.load(os.path.join(FIX, model, "tokens.npy")).astype(np.int64)
    return pm, batch_loss(pm, tok, 0, t), tok


def steps(pm, tok, loss0, t=T, max_norm=MAX_NORM, loss_fn=batch_loss):
    """Three AdamW steps over the adapters, batch 0's backward done: (losses, norms, each
    trainable parameter's smallest bias-corrected sqrt(v) over the steps, element-wise);
    loss_fn(pm, tok, s, t) is each later batch's loss after its backward."""
    params = [p for p in pm.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=LR, betas=BETAS, eps=EPS, weight_decay=WD)
    losses, norms, least = [], [], [torch.full_like(p, float("inf")) for p in params]
    for s in range(3):
        loss = loss0 if s == 0 else loss_fn(pm, tok, s, t)
        norms.append(torch.nn.utils.clip_grad_norm_(params, max_norm).item())
        assert norms[-1] > max_norm, "clipping must be active: %g" % norms[-1]
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
        for lo, p in zip(least, params):
            torch.minimum(lo, (opt.state[p]["exp_avg_sq"] / (1 - BETAS[1] ** (s + 1))).sqrt(), out=lo)
    return losses, norms, least


def case(name, model, r, alpha, rslora, targets, gen, tensors, meta):
    pm, loss, tok = run(model, r, alpha, rslora, targets, torch.float32,
                        lambda n, shape: torch.randn(shape, generator=gen) * 0.1)
    for n, p in pm.named_parameters():
        assert ("lora_" in n) == (p.grad is not None), n
    grads = {n.replace(".default", ""): p.grad for n, p in pm.named_parameters() if p.grad is not None}
    for n, v in get_peft_model_state_dict(pm).items():
        tensors[f"{name}.{n}"] = v.detach().clone().contiguous()
        tensors[f"{name}.grad.{n}"] = grads[n].detach().clone().contiguous()
    tensors[f"{name}.loss"] = loss.detach().reshape(1).clone()
    seeded = {n: p.detach().double() for n, p in pm.named_parameters() if "lora_" in n}
    pm64, loss64, _ = run(model, r, alpha, rslora, targets, torch.float64, lambda n, shape: seeded[n])
    worst = max(((p.grad - grads[n.replace(".default", "")].double()).abs().max() / p.grad.abs().max()).item()
                for n, p in pm64.named_parameters() if p.grad is not None)
    print("%s: fp32 against float64: loss %.2g relative, gradients %.2g of the largest"
          % (name, abs(loss.item() - loss64.item()) / abs(loss64.item()), worst))
    losses, norms, _ = steps(pm, tok, loss)
    losses64, norms64, _ = steps(pm64, tok, loss64)
    tensors[f"{name}.losses"] = torch.tensor(losses, dtype=torch.float32)
    tensors[f"{name}.grad_norms"] = torch.tensor(norms, dtype=torch.float32)
    after = get_peft_model_state_dict(pm)
    after64 = get_peft_model_state_dict(pm64)
    for n, v in after.items():
        tensors[f"{name}.step3.{n}"] = v.detach().clone().contiguous()
        tensors[f"{name}.step3_f64.{n}"] = after64[n].detach().clone().contiguous()
    moved = max((after64[n] - seeded[n.replace("weight", "default.weight")]).abs().max().item() for n in after)
    print("%s: 3 steps, fp32 against float64: losses %.2g, norms %.2g relative; adapters %.2g absolute "
          "(the largest change %.2g)" % (name, max(abs(a - b) / b for a, b in zip(losses, losses64)),
                                         max(abs(a - b) / b for a, b in zip(norms, norms64)),
                                         max((after[n].double() - after64[n]).abs().max().item() for n in after),
                                         moved))
    meta.append("%s %s %d %d %d %s" % (name, model, r, alpha, int(rslora), ",".join(targets)))


def cli_case(name, model, r, alpha, rslora, targets, t, max_norm, gen):
    """The seeded adapters as PEFT saves them, and PEFT's three steps from them."""
    pm, loss, tok = run(model, r, alpha, rslora, targets, torch.float32,
                        lambda n, shape: torch.randn(shape, generator=gen) * 0.1, t)
    out = os.path.join(CLI, name)
    pm.save_pretrained(os.path.join(out, "adapter"))
    os.remove(os.path.join(out, "adapter", "README.md"))
    seeded = {n: p.detach().double() for n, p in pm.named_parameters() if "lora_" in n}
    pm64, loss64, _ = run(model, r, alpha, rslora, targets, torch.float64, lambda n, shape: seeded[n], t)
    names = [n.replace(".default", "") for n, p in pm.named_parameters() if p.requires_grad]
    losses, norms, least = steps(pm, tok, loss, t, max_norm)
    least = dict(zip(names, least))
    steps(pm64, tok, loss64, t, max_norm)
    tensors = {"losses": torch.tensor(losses, dtype=torch.float32),
               "grad_norms": torch.tensor(norms, dtype=torch.float32)}
    after64 = get_peft_model_state_dict(pm64)
    worst = 0.0
    for n, v in get_peft_model_state_dict(pm).items():
        tensors["step3." + n] = v.detach().clone().contiguous()
        tensors["ill." + n] = (least[n] < ILL).float().contiguous()
        worst = max(worst, ((v.double() - after64[n]).abs().max() / after64[n].abs().max()).item())
    print("%s (cli): 3 steps, fp32 adapters against float64: %.2g of each tensor's largest; %d of %d elements "
          "ill-conditioned" % (name, worst, sum(int(v.sum()) for k, v in tensors.items() if k.startswith("ill.")),
                               sum(v.numel() for k, v in tensors.items() if k.startswith("ill."))))
    save_file(tensors, os.path.join(out, "expected.safetensors"),
              metadata={"model": model, "T": str(t), "max_norm": str(max_norm)})
    print("%s (cli): losses %s, grad norms %s" % (name, losses, norms))


def merge_case(name, model, dtype=torch.float32, suffix=""):
    """PEFT's merge_and_unload of case `name`'s adapter directory into the base, loaded in
    dtype (bf16: rounded to nearest even from the fp32 fixture): the tensors it changed (the
    adapted projections), which `ztrain merge-adapter` must give."""
    base = AutoModelForCausalLM.from_pretrained(os.path.join(FIX, model), dtype=dtype)
    before = {k: v.clone() for k, v in base.state_dict().items()}
    merged = PeftModel.from_pretrained(base, os.path.join(CLI, name, "adapter")).merge_and_unload()
    changed = {k: v.contiguous() for k, v in merged.state_dict().items() if not torch.equal(v, before[k])}
    save_file(changed, os.path.join(FIX, "lora", "merge", name + suffix + ".safetensors"), metadata={"model": model})
    print("%s%s (merge): %d tensors changed" % (name, suffix, len(changed)))


def main():
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    gen = torch.Generator().manual_seed(4646)
    tensors, meta = {}, []
    for c in CASES:
        case(*c, gen, tensors, meta)
    save_file(tensors, OUT, metadata={"cases": ";".join(meta)})
    gen = torch.Generator().manual_seed(4647)
    for c in CLI_CASES:
        cli_case(*c, gen)
    os.makedirs(os.path.join(FIX, "lora", "merge"), exist_ok=True)
    merge_case("qwen2", "qwen2_bias")
    merge_case("qwen2", "qwen2_bias", torch.bfloat16, "_bf16")


if __name__ == "__main__":
    main()
