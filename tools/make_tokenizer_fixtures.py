#!/usr/bin/env python3
"""Dev-time: train small tokenizers of both families with the PyPI `tokenizers`
package and store, for each, tokenizer.json and the ids that package gives for
test texts.  tests/test_tokenizer.c compares ztrain's ids with these exactly.

    python3 -m venv .venv-tok && .venv-tok/bin/pip install tokenizers
    .venv-tok/bin/python tools/make_tokenizer_fixtures.py

Writes tests/fixtures/text/multilingual.txt (Unicode test text, CRLF lines
included) and tests/fixtures/tokenizers/NAME/ for NAME in gpt2, llama3, llama2
and three variants of the same vocabularies (gpt2_prefix: add_prefix_space;
llama2_metaspace_first / _split: the Metaspace pre-tokenizer instead of
Llama-2's normalizer):
  tokenizer.json, tokenizer_config.json, expected.json
    expected.json: {"tokenizers_version", "cases": [{"text", "ids", "decoded"}]}
Training text: the licences under /usr/share/common-licenses plus the
multilingual text, so merges include accented, CJK and emoji sequences.
"""
import glob
import json
import os

from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
import tokenizers

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIX = os.path.join(ROOT, "tests", "fixtures")

GPT2_PATTERN = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                  r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

MULTILINGUAL = (
    "Tokenizers split text before merging bytes: here is some English, naïve café résumé, "
    "and Ångström über Straße.\r\n"
    "Français : « l'été où j'ai vu la mer » — c'est déjà ça !\r\n"
    "Español: ¿Dónde está el niño? ¡Mañana!\n"
    "Русский текст: Привет, как дела? Ελληνικά: Καλημέρα κόσμε.\n"
    "中文：我们在训练一个语言模型。日本語：東京は大きい都市です。한국어: 안녕하세요.\n"
    "Emoji 🙂🚀 and 👩‍💻 with flags 🇫🇷, skin tones 👍🏽, and ✨sparkles✨.\n"
    "Numbers: 1234567 3.14159 1,000,000 ٣٤٥ ⅫⅣ ½ and ²³.\n"
    "Contractions: don't, I'M, they'RE, we've, she'll, it'd, 'S 'ſ x'Ll o'clock ''s.\n"
    "Mixed   spaces\tand\ttabs  \t here;\u00a0no-break\u3000ideographic\u2003em-space.\n"
    "  leading spaces, trailing spaces   \n"
    "\n\n\nthree blank lines above, CRLF below\r\n\r\n"
    "Code: if (x != y) { return a->b[i] * 2; } // done\n"
    "Special tokens inline: <|endoftext|> and </s> and <s>hello</s><|end_of_text|>.\n"
    "Control: \x1c\x1f\x7f and a final line without newline ending in spaces   "
)

CASES = [
    "",
    "Hello world",
    " Hello  world ",
    "\n",
    "\r\n\r\n",
    "   ",
    "a\n\nb",
    "x  \n  y",
    "don't DON'T",
    "12345678901",
    "<|endoftext|>",
    "<s>",
    "</s></s>",
    "<|endoftext|><|endoftext|>x",
    "🙂",
    "日本語",
    "e\u0301",
    " \u00a0 ",
    "tab\t\tend\t",
    "...!!!\n\n",
    "((hello))",
    " 's 're",
]


def training_text():
    parts = []
    for path in sorted(glob.glob("/usr/share/common-licenses/*")):
        if os.path.isfile(path):
            with open(path, encoding="utf-8", errors="replace") as f:
                parts.append(f.read())
    parts.append(MULTILINGUAL * 3)
    return parts


def byte_level(pattern_kind):
    tok = Tokenizer(models.BPE(ignore_merges=(pattern_kind == "llama3")))
    if pattern_kind == "gpt2":
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        specials = ["<|endoftext|>"]
        config = {"bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>", "unk_token": "<|endoftext|>"}
    else:
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(LLAMA3_PATTERN), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ])
        specials = ["<|begin_of_text|>", "<|end_of_text|>"]
        config = {"bos_token": "<|begin_of_text|>", "eos_token": "<|end_of_text|>"}
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=1200, special_tokens=specials,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(training_text(), trainer)
    return tok, config


