#!/usr/bin/env python3
"""Write tests/fixtures/generate_chat/: a small Llama with a byte-level BPE
tokenizer that has ChatML's special tokens and SmolLM2's chat template, and the
greedy reply transformers' generate gives to one conversation.

tests/cli/generate_chat.sh runs `ztrain generate --chat` on it and compares: the
prompt's length in tokens (apply_chat_template with add_generation_prompt), the
reply's text and length, and that the reply ends at the end of turn.

The tokenizer is tests/fixtures/tokenizers/gpt2 (1200 tokens) with <|im_start|>
(1200) and <|im_end|> (1201) added as special tokens.  The weights are random
(N(0, 0.15), as tools/make_generate_fixture.py explains), so nothing would ever
end the turn by itself: the script decodes once, takes the first new token at
step END_STEP that has not come before, and swaps its lm_head row with
<|im_end|>'s, so that the model now says <|im_end|> there: the run ends at the
end of turn, as a chat model's does.  generation_config.json asks for sampling
(do_sample true, temperature 0.7) and 33 new tokens, as SmolLM2's does; the test
turns sampling off with --do_sample false, as the transformers run does.

Run with the dev venv (transformers 5.25.0, torch 2.x, tokenizers):
    OMP_NUM_THREADS=1 /work/devvenv/bin/python tools/make_chat_generate_fixture.py
Deterministic (seeded weights, one thread, greedy decoding).
"""
import json
import os

import torch
import transformers
from transformers import PreTrainedTokenizerFast

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "fixtures", "generate_chat")
TOK = os.path.join(ROOT, "tests", "fixtures", "tokenizers", "gpt2", "tokenizer.json")
TEMPLATE = os.path.join(ROOT, "tests", "fixtures", "chat_templates", "smollm2-135m-instruct.jinja")
SEED = 2024
MAX_NEW = 33
END_STEP = 12
SYSTEM = "You are a terse assistant."
USER = "What is free software?"
USER2 = "And then?"  # a second turn, for `ztrain chat`


def tokenizer():
    tj = json.load(open(TOK))
    for i, t in enumerate(["<|im_start|>", "<|im_end|>"]):
        tj["added_tokens"].append({"id": 1200 + i, "content": t, "single_word": False, "lstrip": False,
                                   "rstrip": False, "normalized": False, "special": True})
    os.makedirs(OUT, exist_ok=True)
    with open(os.path.join(OUT, "tokenizer.json"), "w") as f:
        json.dump(tj, f, ensure_ascii=False)
    cfg = {"bos_token": "<|im_start|>", "eos_token": "<|im_end|>", "unk_token": "<|endoftext|>",
           "pad_token": "<|im_end|>", "tokenizer_class": "PreTrainedTokenizerFast",
           "chat_template": open(TEMPLATE).read()}
    with open(os.path.join(OUT, "tokenizer_config.json"), "w") as f:
        json.dump(cfg, f, ensure_ascii=False, indent=1)
    return PreTrainedTokenizerFast.from_pretrained(OUT)


def model():
    torch.manual_seed(SEED)
    cfg = transformers.LlamaConfig(
        hidden_size=64, intermediate_size=160, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, vocab_size=1202, max_position_embeddings=256, rms_norm_eps=1e-5,
        rope_theta=10000.0, tie_word_embeddings=False, initializer_range=0.15,
        bos_token_id=1200, eos_token_id=1201, pad_token_id=None, torch_dtype="float32")
    m = transformers.LlamaForCausalLM(cfg).eval()
    g = torch.Generator().manual_seed(SEED)
    with torch.no_grad():
        for _, p in m.named_parameters():
            if p.dim() == 2:
                p.normal_(0.0, 0.15, generator=g)
            else:
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=g))
    return m


def greedy(m, ids):
    out = m.generate(torch.tensor([ids]), do_sample=False, max_new_tokens=MAX_NEW, eos_token_id=[1201],
                     pad_token_id=1201, output_scores=True, return_dict_in_generate=True)
    new = out.sequences[0, len(ids):].tolist()
    margins = [float(torch.topk(s[0], 2).values[0] - torch.topk(s[0], 2).values[1]) for s in out.scores]
    return new, min(margins)


def reply_bytes(tok, ids):
    """The reply's raw bytes, as ztrain streams them: each byte-level token's bytes,
    special tokens left out (decode's text would put U+FFFD where a token ends
    inside a UTF-8 character)."""
    inverse = {v: k for k, v in bytes_to_unicode().items()}
    out = b""
    for i in ids:
        if i not in tok.all_special_ids:
            out += bytes(inverse[c] for c in tok.convert_ids_to_tokens(i))
    return out


def bytes_to_unicode():
    """GPT-2's map of bytes to printable characters (the ByteLevel pre-tokenizer's)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


def main():
    torch.set_num_threads(1)
    tok = tokenizer()
    m = model()
    conv = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": USER}]
    prompt = tok.apply_chat_template(conv, add_generation_prompt=True, tokenize=True, return_dict=False)
    if isinstance(prompt, dict) or hasattr(prompt, "input_ids"):
        prompt = prompt["input_ids"]
    new, _ = greedy(m, prompt)
    end = new[END_STEP]
    assert end not in new[:END_STEP] and 1201 not in new, "pick another END_STEP or SEED"
    with torch.no_grad():
        w = m.lm_head.weight
        w[[end, 1201]] = w[[1201, end]]
    new, margin = greedy(m, prompt)
    assert new[-1] == 1201 and len(new) == END_STEP + 1
    # the second turn sees the first reply as the assistant's message, decoded as text
    conv2 = conv + [{"role": "assistant", "content": tok.decode(new, skip_special_tokens=True)},
                    {"role": "user", "content": USER2}]
    prompt2 = tok.apply_chat_template(conv2, add_generation_prompt=True, tokenize=True, return_dict=False)
    new2, margin2 = greedy(m, prompt2)
    m.save_pretrained(OUT, safe_serialization=True)
    gen = {"do_sample": True, "temperature": 0.7, "top_p": 0.9, "max_new_tokens": MAX_NEW,
           "bos_token_id": 1200, "eos_token_id": [1201]}
    with open(os.path.join(OUT, "generation_config.json"), "w") as f:
        json.dump(gen, f, indent=1)
    exp = {"generator": "tools/make_chat_generate_fixture.py",
           "versions": {"transformers": transformers.__version__, "torch": torch.__version__},
           "system": SYSTEM, "user": USER, "prompt_ids": list(prompt), "new_ids": new,
           "reply": tok.decode(new, skip_special_tokens=True), "reply_hex": reply_bytes(tok, new).hex(),
           "user2": USER2, "prompt2_ids": list(prompt2), "new2_ids": new2,
           "reply2_hex": reply_bytes(tok, new2).hex(), "min_margin": min(margin, margin2)}
    with open(os.path.join(OUT, "expected.json"), "w") as f:
        json.dump(exp, f, ensure_ascii=False, indent=1)


if __name__ == "__main__":
    main()
