#!/usr/bin/env python3
"""tools/make_gguf_fixtures.py — the GGUF reader's fixtures (tests/test_gguf.c), and the
reference digests of SmolLM2-135M-Instruct as transformers reads its GGUF file.

    OMP_NUM_THREADS=1 /work/devvenv/bin/python tools/make_gguf_fixtures.py [SMOLLM2.gguf]

Writes tests/fixtures/gguf/:
  mixed.gguf      GGUF v3, llama architecture, one layer, hidden 256 (K-quant rows need 256),
                  4 heads / 2 KV heads, tied embeddings, one tensor type per tensor so that
                  every type ztrain dequantizes appears: BF16 embedding, Q4_K q, Q5_K k,
                  Q6_K v, Q8_0 o, Q4_0 gate, Q4_1 up, F16 down, F32 norms.  A byte-level BPE
                  tokenizer (type gpt2, pre "smollm") trained here on the GPL-3 text, with
                  special tokens and a chat template.
  untied_v2.gguf  GGUF v2 (version field 2; v2 and v3 lay out little-endian files alike),
                  two layers, hidden 64, 4 heads / 4 KV heads, F32 and F16 tensors and an
                  output.weight in Q8_0 (untied), tokenizer type gpt2, pre "llama-bpe": a
                  1024-token vocabulary trained with the Llama-3 split, on which some corpus
                  line encodes differently under GPT-2's regex (checked here).
  spm.gguf        GGUF v3, tokenizer type llama (SentencePiece, scores, no merges), F32.
  qwen2.gguf      GGUF v3, architecture qwen2 (q/k/v biases, rows not permuted), tied,
                  the Llama-3-split vocabulary with pre "default" (GPT-2's regex).
  NAME.json       what transformers' GGUF loader makes of NAME.gguf: the config keys that
                  matter, every parameter's shape and the SHA-256 of its fp32 bytes, and the
                  `tokenizers` ids of the corpus lines (add_special_tokens False and True).
  smollm2.json    the same for the SmolLM2 file (its tensors are not committed).
The quantized tensors' bytes are random (their fp16 scales set to finite values), so every
bit pattern of the quantized fields is exercised.  Deterministic for a given seed.

Versions used: see VERSIONS in the written JSON (gguf, transformers, tokenizers, torch, numpy).
"""

import hashlib
import importlib.metadata
import json
import os
import shutil
import sys
import tempfile

import numpy as np

