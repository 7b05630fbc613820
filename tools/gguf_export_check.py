#!/usr/bin/env python3
"""Check `ztrain export --format gguf` against transformers' own GGUF loader, on the
real SmolLM2-135M-Instruct (dev-time: transformers is not on the CI machine).

    OMP_NUM_THREADS=1 /work/devvenv/bin/python tools/gguf_export_check.py [ZTRAIN] [SMOLLM2.gguf]

Versions: transformers 5.25.0, torch 2.15.0, gguf 0.19.0 (the dev venv).
1. transformers converts the published GGUF file (Q4_1) to an HF directory
   (fp32 weights, tokenizer.json, tokenizer_config.json with the chat template):
   the source model.
2. ztrain exports that directory in f32, f16, bf16 and q8_0.
3. transformers loads each exported file (from_pretrained(gguf_file=...): it reads
   the metadata, undoes the q/k permutation, dequantizes) and its logits on a
   prompt are compared with the source model's; its tokenizer, built from the
   file's tokenizer metadata, must give the source tokenizer's ids; the chat
   template must come back unchanged.
4. Small random Llama and Qwen2 models go the same way in f32.
5. A SentencePiece-style tokenizer goes out as the "llama" type; the tokenizer
   transformers builds from the file is compared with the tokenizers package.
Prints one line per outtype; docs/contract.md records the figures.  Measured
(5 Dec 2026, this machine): f32 max|diff| 0; f16 3.1e-2; bf16 2.1e-1; q8_0 1.05
(argmax 44/45), logits up to 36.1; tokenizer ids and chat template equal in all four;
the small Llama and Qwen2: max|diff| 0; the llama-type tokenizer: equal ids on 18
of 23 texts, the other 5 differing only in a "▁" at the text's start or beside a
special token (the prefix space of transformers' rebuilt Llama tokenizer)."""
import json
import os
import subprocess
import sys
import tempfile

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

ztrain = sys.argv[1] if len(sys.argv) > 1 else "build/ztrain"
gguf = sys.argv[2] if len(sys.argv) > 2 else os.environ.get(
    "ZT_SMOLLM2_GGUF", "/usr/local/lib/ztrain/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")
TEXT = ("The capital of France is Paris. Paris is known for the Eiffel Tower, built in 1889, "
        "and for its museums: the Louvre holds about 35,000 works of art.")
torch.manual_seed(0)
with tempfile.TemporaryDirectory() as tmp:
    src = os.path.join(tmp, "src")
    gdir, gname = os.path.dirname(gguf), os.path.basename(gguf)
    loaded = AutoModelForCausalLM.from_pretrained(gdir, gguf_file=gname, dtype=torch.float32)
    tok = AutoTokenizer.from_pretrained(gdir, gguf_file=gname)
    # a model loaded from GGUF refuses save_pretrained: the same weights in a fresh one
    cfg = loaded.config
    if hasattr(cfg, "quantization_config"):
        del cfg.quantization_config
    model = type(loaded)(cfg).eval()
    model.load_state_dict(loaded.state_dict())
    model.save_pretrained(src)
    tok.save_pretrained(src)
    ids = tok(TEXT, return_tensors="pt").input_ids
    with torch.no_grad():
        ref = model(ids).logits[0].double()
    print(f"source: {gname} converted by transformers; {ids.shape[1]} tokens; logits |max| {ref.abs().max():.3f}")
    failed = False
    for t in ["f32", "f16", "bf16", "q8_0"]:
        out = os.path.join(tmp, f"m.{t}.gguf")
        subprocess.run([ztrain, "export", "--format", "gguf", "--outtype", t, src, out], check=True,
                       stdout=subprocess.DEVNULL)
        m = AutoModelForCausalLM.from_pretrained(tmp, gguf_file=os.path.basename(out), dtype=torch.float32)
        with torch.no_grad():
            got = m(ids).logits[0].double()
        diff = (got - ref).abs().max().item()
        rel = diff / ref.abs().max().item()
        same_argmax = (got.argmax(-1) == ref.argmax(-1)).float().mean().item()
        t2 = AutoTokenizer.from_pretrained(tmp, gguf_file=os.path.basename(out))
        same_ids = t2(TEXT).input_ids == tok(TEXT).input_ids
        same_tmpl = t2.chat_template == tok.chat_template
        size = os.path.getsize(out) / 1e6
        print(f"{t:5s} {size:6.1f} MB  logits max|diff| {diff:.3e} (relative to max|logit| {rel:.2e}), "
              f"argmax agreement {same_argmax:.3f}, tokenizer ids {'equal' if same_ids else 'DIFFER'}, "
              f"chat template {'equal' if same_tmpl else 'DIFFERS'}")
        failed |= not same_ids or not same_tmpl or (t == "f32" and diff != 0.0)

