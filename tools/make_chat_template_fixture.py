#!/usr/bin/env python3
"""Expected renders of real chat templates, from transformers' own apply_chat_template.

Writes tests/fixtures/chat_templates/expected.json: for each template file listed
in TEMPLATES (kept beside it, sources in that folder's README) and each
conversation of conversations.json, the text transformers renders with
add_generation_prompt false and true (tokenize=False), or, where the template
refuses the conversation, the error (with raise_exception's message when the
template raised one).  tests/test_jinja.c renders the same with src/text/jinja.c
and compares byte for byte.

strftime_now is pinned to NOW (UTC) so that templates printing today's date are
reproducible; the C test passes the same time with TZ=UTC.

Run with the dev venv (generated with transformers 5.x, jinja2 3.1.6, tokenizers):
    OMP_NUM_THREADS=1 /work/devvenv/bin/python tools/make_chat_template_fixture.py
The output is deterministic: running it twice gives the same file.
"""
import datetime as dt
import json
import os
import re
import sys

import jinja2
import tokenizers
import transformers
from transformers import PreTrainedTokenizerFast
from transformers.utils import chat_template_utils

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures", "chat_templates")
NOW = 1733400000  # 2024-12-05 12:00:00 UTC

# name: (bos_token, eos_token) as each model's tokenizer_config.json sets them
TEMPLATES = {
    "smollm2-135m-instruct": ("<|im_start|>", "<|im_end|>"),
    "llama-3.1-8b-instruct": ("<|begin_of_text|>", "<|eot_id|>"),
    "llama-3.2-11b-vision-instruct": ("<|begin_of_text|>", "<|eot_id|>"),
    "qwen2.5-7b-instruct": (None, "<|im_end|>"),
    "qwen3-0.6b": (None, "<|im_end|>"),
    "qwen1.5-72b-chat": (None, "<|im_end|>"),
    "mistral-7b-instruct-v0.1": ("<s>", "</s>"),
    "mistral-7b-instruct-v0.3": ("<s>", "</s>"),
    "mixtral-8x7b-instruct-v0.1": ("<s>", "</s>"),
    "zephyr-7b-beta": ("<s>", "</s>"),
    "deepseek-r1": ("<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"),
    "openchat-3.5-0106": ("<s>", "<|end_of_turn|>"),
    "smollm3-3b": (None, "<|im_end|>"),
    "gemma-2-it": ("<bos>", "<eos>"),
    "phi-3-mini-instruct": ("<s>", "<|endoftext|>"),
    "llama-3.2-instruct": ("<|begin_of_text|>", "<|eot_id|>"),
    "qwen2.5-trl-training": (None, "<|im_end|>"),
}


class FixedDatetime(dt.datetime):
    @classmethod
    def now(cls, tz=None):
        return dt.datetime.fromtimestamp(NOW, tz or dt.timezone.utc).replace(tzinfo=None)


def make_tokenizer(bos, eos, template):
    vocab = {"<unk>": 0}
    for t in (bos, eos):
        if t is not None:
            vocab.setdefault(t, len(vocab))
    core = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="<unk>"))
    kw = {"eos_token": eos, "unk_token": "<unk>"}
    if bos is not None:
        kw["bos_token"] = bos
    tok = PreTrainedTokenizerFast(tokenizer_object=core, **kw)
    tok.chat_template = template
    return tok


def render(tok, conv, gen):
    try:
        text = tok.apply_chat_template(conv, tokenize=False, add_generation_prompt=gen)
        out = {"text": text}
        if re.search(r"\{%-?\s*generation\s*-?%\}", tok.chat_template):
            # the assistant's text as transformers' AssistantTracker marks it (character offsets)
            vars_ = {k: v for k, v in tok.special_tokens_map.items() if isinstance(v, str)}
            again, spans = chat_template_utils.render_jinja_template(
                [conv], chat_template=tok.chat_template, return_assistant_tokens_mask=True,
                add_generation_prompt=gen, **vars_)
            assert again[0] == text
            out["generation"] = [text[a:b] for a, b in spans[0]]
        return out
    except jinja2.exceptions.TemplateError as e:
        # raise_exception raises TemplateError itself; jinja2's own errors are subclasses
        raised = type(e) is jinja2.exceptions.TemplateError
        return {"error": str(e), "raised": raised}
    except Exception as e:  # an undefined value used, a wrong type: the template's own failure
        return {"error": "%s: %s" % (type(e).__name__, e), "raised": False}


def main():
    os.environ["TZ"] = "UTC"
    chat_template_utils.datetime = FixedDatetime
    convs = json.load(open(os.path.join(HERE, "conversations.json")))
    out = {
        "generator": "tools/make_chat_template_fixture.py",
        "versions": {"transformers": transformers.__version__, "jinja2": jinja2.__version__},
        "now": NOW,
        "templates": [],
    }
    for name, (bos, eos) in TEMPLATES.items():
        src = open(os.path.join(HERE, name + ".jinja"), encoding="utf-8").read()
        tok = make_tokenizer(bos, eos, src)
        vars_ = {k: v for k, v in tok.special_tokens_map.items() if isinstance(v, str)}
        cases = []
        for i, conv in enumerate(convs):
            for gen in (False, True):
                case = {"conversation": i, "add_generation_prompt": gen}
                case.update(render(tok, conv, gen))
                cases.append(case)
        ok = sum("text" in c for c in cases)
        print("%-32s %d rendered, %d refused" % (name, ok, len(cases) - ok), file=sys.stderr)
        out["templates"].append({"name": name, "special_tokens": vars_, "cases": cases})
    with open(os.path.join(HERE, "expected.json"), "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
