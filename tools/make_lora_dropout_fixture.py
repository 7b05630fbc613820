"""Write tests/fixtures/lora/cli/llama/dropout.safetensors: PEFT's three fp32 steps of
tools/make_lora_model_fixture.py's Llama CLI case (the same seeded adapters, read from
tests/fixtures/lora/cli/llama/adapter, the same AdamW and clipping) with lora_dropout P,
which tests/cli/lora_peft.sh holds `ztrain train --adapter ... --lora_dropout P --seed
SEED` against.

torch's dropout draws from torch's generator, which ztrain cannot reproduce; so each LoRA
layer's lora_dropout module (PEFT's nn.Dropout, applied to the adapter's input alone) is
replaced by one that multiplies by ztrain's mask over 1 - P (model/lora.h: zt_lora_keep,
llama.h: zt_model_set_lora_batch), written here again in numpy from its definition:
  mix(z)           splitmix64's output function of z + 0x9e3779b97f4a7c15
  step key         mix((mix(SEED) ^ step))        (step 0-based)
  linear key       mix(step key ^ (layer * 15 + kind)), kind: q 2, k 3, v 4, o 5, gate 7,
                   up 8, down 9 (ZT_P_NKINDS 15)
  keep (row, col)  (mix(key ^ (row << 32 | col)) >> 11) / 2^53 >= float32(P)
with row the token's global index: (the step's first sample + b) * T + t.  Everything
else is PEFT's own (its forward adds s B A dropout(x) to the frozen base's output).
Stored as the case's expected.safetensors is: losses, grad_norms (3,), step3.<name> and
ill.<name>, with the metadata model, T, max_norm, p and seed.

Dev-time only (the test reads the stored file):
    OMP_NUM_THREADS=1 /work/devvenv/bin/python tools/make_lora_dropout_fixture.py
Generated with torch 2.15, transformers 5.25, peft 0.21.2, one thread, deterministic
algorithms.  Deterministic.
"""
import os
import sys

import numpy as np
import torch
from peft import PeftModel, get_peft_model_state_dict
from safetensors.torch import save_file
from transformers import AutoModelForCausalLM

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_lora_model_fixture as mlf  # noqa: E402

P, SEED = 0.1, 7
CASE, MODEL, MAX_NORM = "llama", "gqa_tied", mlf.MAX_NORM
KINDS = {"q_proj": 2, "k_proj": 3, "v_proj": 4, "o_proj": 5, "gate_proj": 7, "up_proj": 8, "down_proj": 9}
M64 = np.uint64(0xFFFFFFFFFFFFFFFF)


def mix(z):
    """splitmix64: the output for state z (uint64 arrays wrap as C's do)."""
    with np.errstate(over="ignore"):
        z = (np.asarray(z, dtype=np.uint64) + np.uint64(0x9E3779B97F4A7C15)) & M64
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


class Mask(torch.nn.Module):
    """x o keep / (1 - P) for layer `layer`'s target `kind` at the current step."""
    step = 0

    def __init__(self, layer, kind):
        super().__init__()
        self.layer, self.kind = layer, kind

    def forward(self, x):
        n, t, cols = x.shape
        key = mix(mix(np.uint64(SEED)) ^ np.uint64(Mask.step))
        key = mix(key ^ np.uint64(self.layer * 15 + self.kind))
        rows = (np.arange(n * t, dtype=np.uint64) + np.uint64(Mask.step * mlf.B * t))[:, None]
        u = (mix(key ^ ((rows << np.uint64(32)) | np.arange(cols, dtype=np.uint64)[None, :])) >> np.uint64(11))
        keep = u.astype(np.float64) * 2.0 ** -53 >= float(np.float32(P))
        return x * torch.from_numpy(keep.reshape(n, t, cols)).to(x.dtype) / (1 - P)


def loss_at(pm, tok, s, t=mlf.T):
    Mask.step = s
    return mlf.batch_loss(pm, tok, s, t)


def main():
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    out = os.path.join(mlf.CLI, CASE)
    base = AutoModelForCausalLM.from_pretrained(os.path.join(mlf.FIX, MODEL), dtype=torch.float32,
                                                attn_implementation="eager")
    pm = PeftModel.from_pretrained(base, os.path.join(out, "adapter"), is_trainable=True)
    replaced = 0
    for name, mod in pm.named_modules():
        if hasattr(mod, "lora_dropout") and "default" in mod.lora_dropout:
            layer = int(name.split(".layers.")[1].split(".")[0])
            mod.lora_dropout["default"] = Mask(layer, KINDS[name.rsplit(".", 1)[1]])
            replaced += 1
    assert replaced == 14, replaced  # 2 layers x 7 targets
    tok = np.load(os.path.join(mlf.FIX, MODEL, "tokens.npy")).astype(np.int64)
    losses, norms, least = mlf.steps(pm, tok, loss_at(pm, tok, 0), mlf.T, MAX_NORM, loss_at)
    names = [n.replace(".default", "") for n, p in pm.named_parameters() if p.requires_grad]
    least = dict(zip(names, least))
    tensors = {"losses": torch.tensor(losses, dtype=torch.float32),
               "grad_norms": torch.tensor(norms, dtype=torch.float32)}
    for n, v in get_peft_model_state_dict(pm).items():
        tensors["step3." + n] = v.detach().clone().contiguous()
        tensors["ill." + n] = (least[n] < mlf.ILL).float().contiguous()
    save_file(tensors, os.path.join(out, "dropout.safetensors"),
              metadata={"model": MODEL, "T": str(mlf.T), "max_norm": str(MAX_NORM), "p": str(P), "seed": str(SEED)})
    print("%s with lora_dropout %g: losses %s, grad norms %s" % (CASE, P, losses, norms))


if __name__ == "__main__":
    main()
