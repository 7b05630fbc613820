#!/usr/bin/env python3
"""Write the config.json files of tests/fixtures/configs/ that transformers itself
saves (the published models' files beside them are kept as published; the README
there names every source).

Run with the dev venv (transformers 5.25.0, torch 2.15.0, gguf 0.19.0):
    OMP_NUM_THREADS=1 /work/devvenv/bin/python tools/make_config_fixtures.py [SMOLLM2.gguf]
and with transformers 4.46.3 (a scratch venv: pip install "transformers==4.46.*",
no torch), which writes its own spelling (torch_dtype, rope_scaling) and skips
the GGUF conversion (its GGUF loader needs torch):
    /tmp/tf446/bin/python tools/make_config_fixtures.py
The GGUF file defaults to $ZT_SMOLLM2_GGUF, then
/usr/local/lib/ztrain/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf.

Each file is what save_pretrained writes for a model of that class (architectures
set, as a model's save sets it): a small Llama, a Mistral with its window, a
Qwen2 (which transformers 5 saves with layer_types), a Llama 3.1-style config
with llama3 RoPE (saved under rope_parameters), and SmolLM2-135M-Instruct as
transformers converts it from its GGUF file (with _model_name_or_path and
unk_token_id)."""
import json
import os
import shutil
import sys
import tempfile

import transformers
from transformers import AutoConfig, LlamaConfig, MistralConfig, Qwen2Config

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures", "configs")
TAG = "tf" + transformers.__version__


def save(cfg, arch, name):
    cfg.architectures = [arch]
    with tempfile.TemporaryDirectory() as d:
        cfg.save_pretrained(d)
        shutil.copyfile(os.path.join(d, "config.json"), os.path.join(OUT, f"{name}-{TAG}.json"))


V5 = int(transformers.__version__.split(".")[0]) >= 5


def main():
    gguf = sys.argv[1] if len(sys.argv) > 1 else os.environ.get(
        "ZT_SMOLLM2_GGUF", "/usr/local/lib/ztrain/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")
    dtype = {"dtype" if V5 else "torch_dtype": "bfloat16"}
    save(LlamaConfig(hidden_size=64, intermediate_size=172, num_hidden_layers=2, num_attention_heads=4,
                     num_key_value_heads=2, vocab_size=256, **dtype), "LlamaForCausalLM", "llama-small")
    save(MistralConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                       num_key_value_heads=2, vocab_size=256, sliding_window=16), "MistralForCausalLM",
         "mistral-small")
    save(Qwen2Config(hidden_size=64, intermediate_size=128, num_hidden_layers=3, num_attention_heads=4,
                     num_key_value_heads=2, vocab_size=256, tie_word_embeddings=True), "Qwen2ForCausalLM",
         "qwen2-small")
    llama3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
              "original_max_position_embeddings": 128}
    rope = {"rope_parameters": dict(llama3, rope_theta=500000.0)} if V5 else {"rope_scaling": llama3,
                                                                            "rope_theta": 500000.0}
    save(LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                     vocab_size=256, max_position_embeddings=1024, **rope), "LlamaForCausalLM", "llama3-rope")
    if not V5:
        return
    # SmolLM2 as transformers converts it from GGUF: the config alone (the weights
    # are not needed to show what config.json it writes), architectures set as
    # the model's save_pretrained sets it
    cfg = AutoConfig.from_pretrained(os.path.dirname(gguf), gguf_file=os.path.basename(gguf))
    cfg.architectures = ["LlamaForCausalLM"]
    with tempfile.TemporaryDirectory() as d:
        cfg.save_pretrained(d)
        shutil.copyfile(os.path.join(d, "config.json"), os.path.join(OUT, f"smollm2-135m-instruct-from-gguf-{TAG}.json"))


if __name__ == "__main__":
    main()
    for f in sorted(os.listdir(OUT)):
        if TAG in f:
            print(f, json.load(open(os.path.join(OUT, f))).get("transformers_version"))
