"""Write tests/fixtures/lora/peft_load.safetensors: PEFT's logits with adapters that ztrain
itself trained and wrote, which tests/cli/lora_peft_load.sh holds ztrain's own logits
against (issue 46: the adapters PEFT loads).

The script runs ztrain (build/ztrain, built first with `make`) for a fixed short LoRA run on
the gqa_tied fixture (TRAIN_ARGS, stored in the file's metadata so that the test reruns the
same command) with --output_dir, then loads that directory with
PeftModel.from_pretrained(base, dir) on transformers' fp32 model and asserts that loading
raised no warning (a missing or unexpected adapter key, a config PEFT does not take, would
warn; transformers' FutureWarning that PEFT calls a deprecated method of its own is left
out) and that every lora_B it loaded is non-zero.  Stored:

  logits    (n, V) PEFT's logits for the fixed tokens PROMPT (its bytes: the fixture's vocabulary
            is 256 byte ids), every position
  ids       (n) those tokens, as F32
  <name>    each adapter tensor ztrain wrote (F32), so that the test can say whether its rerun
            wrote the same adapters before it compares logits
and the metadata "train_args" (the ztrain train flags, space-separated) and "prompt".

The run uses --adam_epsilon 1e-3: Adam amplifies a rounding difference in a gradient by at
most lr / eps, here 10, so the rerun on another machine (other SIMD widths, other summation
orders in the products) writes nearly the same adapters (a -O1 build without -march=native:
1.5e-6 of the largest lora_B, which starts at zero and stays small), where at eps 1e-8 a
near-zero gradient would turn that rounding into a visibly different update (docs/lora.md,
"Traps").

Dev-time only (the test reads the stored file):
    make && OMP_NUM_THREADS=1 /work/devvenv/bin/python tools/make_lora_peft_load_fixture.py
Generated with torch 2.15, transformers 5.25, peft 0.21.2, one thread.  Deterministic.  The run
trains with --lora_dropout 0.1, so the adapter_config.json PEFT loads holds a nonzero lora_dropout.
"""
import os
import subprocess
import tempfile
import warnings

import torch
from peft import PeftModel
from safetensors.torch import load_file, save_file
from transformers import AutoModelForCausalLM

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
FIX = os.path.join(ROOT, "tests", "fixtures")
OUT = os.path.join(FIX, "lora", "peft_load.safetensors")
MODEL = "tests/fixtures/gqa_tied"
PROMPT = "The adapters load"
TRAIN_ARGS = ("--model " + MODEL + " --data " + MODEL + "/tokens.npy --block_size 16 --per_device_train_batch_size 2 "
              "--max_steps 4 --learning_rate 1e-2 --adam_epsilon 1e-3 --shuffle false --threads 1 --seed 11 "
              "--use_peft --lora_r 4 --lora_alpha 8 --lora_target_modules all-linear --lora_dropout 0.1")


def main():
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "adapter")
        subprocess.run([os.path.join(ROOT, "build", "ztrain"), "train", *TRAIN_ARGS.split(), "--output_dir", out],
                       cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
        written = load_file(os.path.join(out, "adapter_model.safetensors"))
        base = AutoModelForCausalLM.from_pretrained(os.path.join(ROOT, MODEL), dtype=torch.float32,
                                                    attn_implementation="eager")
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            pm = PeftModel.from_pretrained(base, out)
        # transformers 5.25 warns (FutureWarning) that PEFT calls its deprecated
        # is_gradient_checkpointing: about the two libraries, not the adapter, so left out
        about = [str(w.message) for w in caught if not issubclass(w.category, (FutureWarning, DeprecationWarning))]
        assert not about, about
    loaded = {n: p for n, p in pm.named_parameters() if "lora_" in n}
    assert len(loaded) == len(written), (len(loaded), len(written))
    assert all(p.abs().max() > 0 for n, p in loaded.items() if "lora_B" in n), "a lora_B loaded as zeros"
    ids = torch.tensor([list(PROMPT.encode())])
    with torch.no_grad():
        logits = pm(input_ids=ids).logits[0]
    tensors = {"logits": logits.contiguous(), "ids": ids[0].float()}
    tensors.update(written)
    save_file(tensors, OUT, metadata={"train_args": TRAIN_ARGS, "prompt": PROMPT})
    print("PEFT loaded %d adapter tensors with no warning; logits %s" % (len(written), tuple(logits.shape)))


if __name__ == "__main__":
    main()