# 4. Small random Llama and Qwen2 models (every weight, the Qwen2 biases included,
#    drawn non-trivially), exported in f32: transformers' loader must give the same
#    logits (Qwen2 goes under llama.cpp's qwen2 architecture, rows unpermuted).
from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM  # noqa: E402

sizes = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, vocab_size=256)
with tempfile.TemporaryDirectory() as tmp:
    for name, cls, cfg in [("llama", LlamaForCausalLM, LlamaConfig(**sizes)),
                           ("qwen2", Qwen2ForCausalLM, Qwen2Config(tie_word_embeddings=False, **sizes))]:
        small = cls(cfg).eval()
        with torch.no_grad():
            for n, p in small.named_parameters():
                p.normal_(1.0 if "norm" in n else 0.0, 0.1 if "norm" in n else 0.2)
        d = os.path.join(tmp, name)
        small.save_pretrained(d)
        subprocess.run([ztrain, "export", "--outtype", "f32", d, os.path.join(d, "m.gguf")], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        back = AutoModelForCausalLM.from_pretrained(d, gguf_file="m.gguf", dtype=torch.float32)
        ids = torch.randint(0, 256, (1, 20))
        with torch.no_grad():
            diff = (small(ids).logits - back(ids).logits).abs().max().item()
        print(f"small {name}: f32 logits max|diff| {diff:.3e}")
        failed |= diff != 0.0

# 5. A SentencePiece-style tokenizer (the repository's Llama 2-style fixture) goes out
#    as llama.cpp's "llama" type; transformers builds its tokenizer from the file,
#    compared with the tokenizers package on the fixture's texts.
from tokenizers import Tokenizer  # noqa: E402

fix = "tests/fixtures/tokenizers/llama2"
ref = Tokenizer.from_file(os.path.join(fix, "tokenizer.json"))
with tempfile.TemporaryDirectory() as tmp:
    d = os.path.join(tmp, "m")
    subprocess.run([ztrain, "init-model", "--model_config", "tests/fixtures/gqa_tied/config.json", "--tokenizer", fix,
                    "--output_dir", d], check=True, stdout=subprocess.DEVNULL)
    # the file alone in its directory, so the tokenizer comes from its metadata
    g = os.path.join(tmp, "g")
    os.mkdir(g)
    subprocess.run([ztrain, "export", "--outtype", "f32", d, os.path.join(g, "m.gguf")], check=True,
                   stdout=subprocess.DEVNULL)
    t = AutoTokenizer.from_pretrained(g, gguf_file="m.gguf")
    texts = [c["text"] for c in json.load(open(os.path.join(fix, "expected.json")))["cases"]]
    same = sum(t(x, add_special_tokens=False).input_ids == ref.encode(x, add_special_tokens=False).ids for x in texts)
    print(f"llama-type tokenizer: transformers' ids from the file equal the tokenizers package's on {same} of "
          f"{len(texts)} texts")
sys.exit(1 if failed else 0)