sys.dont_write_bytecode = True
import gguf  # noqa: E402
import tokenizers  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402
from gguf import GGMLQuantizationType as T  # noqa: E402
from tokenizers import Tokenizer, models, pre_tokenizers, trainers, decoders  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "fixtures", "gguf")
TEXT_PATH = "/usr/share/common-licenses/GPL-3"
CHAT_TEMPLATE = ("{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + "
                 "message['content'] + '<|im_end|>\\n' }}{% endfor %}"
                 "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]

# config keys compared with ztrain's (the ones that change the model or name it)
CONFIG_KEYS = ["model_type", "hidden_size", "intermediate_size", "num_hidden_layers",
               "num_attention_heads", "num_key_value_heads", "head_dim", "vocab_size",
               "max_position_embeddings", "rms_norm_eps", "rope_theta", "tie_word_embeddings",
               "bos_token_id", "eos_token_id", "pad_token_id"]


def corpus_lines():
    """The lines whose ids are compared: English, digits, code, whitespace runs, the
    special tokens inside text, and non-Latin scripts."""
    with open(os.path.join(ROOT, "tests", "fixtures", "text", "multilingual.txt"), encoding="utf-8") as f:
        multi = [ln.rstrip("\n") for ln in f if ln.strip()][:12]
    return [
        "The capital of France is Paris.",
        "What is 12345 + 678? It is 13023, or 1.3e4.",
        "def f(x):\n    return x**2  # square\n\n\n",
        "  leading and trailing spaces   ",
        "<|im_start|>user\nHello there!<|im_end|>\n<|im_start|>assistant\n",
        "don't won't I'll we've they're SHE'S",
        "tabs\tand\r\nwindows newlines",
        "Copyright (C) 2007 Free Software Foundation, Inc. 3.14159265",
        ",hello;world...and(parentheses)",
    ] + multi


LLAMA3_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
                r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")


def byte_level(split):
    """GPT-2's ByteLevel regex, or (split "llama3") the Llama-3 split before ByteLevel."""
    if split != "llama3":
        return pre_tokenizers.ByteLevel(add_prefix_space=False)
    return pre_tokenizers.Sequence([pre_tokenizers.Split(tokenizers.Regex(LLAMA3_SPLIT), behavior="isolated"),
                                    pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])


def train_bpe(vocab_size, split="gpt2"):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = byte_level(split)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIALS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train([TEXT_PATH], trainer)
    spec = json.loads(tok.to_str())
    vocab = spec["model"]["vocab"]
    tokens = [None] * len(vocab)
    for t, i in vocab.items():
        tokens[i] = t
    merges = [m if isinstance(m, str) else " ".join(m) for m in spec["model"]["merges"]]
    return tokens, merges, tok


def splits_matter(tok, lines):
    """The Llama-3 vocabulary's ids under the other pre-tokenizer differ on some line, so
    the test would see a converter that ignored tokenizer.ggml.pre."""
    other = Tokenizer.from_str(tok.to_str())
    other.pre_tokenizer = byte_level("gpt2")
    return any(tok.encode(t).ids != other.encode(t).ids for t in lines)


def add_tokenizer(w, tokens, merges, pre):
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre(pre)
    w.add_token_list(tokens)
    w.add_token_types([3 if t in SPECIALS else 1 for t in tokens])
    w.add_token_merges(merges)
    w.add_bos_token_id(tokens.index("<|im_start|>"))
    w.add_eos_token_id(tokens.index("<|im_end|>"))
    w.add_pad_token_id(tokens.index("<|endoftext|>"))
    w.add_add_bos_token(False)
    w.add_chat_template(CHAT_TEMPLATE)


def quant_bytes(rng, qtype, rows, cols):
    """Random blocks of qtype for a rows x cols tensor, fp16 scale fields made finite:
    d in [0.001, 0.03), and Q4_1's m / the K-quants' dmin in [-0.03, 0.03) / [0, 0.01)."""
    block, nbytes = gguf.GGML_QUANT_SIZES[qtype]
    nblk = rows * cols // block
    b = rng.integers(0, 256, size=(nblk, nbytes), dtype=np.uint8)

    def put(off, lo, hi):
        b[:, off:off + 2] = rng.uniform(lo, hi, nblk).astype(np.float16).view(np.uint8).reshape(nblk, 2)

    if qtype == T.Q6_K:
        put(208, 0.001, 0.03)
    else:
        put(0, 0.001, 0.03)
    if qtype == T.Q4_1:
        put(2, -0.03, 0.03)
    if qtype in (T.Q4_K, T.Q5_K):
        put(2, 0.0, 0.01)
    return b.reshape(rows, cols // block * nbytes)


def add(w, rng, name, shape, qtype):
    """shape in HF order (rows, cols); GGUF stores it innermost first."""
    if qtype in (T.F32, T.F16):
        x = (rng.standard_normal(shape) * 0.05).astype(np.float32 if qtype == T.F32 else np.float16)
        if name.endswith("norm.weight"):
            x = (1 + x).astype(x.dtype)
        w.add_tensor(name, x)
    elif qtype == T.BF16:
        x = (rng.standard_normal(shape) * 0.05).astype(np.float32)
        w.add_tensor(name, gguf.quants.quantize(x, T.BF16), raw_dtype=T.BF16)
    else:
        w.add_tensor(name, quant_bytes(rng, qtype, *shape), raw_dtype=qtype)


def write_model(path, arch_kv, layer_types, other_types, tokens, merges, pre, seed, version, arch="llama"):
    rng = np.random.default_rng(seed)
    C, F, L, nh, nkv, hd = (arch_kv[k] for k in ("C", "F", "L", "nh", "nkv", "hd"))
    w = gguf.GGUFWriter(path, arch)
    w.add_block_count(L)
    w.add_context_length(arch_kv["ctx"])
    w.add_embedding_length(C)
    w.add_feed_forward_length(F)
    w.add_head_count(nh)
    w.add_head_count_kv(nkv)
    w.add_rope_freq_base(arch_kv["theta"])
    w.add_layer_norm_rms_eps(arch_kv["eps"])
    w.add_rope_dimension_count(hd)
    w.add_vocab_size(len(tokens))
    add_tokenizer(w, tokens, merges, pre)
    V = len(tokens)
    add(w, rng, "token_embd.weight", (V, C), other_types["embd"])
    shapes = {"attn_q": (nh * hd, C), "attn_k": (nkv * hd, C), "attn_v": (nkv * hd, C),
              "attn_output": (C, nh * hd), "ffn_gate": (F, C), "ffn_up": (F, C), "ffn_down": (C, F)}
    for i in range(L):
        add(w, rng, f"blk.{i}.attn_norm.weight", (C,), T.F32)
        add(w, rng, f"blk.{i}.ffn_norm.weight", (C,), T.F32)
        for short, shape in shapes.items():
            add(w, rng, f"blk.{i}.{short}.weight", shape, layer_types[short])
        if arch == "qwen2":  # Qwen2's q, k and v carry biases
            for short in ("attn_q", "attn_k", "attn_v"):
                add(w, rng, f"blk.{i}.{short}.bias", (shapes[short][0],), T.F32)
    add(w, rng, "output_norm.weight", (C,), T.F32)
    if "output" in other_types:
        add(w, rng, "output.weight", (V, C), other_types["output"])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    if version != 3:
        with open(path, "r+b") as f:
            f.seek(4)
            f.write(version.to_bytes(4, "little"))


def reference(path):
    """What transformers makes of the file: config, parameters, tokenizer ids."""
    d, name = os.path.split(os.path.abspath(path))
    cfg = transformers.AutoConfig.from_pretrained(d, gguf_file=name).to_dict()
    model = transformers.AutoModelForCausalLM.from_pretrained(d, gguf_file=name, dtype=torch.float32)
    tok = transformers.AutoTokenizer.from_pretrained(d, gguf_file=name)
    tensors = []
    for k, v in model.state_dict().items():
        if k == "lm_head.weight" and cfg.get("tie_word_embeddings"):
            continue
        a = v.detach().float().contiguous().numpy()
        tensors.append([k, list(a.shape), hashlib.sha256(a.astype("<f4").tobytes()).hexdigest()])
    config = {k: cfg.get(k) for k in CONFIG_KEYS}
    if config["rope_theta"] is None:  # transformers 5 keeps it in rope_parameters
        config["rope_theta"] = cfg["rope_parameters"]["rope_theta"]
    if config["head_dim"] is None:  # Qwen2Config has none: its attention uses hidden_size / heads
        config["head_dim"] = config["hidden_size"] // config["num_attention_heads"]
    backend = tok.backend_tokenizer
    lines = corpus_lines()
    ids = [backend.encode(t, add_special_tokens=False).ids for t in lines]
    ids_special = [backend.encode(t, add_special_tokens=True).ids for t in lines]
    return {
        "versions": {"gguf": importlib.metadata.version("gguf"),
                     "transformers": transformers.__version__, "tokenizers": tokenizers.__version__,
                     "torch": torch.__version__, "numpy": np.__version__},
        "config": config,
        "tensors": tensors,
        "corpus": lines,
        "ids": ids,
        "ids_special": ids_special,
    }


def save_json(name, obj):
    with open(os.path.join(OUT, name), "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=1, ensure_ascii=False)
        f.write("\n")


def write_seeds():
    """The fuzzer's seeds (tests/fuzz/corpus/gguf), a few KB each: one tensor of every
    type the reader knows (Q5_0 among them, which it refuses to dequantize), and a whole
    one-layer model with a 13-token tokenizer."""
    seeds = os.path.join(ROOT, "tests", "fuzz", "corpus", "gguf")
    os.makedirs(seeds, exist_ok=True)
    rng = np.random.default_rng(3)
    w = gguf.GGUFWriter(os.path.join(seeds, "types.gguf"), "llama")
    add(w, rng, "f32", (2, 4), T.F32)
    add(w, rng, "f16", (2, 4), T.F16)
    add(w, rng, "bf16", (2, 4), T.BF16)
    for q in (T.Q8_0, T.Q4_0, T.Q4_1, T.Q5_0):
        add(w, rng, q.name.lower(), (1, 32), q)
    for q in (T.Q4_K, T.Q5_K, T.Q6_K):
        add(w, rng, q.name.lower(), (1, 256), q)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    tokens = list("abcdefgh") + ["ab", "cd"] + SPECIALS
    write_model(os.path.join(seeds, "model.gguf"), dict(C=8, F=8, L=1, nh=2, nkv=1, hd=4, ctx=16, theta=1e4,
                                                       eps=1e-5), {k: T.F32 for k in LAYER_NAMES}, {"embd": T.F16},
                tokens, ["a b", "c d"], "llama-bpe", seed=4, version=3)


def write_spm(path):
    """A SentencePiece ("llama") tokenizer without merges, as llama.cpp writes Llama 2's:
    the vocabulary of tests/fixtures/tokenizers/llama2 (unk, bos, eos, 256 byte tokens,
    pieces) with scores falling by rank (four tokens to a score), token types unknown/control/byte/normal; the
    loader recovers the merges from the scores.  A one-layer F32 model around it."""
    with open(os.path.join(ROOT, "tests", "fixtures", "tokenizers", "llama2", "tokenizer.json"),
              encoding="utf-8") as f:
        vocab = json.load(f)["model"]["vocab"]
    tokens = [None] * len(vocab)
    for t, i in vocab.items():
        tokens[i] = t
    rng = np.random.default_rng(5)
    w = gguf.GGUFWriter(path, "llama")
    w.add_block_count(1)
    w.add_context_length(64)
    w.add_embedding_length(16)
    w.add_feed_forward_length(32)
    w.add_head_count(2)
    w.add_head_count_kv(1)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_tokenizer_model("llama")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    # scores tied in fours, so that the tie-breaks (longer left half, then right) decide too
    w.add_token_scores([0.0] * 259 + [-float(i // 4) for i in range(len(tokens) - 259)])
    w.add_token_types([2, 3, 3] + [6] * 256 + [1] * (len(tokens) - 259))
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    w.add_chat_template(CHAT_TEMPLATE)
    add(w, rng, "token_embd.weight", (len(tokens), 16), T.F32)
    shapes = {"attn_q": (16, 16), "attn_k": (8, 16), "attn_v": (8, 16), "attn_output": (16, 16),
              "ffn_gate": (32, 16), "ffn_up": (32, 16), "ffn_down": (16, 32)}
    add(w, rng, "blk.0.attn_norm.weight", (16,), T.F32)
    add(w, rng, "blk.0.ffn_norm.weight", (16,), T.F32)
    for short, shape in shapes.items():
        add(w, rng, f"blk.0.{short}.weight", shape, T.F32)
    add(w, rng, "output_norm.weight", (16,), T.F32)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


LAYER_NAMES = ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down")


def main():
    os.makedirs(OUT, exist_ok=True)
    write_seeds()
    tokens, merges, _ = train_bpe(384)
    mixed = {"attn_q": T.Q4_K, "attn_k": T.Q5_K, "attn_v": T.Q6_K, "attn_output": T.Q8_0,
             "ffn_gate": T.Q4_0, "ffn_up": T.Q4_1, "ffn_down": T.F16}
    write_model(os.path.join(OUT, "mixed.gguf"),
                dict(C=256, F=256, L=1, nh=4, nkv=2, hd=64, ctx=512, theta=100000.0, eps=1e-5),
                mixed, {"embd": T.BF16}, tokens, merges, "smollm", seed=1, version=3)
    tokens, merges, tok = train_bpe(1024, "llama3")
    assert splits_matter(tok, corpus_lines()), "no corpus line tells the Llama-3 split from GPT-2's"
    plain = {k: T.F16 for k in mixed}
    plain["attn_q"] = T.F32
    write_model(os.path.join(OUT, "untied_v2.gguf"),
                dict(C=64, F=96, L=2, nh=4, nkv=4, hd=16, ctx=256, theta=10000.0, eps=1e-6),
                plain, {"embd": T.F16, "output": T.Q8_0}, tokens, merges, "llama-bpe", seed=2, version=2)
    write_spm(os.path.join(OUT, "spm.gguf"))
    write_model(os.path.join(OUT, "qwen2.gguf"),
                dict(C=64, F=96, L=1, nh=4, nkv=2, hd=16, ctx=128, theta=1000000.0, eps=1e-6),
                {k: T.F32 for k in LAYER_NAMES}, {"embd": T.F16}, tokens, merges, "default", seed=6, version=3,
                arch="qwen2")
    for name in ("mixed", "untied_v2", "spm", "qwen2"):
        save_json(name + ".json", reference(os.path.join(OUT, name + ".gguf")))
    if len(sys.argv) > 1:
        save_json("smollm2.json", reference(sys.argv[1]))


if __name__ == "__main__":
    main()
