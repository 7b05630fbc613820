"""Write tests/fixtures/generate/: a small byte-level Llama and the greedy
continuations Hugging Face's LlamaForCausalLM.generate gives for a few prompts.

ztrain's `generate` must reproduce these ids exactly in fp32 (tests/test_generate.c,
tests/cli/generate.sh).  The model is saved by transformers' own save_pretrained,
so the test also reads a real Hugging Face directory (config.json with every key
transformers writes, model.safetensors).

Dev-time only (PyPI): needs transformers beside Debian's torch 1.13, e.g.
    /usr/bin/python3 -m venv --system-site-packages /tmp/venv
    /tmp/venv/bin/pip install transformers==4.38.2
    /tmp/venv/bin/python tools/make_generate_fixture.py
The output is deterministic (seeded init, one thread, greedy decoding).

Why the weights are not N(0, 0.02) as a fresh model's: with such small weights
every logit is within ~1e-3 of the others, and the argmax would hang on the last
bits of the fp32 arithmetic.  Matrices ~ N(0, 0.15) spread the logits, and the
script records the smallest gap between the top two logits at any greedy step
(min_margin in greedy.json), so a reader can see how far the decode is from a tie.
"""

import json
import os

import torch
import transformers

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "fixtures", "generate")
SEED = 4321
MAX_NEW = 40
PROMPTS = [
    "T",                                   # one token: the decode path from position 1
    "The licence",                         # a short prefill
    "This program is free software: you can redistribute it and/or modify it",
]


def main():
    torch.manual_seed(SEED)
    torch.set_num_threads(1)
    cfg = transformers.LlamaConfig(
        hidden_size=64, intermediate_size=160, num_hidden_layers=3,
        num_attention_heads=4, num_key_value_heads=2, vocab_size=256,
        max_position_embeddings=128, rms_norm_eps=1e-5, rope_theta=10000.0,
        tie_word_embeddings=False, initializer_range=0.15,
        bos_token_id=None, eos_token_id=None, pad_token_id=None,
        torch_dtype="float32")
    model = transformers.LlamaForCausalLM(cfg).eval()
    g = torch.Generator().manual_seed(SEED)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 2:
                p.normal_(0.0, 0.15, generator=g)
            else:
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=g))
    os.makedirs(OUT, exist_ok=True)
    model.save_pretrained(OUT, safe_serialization=True)

    prompts, outputs, margins = [], [], []
    for text in PROMPTS:
        ids = list(text.encode("utf-8"))
        inp = torch.tensor([ids])
        with torch.no_grad():
            out = model.generate(inp, attention_mask=torch.ones_like(inp), max_new_tokens=MAX_NEW,
                                 do_sample=False, pad_token_id=0, output_scores=True,
                                 return_dict_in_generate=True)
        new = out.sequences[0, len(ids):].tolist()
        for s in out.scores:
            top = torch.topk(s[0], 2).values
            margins.append(float(top[0] - top[1]))
        prompts.append(ids)
        outputs.append(new)
    doc = {
        "generator": "transformers %s LlamaForCausalLM.generate(do_sample=False), torch %s, fp32"
                     % (transformers.__version__, torch.__version__),
        "max_new_tokens": MAX_NEW,
        "min_margin": min(margins),
        "prompts": prompts,
        "outputs": outputs,
    }
    # the second prompt's continuation as raw bytes, for the command-line test
    with open(os.path.join(OUT, "greedy_1.bin"), "wb") as f:
        f.write(bytes(outputs[1]))
    with open(os.path.join(OUT, "greedy.json"), "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    print("min top-2 logit margin over all greedy steps: %.4g" % min(margins))
    for p, o in zip(prompts, outputs):
        print(repr(bytes(p)), "->", repr(bytes(o)))


if __name__ == "__main__":
    main()
