"""Write tests/fixtures/lora/counts.json: what PEFT counts for LoRA adapters on ztrain's
fixture models, which tests/cli/lora_flags.sh holds ztrain's plan line against.

For each case (a fixture model's config.json, a rank, alpha, rsLoRA and a target list
as TRL's ModelConfig takes it: None for PEFT's default, "all-linear", or names), the
model is built by transformers' AutoModelForCausalLM from the config (random weights:
only the shapes matter), wrapped by peft.get_peft_model(LoraConfig(...)), and the file
records

  trainable, total   PeftModel.get_nb_trainable_parameters() (total counts the adapters
                     and a tied lm_head once, as model.parameters() does)
  targets            the projection names PEFT wrapped, sorted (from the modules that
                     carry lora_A), so the test checks the resolution of None and
                     all-linear as well as the counts
  scale              the scaling PEFT set on the first adapted module
  adapter_tensors    [name, shape] of every tensor PEFT saves (get_peft_model_state_dict,
                     the names of adapter_model.safetensors), sorted by name

Dev-time only (the tests read the stored file):
    OMP_NUM_THREADS=1 /work/devvenv/bin/python tools/make_lora_fixtures.py
Generated with torch 2.15, transformers 5.25, peft 0.21.2.  Deterministic: no random
number reaches the file.
"""
import json
import os

import peft
import torch
import transformers
from peft import LoraConfig, get_peft_model, get_peft_model_state_dict
from transformers import AutoConfig, AutoModelForCausalLM

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
FIX = os.path.join(ROOT, "tests", "fixtures")

CASES = [
    # model, r, alpha, use_rslora, target_modules (None: PEFT's default for the architecture)
    ("gqa_tied", 16, 32, False, None),
    ("gqa_tied", 4, 8, True, "all-linear"),
    ("untied_odd", 8, 16, False, ["k_proj", "down_proj", "gate_proj"]),
    ("qwen2_bias", 2, 3, False, "all-linear"),
    ("mistral_window", 3, 5, True, ["o_proj", "up_proj"]),
]


def case(name, r, alpha, rslora, targets):
    cfg = AutoConfig.from_pretrained(os.path.join(FIX, name))
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(cfg)
    lc = LoraConfig(r=r, lora_alpha=alpha, lora_dropout=0.0, target_modules=targets, use_rslora=rslora,
                    bias="none", task_type="CAUSAL_LM")
    pm = get_peft_model(model, lc)
    trainable, total = pm.get_nb_trainable_parameters()
    wrapped = sorted({n.split(".")[-1] for n, m in pm.named_modules() if hasattr(m, "lora_A") and len(m.lora_A)})
    scale = next(m.scaling["default"] for _, m in pm.named_modules() if hasattr(m, "lora_A") and len(m.lora_A))
    saved = sorted([k, list(v.shape)] for k, v in get_peft_model_state_dict(pm).items())
    return {"model": name, "model_type": cfg.model_type, "r": r, "alpha": alpha, "use_rslora": rslora,
            "target_modules": targets, "targets": wrapped, "scale": scale, "trainable": trainable, "total": total,
            "adapter_tensors": saved}


def main():
    torch.set_num_threads(1)
    out = {"versions": {"torch": torch.__version__.split("+")[0], "transformers": transformers.__version__,
                        "peft": peft.__version__},
           "cases": [case(*c) for c in CASES]}
    os.makedirs(os.path.join(FIX, "lora"), exist_ok=True)
    with open(os.path.join(FIX, "lora", "counts.json"), "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