def llama2():
    # Trained on words (Metaspace splits at "▁"), then given Llama-2's runtime
    # form: normalizer Prepend + Replace, no pre-tokenizer, byte fallback.
    tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always", split=True)
    byte_tokens = ["<0x%02X>" % b for b in range(256)]
    trainer = trainers.BpeTrainer(vocab_size=1500, special_tokens=["<unk>", "<s>", "</s>"] + byte_tokens,
                                  limit_alphabet=120, show_progress=False)
    tok.train_from_iterator(training_text(), trainer)
    j = json.loads(tok.to_str())
    j["added_tokens"] = [a for a in j["added_tokens"] if a["content"] in ("<unk>", "<s>", "</s>")]
    j["normalizer"] = {"type": "Sequence", "normalizers": [
        {"type": "Prepend", "prepend": "▁"},
        {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]}
    j["pre_tokenizer"] = None
    j["decoder"] = {"type": "Sequence", "decoders": [
        {"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
        {"type": "ByteFallback"}, {"type": "Fuse"},
        {"type": "Strip", "content": " ", "start": 1, "stop": 0}]}
    tok = Tokenizer.from_str(json.dumps(j))
    return tok, {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}


def variant(tok, edit):
    """The same vocabulary and merges with other pre-tokenizer/decoder settings."""
    j = json.loads(tok.to_str())
    edit(j)
    return Tokenizer.from_str(json.dumps(j))


def gpt2_prefix(j):
    j["pre_tokenizer"]["add_prefix_space"] = True


def metaspace_first(j):
    # newer Llama/Mistral conversions: no normalizer, Metaspace prepending "▁"
    # only at the start of the text, the Llama-2 decoder
    j["normalizer"] = None
    j["pre_tokenizer"] = {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first", "split": False}


def metaspace_split(j):
    j["normalizer"] = None
    j["pre_tokenizer"] = {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always", "split": True}
    j["decoder"] = {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always", "split": True}


def main():
    os.makedirs(os.path.join(FIX, "text"), exist_ok=True)
    with open(os.path.join(FIX, "text", "multilingual.txt"), "w", encoding="utf-8", newline="") as f:
        f.write(MULTILINGUAL)
    made = {"gpt2": byte_level("gpt2"), "llama3": byte_level("llama3"), "llama2": llama2()}
    made["gpt2_prefix"] = (variant(made["gpt2"][0], gpt2_prefix), made["gpt2"][1])
    made["llama2_metaspace_first"] = (variant(made["llama2"][0], metaspace_first), made["llama2"][1])
    made["llama2_metaspace_split"] = (variant(made["llama2"][0], metaspace_split), made["llama2"][1])
    for name, (tok, config) in made.items():
        d = os.path.join(FIX, "tokenizers", name)
        os.makedirs(d, exist_ok=True)
        tok.save(os.path.join(d, "tokenizer.json"))
        with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
            json.dump(dict(config, tokenizer_class="PreTrainedTokenizerFast"), f, indent=1)
        cases = []
        for text in [MULTILINGUAL] + CASES:
            ids = tok.encode(text, add_special_tokens=False).ids
            cases.append({"text": text, "ids": ids, "decoded": tok.decode(ids, skip_special_tokens=False)})
        with open(os.path.join(d, "expected.json"), "w", encoding="utf-8") as f:
            json.dump({"tokenizers_version": tokenizers.__version__, "vocab_size": tok.get_vocab_size(),
                       "cases": cases}, f, ensure_ascii=False)
        print(name, tok.get_vocab_size(), "tokens;", len(cases[0]["ids"]), "ids for the multilingual text")


if __name__ == "__main__":
    main()
