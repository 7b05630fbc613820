#!/usr/bin/env python3
"""Write tests/fixtures/chat_data/: TRL's conversational records and the ids and
loss masks TRL's own SFTTrainer makes of them, for tests/test_chat_data.c.

The tokenizer is tests/fixtures/generate_chat's (byte-level BPE with ChatML's
<|im_start|> and <|im_end|>) with TRL's qwen2_5_training template, which marks
the assistant's text with {% generation %}.  For messages.jsonl (conversational
language modeling) and prompt_completion.jsonl (conversational prompt and
completion lists), SFTTrainer tokenizes the records with assistant_only_loss
false and true; expected.json keeps, per record, input_ids and the mask of the
tokens TRL's labels column keeps (TRL sets labels to -100 outside assistant_masks,
and outside completion_mask for prompt-completion records, as completion_only_loss
does by default).

Run with the dev venv (trl 1.16.0, transformers 5.25.0, datasets):
    OMP_NUM_THREADS=1 /work/devvenv/bin/python tools/make_chat_data_fixture.py
"""
import json
import os
import shutil
import tempfile

import datasets
import transformers
import trl
from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "fixtures", "chat_data")
SRC = os.path.join(ROOT, "tests", "fixtures", "generate_chat")
TEMPLATE = os.path.join(ROOT, "tests", "fixtures", "chat_templates", "qwen2.5-trl-training.jinja")

MESSAGES = [
    [{"role": "user", "content": "What is free software?"},
     {"role": "assistant", "content": "Software you may run, study, share and change."}],
    [{"role": "system", "content": "You answer in one word."},
     {"role": "user", "content": "Colour of the sky?"},
     {"role": "assistant", "content": "Blue."},
     {"role": "user", "content": "And grass?"},
     {"role": "assistant", "content": "Green."}],
    [{"role": "user", "content": "héllo — ünïcode ✓"},
     {"role": "assistant", "content": "Bonjour, ça va ?"}],
]
PROMPT_COMPLETION = [
    {"prompt": [{"role": "user", "content": "Name a licence."}],
     "completion": [{"role": "assistant", "content": "The GPL."}]},
    {"prompt": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2+2?"}],
     "completion": [{"role": "assistant", "content": "4"}]},
    {"prompt": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello."},
                {"role": "user", "content": "Bye"}],
     "completion": [{"role": "assistant", "content": "Goodbye, and thanks for asking!"}]},
]


def tokenizer_dir():
    shutil.copy(os.path.join(SRC, "tokenizer.json"), OUT)
    cfg = json.load(open(os.path.join(SRC, "tokenizer_config.json")))
    cfg["chat_template"] = open(TEMPLATE).read()
    with open(os.path.join(OUT, "tokenizer_config.json"), "w") as f:
        json.dump(cfg, f, ensure_ascii=False, indent=1)
    return PreTrainedTokenizerFast.from_pretrained(OUT)


def trl_rows(tok, records, assistant_only):
    with tempfile.TemporaryDirectory() as tmp:
        args = trl.SFTConfig(output_dir=tmp, assistant_only_loss=assistant_only, max_length=None,
                             packing=False, report_to=[], use_cpu=True)
        model = AutoModelForCausalLM.from_pretrained(SRC)
        t = trl.SFTTrainer(model=model, args=args, train_dataset=datasets.Dataset.from_list(records),
                           processing_class=tok)
        rows = []
        for r in t.train_dataset:
            # TRL's labels: -100 where assistant_masks or (completion_only_loss) completion_mask is 0
            mask = [int(l != -100) for l in r["labels"]]
            rows.append({"input_ids": list(r["input_ids"]), "mask": mask})
        return rows


def main():
    os.makedirs(OUT, exist_ok=True)
    tok = tokenizer_dir()
    out = {"generator": "tools/make_chat_data_fixture.py",
           "versions": {"trl": trl.__version__, "transformers": transformers.__version__}, "files": {}}
    for name, records in (("messages.jsonl", [{"messages": m} for m in MESSAGES]),
                          ("prompt_completion.jsonl", PROMPT_COMPLETION)):
        with open(os.path.join(OUT, name), "w") as f:
            for r in records:
                f.write(json.dumps(r, ensure_ascii=False) + "\n")
        out["files"][name] = {"all": trl_rows(tok, records, False), "assistant_only": trl_rows(tok, records, True)}
    with open(os.path.join(OUT, "expected.json"), "w") as f:
        json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
