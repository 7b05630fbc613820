#!/usr/bin/env python3
"""Write the config.json files of tests/fixtures/configs/ that transformers itself
saves (the published models' files beside them are kept as published; the README
there names every source).

Run with the dev venv (transformers 5.25.0, torch 2.15.0, gguf 0.19.0):
    OMP_NUM_THREADS=1 /work/devvenv/bin/python tools/make_config_fixtures.py [SMOLLM2.gguf]
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


def main():
    gguf = sys.argv[1] if len(sys.argv) > 1 else os.environ.get(
        "ZT_SMOLLM2_GGUF", "/usr/local/lib/ztrain/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")
    save(LlamaConfig(hidden_size=64, intermediate_size=172, num_hidden_layers=2, num_attention_heads=4,
                     num_key_value_heads=2, vocab_size=256, dtype="bfloat16"), "LlamaForCausalLM", "llama-small")
    save(MistralConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                       num_key_value_heads=2, vocab_size=256, sliding_window=16), "MistralForCausalLM",
         "mistral-small")
    save(Qwen2Config(hidden_size=64, intermediate_size=128, num_hidden_layers=3, num_attention_heads=4,
                     num_key_value_heads=2, vocab_size=256, tie_word_embeddings=True), "Qwen2ForCausalLM",
         "qwen2-small")
    save(LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                     vocab_size=256, max_position_embeddings=1024,
                     rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
                                      "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                      "original_max_position_embeddings": 128}), "LlamaForCausalLM",
         "llama3-rope")
    # SmolLM2 as transformers converts it from GGUF: the config alone (the weights
    # are not needed to show what config.json it writes), architectures set as
    # the model's save_pretrained sets it
    cfg = AutoConfig.from_pretrained(os.path.dirname(gguf), gguf_file=os.path.basename(gguf))
    cfg.architectures = ["LlamaForCausalLM"]
    with tempfile.TemporaryDirectory() as d:
        cfg.save_pretrained(d)
        shutil.copyfile(os.path.join(d, "config.json"), os.path.join(OUT, f"smollm2-135m-instruct-from-gguf-{TAG}.json"))
    for f in sorted(os.listdir(OUT)):
        if TAG in f:
            print(f, json.load(open(os.path.join(OUT, f))).get("transformers_version"))


if __name__ == "__main__":
    main()
