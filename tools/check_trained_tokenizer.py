#!/usr/bin/env python3
"""Dev-time: check that a tokenizer written by `ztrain tokenizer train` loads in
the PyPI `tokenizers` package and in `transformers.AutoTokenizer`, that both
encode exactly as `ztrain tokenize` does, and that decoding gives the text back;
then store the committed fixture tests/cli/tokenizer_train.sh compares against.

    python3 -m venv .venv-tok && .venv-tok/bin/pip install tokenizers transformers numpy
    make build/ztrain && .venv-tok/bin/python tools/check_trained_tokenizer.py

Fixture: tests/fixtures/tokenizers/ztrain_trained/ = the three files ztrain
wrote for --input tests/fixtures/text/multilingual.txt --vocab_size 400, and
expected.json with the ids `tokenizers` (== AutoTokenizer) gives for the test
texts.  Also checks, without storing it, the demo corpus
(/usr/share/common-licenses) with a 2048-token vocabulary.
"""
import glob
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import tokenizers
import transformers
from tokenizers import Tokenizer
from transformers import AutoTokenizer

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ZTRAIN = os.path.join(ROOT, "build", "ztrain")
TEXT = os.path.join(ROOT, "tests", "fixtures", "text", "multilingual.txt")
FIXTURE = os.path.join(ROOT, "tests", "fixtures", "tokenizers", "ztrain_trained")

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_tokenizer_fixtures import CASES  # noqa: E402


def ztrain_ids(tok_dir, path, tmp):
    out = os.path.join(tmp, "ids.npy")
    subprocess.run([ZTRAIN, "tokenize", "--tokenizer", tok_dir, "--input", path, "--output", out],
                   check=True, stderr=subprocess.DEVNULL)
    return np.load(out).tolist()


def check(tok_dir, texts, tmp):
    """Every text: tokenizers == AutoTokenizer == ztrain, and decode round-trips."""
    fast = Tokenizer.from_file(os.path.join(tok_dir, "tokenizer.json"))
    auto = AutoTokenizer.from_pretrained(tok_dir)
    cases = []
    for i, text in enumerate(texts):
        ids = fast.encode(text, add_special_tokens=False).ids
        assert auto.encode(text, add_special_tokens=False) == ids, f"AutoTokenizer differs on text {i}"
        assert auto(text)["input_ids"] == ids, f"AutoTokenizer with special tokens differs on text {i}"
        if text:
            p = os.path.join(tmp, "text.txt")
            with open(p, "w", encoding="utf-8", newline="") as f:
                f.write(text)
            assert ztrain_ids(tok_dir, p, tmp) == ids, f"ztrain differs on text {i}"
        assert fast.decode(ids, skip_special_tokens=False) == text, f"decode of text {i}"
        assert auto.decode(ids) == text, f"AutoTokenizer decode of text {i}"
        cases.append({"text": text, "ids": ids, "decoded": text})
    return cases, fast.get_vocab_size()


def main():
    with tempfile.TemporaryDirectory() as tmp:
        # the demo corpus, 2048 tokens: checked, not stored
        corpus = os.path.join(tmp, "corpus.txt")
        with open(corpus, "wb") as out:
            for p in sorted(glob.glob("/usr/share/common-licenses/*")):
                if os.path.isfile(p) and not os.path.islink(p):
                    out.write(open(p, "rb").read())
        d = os.path.join(tmp, "demo_tok")
        subprocess.run([ZTRAIN, "tokenizer", "train", "--input", corpus, "--vocab_size", "2048",
                        "--output_dir", d], check=True)
        text = open(corpus, encoding="utf-8").read()
        check(d, [text], tmp)
        print("demo corpus: tokenizers, AutoTokenizer and ztrain agree on", len(text), "characters")

        # the committed fixture
        os.makedirs(FIXTURE, exist_ok=True)
        subprocess.run([ZTRAIN, "tokenizer", "train", "--input", TEXT, "--vocab_size", "400",
                        "--output_dir", FIXTURE], check=True)
        texts = [open(TEXT, encoding="utf-8", newline="").read()] + CASES
        cases, vocab = check(FIXTURE, texts, tmp)
        with open(os.path.join(FIXTURE, "expected.json"), "w", encoding="utf-8") as f:
            json.dump({"tokenizers_version": tokenizers.__version__,
                       "transformers_version": transformers.__version__,
                       "vocab_size": vocab, "cases": cases}, f, ensure_ascii=False)
        print("fixture:", FIXTURE, vocab, "tokens;", len(cases), "cases agree")


if __name__ == "__main__":
    main()
