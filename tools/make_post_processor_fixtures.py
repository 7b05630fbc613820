#!/usr/bin/env python3
"""Dev-time: document boundaries as `tokenizers` and TRL make them.

Takes three of the committed fixture tokenizers (tools/make_tokenizer_fixtures.py)
and gives each the post_processor a real model of its family ships, built with
the `tokenizers` package itself (so the JSON is the package's own):

  llama2_bos      TemplateProcessing "<s> $A"                  (Llama 2, Mistral)
  llama3_bos      Sequence[ByteLevel, TemplateProcessing "<|begin_of_text|> $A"]  (Llama 3)
  gpt2_bos_eos    TemplateProcessing "<|endoftext|> $A <|endoftext|>"  (BOS and EOS,
                  the same token: the EOS between documents must not be doubled)

Writes tests/fixtures/tokenizers/post/NAME/ with tokenizer.json,
tokenizer_config.json and expected.json:
  cases:  [{"text", "plain": encode(text, add_special_tokens=False).ids,
                    "special": encode(text).ids}]           (the package's ids)
  records, stream: the records as one training stream: for each record the ids
          of encode(record) and then eos unless they already end with it (TRL's
          SFT: `if not text.endswith(eos_token): text += eos_token`, applied to
          ids so that a template's own EOS is not doubled);
  stream_plain: the same with add_special_tokens=False.
tests/test_post_processor.c and tests/cli/doc_bounds.sh compare ztrain exactly.

    OMP_NUM_THREADS=1 /work/devvenv/bin/python tools/make_post_processor_fixtures.py

The committed fixtures were made with tokenizers 0.23.3.
"""
import json
import os

import tokenizers
from tokenizers import Tokenizer, processors

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SRC = os.path.join(ROOT, "tests", "fixtures", "tokenizers")
OUT = os.path.join(SRC, "post")

CASES = ["", "Hello world", " leading space", "two\nlines\n", "ends with eos</s>",
         "ends with eot<|endoftext|>", "naïve café 🙂", "<s>already bos", "x"]
RECORDS = ["The first document.", "", "A second one,\nwith two lines.", "ends with eos</s>",
           "ends with eot<|endoftext|>", "ends with eot<|end_of_text|>", "last 🙂"]


def template(single, names, tok):
    return processors.TemplateProcessing(
        single=single, special_tokens=[(n, tok.token_to_id(n)) for n in names])


def build(name, base, eos, bos):
    tok = Tokenizer.from_file(os.path.join(SRC, base, "tokenizer.json"))
    if name == "llama2_bos":
        tok.post_processor = template(f"{bos} $A", [bos], tok)
    elif name == "llama3_bos":
        tok.post_processor = processors.Sequence([
            processors.ByteLevel(add_prefix_space=True, trim_offsets=False, use_regex=True),
            template(f"{bos} $A", [bos], tok)])
    else:
        tok.post_processor = template(f"{bos} $A {eos}", [bos], tok)
    return tok


def stream(tok, eos_id, special):
    out = []
    for r in RECORDS:
        ids = tok.encode(r, add_special_tokens=special).ids
        if not ids or ids[-1] != eos_id:
            ids = ids + [eos_id]
        out += ids
    return out


def main():
    specs = [("llama2_bos", "llama2", "</s>", "<s>"),
             ("llama3_bos", "llama3", "<|end_of_text|>", "<|begin_of_text|>"),
             ("gpt2_bos_eos", "gpt2", "<|endoftext|>", "<|endoftext|>")]
    for name, base, eos, bos in specs:
        tok = build(name, base, eos, bos)
        d = os.path.join(OUT, name)
        os.makedirs(d, exist_ok=True)
        tok.save(os.path.join(d, "tokenizer.json"))
        with open(os.path.join(SRC, base, "tokenizer_config.json"), encoding="utf-8") as f:
            config = json.load(f)
        with open(os.path.join(d, "tokenizer_config.json"), "w", encoding="utf-8") as f:
            json.dump(config, f, indent=1)
        eos_id = tok.token_to_id(eos)
        cases = [{"text": t, "plain": tok.encode(t, add_special_tokens=False).ids,
                  "special": tok.encode(t).ids} for t in CASES]
        with open(os.path.join(d, "expected.json"), "w", encoding="utf-8") as f:
            json.dump({"tokenizers_version": tokenizers.__version__, "eos_id": eos_id, "cases": cases,
                       "records": RECORDS, "stream": stream(tok, eos_id, True),
                       "stream_plain": stream(tok, eos_id, False)}, f, ensure_ascii=False, indent=1)
        print(name, "written", len(cases), "cases")


if __name__ == "__main__":
    main()
