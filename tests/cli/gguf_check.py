#!/usr/bin/env python3
"""gguf_check.py MODEL_DIR FILE.gguf OUTTYPE — check a GGUF file ztrain exported
against its source with the gguf package (llama.cpp's own Python reader and
quantizers): every tensor under its GGUF name, q/k rows permuted as llama.cpp's
converter permutes them, norms in F32, the matrices in OUTTYPE, bit for bit what
gguf.quants.quantize makes of the source (F32 equal, F16/BF16/Q8_0 the package's
rounding), and the metadata: llama.* from config.json, the tokenizer from
tokenizer.json and tokenizer_config.json.  Prints one line per failed check;
exit 1 when any.  Runs with numpy and gguf only (the arrow venv)."""
import json
import os
import sys

import numpy as np
from gguf import GGMLQuantizationType as Q, GGUFReader
from gguf.quants import quantize

model, path, outtype = sys.argv[1], sys.argv[2], sys.argv[3]
fails = []


def check(cond, what):
    if not cond:
        fails.append(what)


def safetensors(dirname):
    """name -> float32 array of every tensor of the directory's model.safetensors."""
    out = {}
    with open(os.path.join(dirname, "model.safetensors"), "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(n))
        data = f.read()
    for name, t in header.items():
        if name == "__metadata__":
            continue
        a, b = t["data_offsets"]
        raw = np.frombuffer(data[a:b], dtype={"F32": np.float32, "F16": np.float16, "BF16": np.uint16}[t["dtype"]])
        if t["dtype"] == "BF16":
            raw = (raw.astype(np.uint32) << 16).view(np.float32)
        out[name] = raw.astype(np.float32).reshape(t["shape"])
    return out


cfg = json.load(open(os.path.join(model, "config.json")))
arch = "qwen2" if cfg.get("model_type") == "qwen2" else "llama"  # llama.cpp's architecture
nh, nkv = cfg["num_attention_heads"], cfg.get("num_key_value_heads", cfg["num_attention_heads"])
hd = cfg.get("head_dim") or cfg["hidden_size"] // nh


def permute(w, heads):
    # llama.cpp's converter: each head's rows (2, hd/2) -> (hd/2, 2)
    return w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def gguf_name(hf):
    short = {"input_layernorm.weight": "attn_norm.weight", "self_attn.q_proj.weight": "attn_q.weight",
             "self_attn.k_proj.weight": "attn_k.weight", "self_attn.v_proj.weight": "attn_v.weight",
             "self_attn.q_proj.bias": "attn_q.bias", "self_attn.k_proj.bias": "attn_k.bias",
             "self_attn.v_proj.bias": "attn_v.bias",
             "self_attn.o_proj.weight": "attn_output.weight", "post_attention_layernorm.weight": "ffn_norm.weight",
             "mlp.gate_proj.weight": "ffn_gate.weight", "mlp.up_proj.weight": "ffn_up.weight",
             "mlp.down_proj.weight": "ffn_down.weight"}
    root = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
            "lm_head.weight": "output.weight"}
    if hf in root:
        return root[hf]
    parts = hf.split(".", 3)  # model, layers, N, rest
    return f"blk.{parts[2]}.{short[parts[3]]}"


want_type = {"f32": Q.F32, "f16": Q.F16, "bf16": Q.BF16, "q8_0": Q.Q8_0}[outtype]
src = safetensors(model)
if cfg.get("tie_word_embeddings"):
    src.pop("lm_head.weight", None)
r = GGUFReader(path)
tensors = {t.name: t for t in r.tensors}
rs = cfg.get("rope_scaling") or {}
llama3 = rs.get("rope_type", rs.get("type")) == "llama3"
check(len(tensors) == len(src) + llama3, f"{len(tensors)} tensors in the file, {len(src)} in the model")
if llama3:
    # llama.cpp's converter: the factor dividing each RoPE frequency (float32
    # frequencies, the rest in double), as rope_freqs.weight
    base, L = cfg.get("rope_theta", 10000.0), rs["original_max_position_embeddings"]
    lo, hi, factor = rs["low_freq_factor"], rs["high_freq_factor"], rs["factor"]
    want = []
    for f in 1.0 / (np.float32(base) ** (np.arange(0, hd, 2, dtype=np.float32) / np.float32(hd))):
        w = 2 * np.pi / float(f)
        smooth = (L / w - lo) / (hi - lo)
        want.append(1.0 if w < L / hi else factor if w > L / lo else 1 / ((1 - smooth) / factor + smooth))
    g = tensors.get("rope_freqs.weight")
    check(g is not None and g.tensor_type == Q.F32 and np.allclose(np.asarray(g.data), want, rtol=1e-6, atol=0),
          f"rope_freqs.weight {None if g is None else np.asarray(g.data)}, want {want}")
for name, w in src.items():
    g = tensors.get(gguf_name(name))
    if g is None:
        fails.append(f"{gguf_name(name)} ({name}) missing")
        continue
    if arch == "llama" and name.endswith("q_proj.weight"):
        w = permute(w, nh)
    elif arch == "llama" and name.endswith("k_proj.weight"):
        w = permute(w, nkv)  # qwen2's rows stay: llama.cpp rotates them as HF does
    check(list(g.shape) == list(reversed(w.shape)), f"{g.name}: dims {list(g.shape)}, want {list(reversed(w.shape))}")
    t = Q.F32 if w.ndim == 1 else want_type
    if t == Q.Q8_0 and w.shape[-1] % 32:
        t = Q.F16  # the converter's fallback for rows that do not fill blocks
    check(g.tensor_type == t, f"{g.name}: type {g.tensor_type.name}, want {t.name}")
    expect = w if t == Q.F32 else quantize(w, t)
    got = np.asarray(g.data)
    check(got.tobytes() == np.ascontiguousarray(expect).tobytes(), f"{g.name}: data differs from gguf.quants.quantize")

fields = {f.name: f for f in r.fields.values()}


def val(key):
    f = fields.get(key)
    return None if f is None else f.contents()


check(val("general.architecture") == arch, f"general.architecture {val('general.architecture')}")
for key, want in [("block_count", cfg["num_hidden_layers"]), ("embedding_length", cfg["hidden_size"]),
                  ("feed_forward_length", cfg["intermediate_size"]), ("attention.head_count", nh),
                  ("attention.head_count_kv", nkv), ("rope.dimension_count", hd),
                  ("context_length", cfg["max_position_embeddings"]), ("vocab_size", cfg["vocab_size"])]:
    check(val(f"{arch}.{key}") == want, f"{arch}.{key} = {val(f'{arch}.{key}')}, want {want}")
want_ft = {"f32": 0, "f16": 1, "bf16": 32, "q8_0": 7}[outtype]
check(val("general.file_type") == want_ft, f"general.file_type {val('general.file_type')}, want {want_ft}")
for key, want in [(f"{arch}.rope.freq_base", cfg.get("rope_theta", 10000.0)),
                  (f"{arch}.attention.layer_norm_rms_epsilon", cfg.get("rms_norm_eps", 1e-6))]:
    check(val(key) == np.float32(want), f"{key} = {val(key)}, want {np.float32(want)}")

tok_path = os.path.join(model, "tokenizer.json")
if os.path.exists(tok_path):
    tj = json.load(open(tok_path))
    vocab = dict(tj["model"]["vocab"])
    for a in tj.get("added_tokens", []):
        vocab[a["content"]] = a["id"]
    tokens = val("tokenizer.ggml.tokens")
    check(tokens is not None and len(tokens) == cfg["vocab_size"], "tokenizer.ggml.tokens: not one per id")
    check(all(tokens[i] == t for t, i in vocab.items()), "tokenizer.ggml.tokens differ from tokenizer.json's vocab")
    types = val("tokenizer.ggml.token_type")
    special = {a["id"] for a in tj.get("added_tokens", []) if a.get("special")}
    spm = bool(tj["model"].get("byte_fallback"))  # SentencePiece-style: llama.cpp's "llama" type
    unk = vocab.get(tj["model"].get("unk_token")) if spm else None

    def want_type(t, i):  # llama.cpp's types: 1 normal, 2 unknown, 3 control, 6 byte
        return 2 if i == unk else 3 if i in special else 6 if spm and len(t) == 6 and t.startswith("<0x") else 1
    check(all(types[i] == want_type(t, i) for t, i in vocab.items()), "tokenizer.ggml.token_type")
    merges = [m if isinstance(m, str) else " ".join(m) for m in tj["model"]["merges"]]
    check(val("tokenizer.ggml.merges") == merges, "tokenizer.ggml.merges differ from tokenizer.json's")
    check(val("tokenizer.ggml.model") == ("llama" if spm else "gpt2"), f"tokenizer.ggml.model {val('tokenizer.ggml.model')}")
    check(val("tokenizer.ggml.pre") == os.environ.get("WANT_PRE", "default" if spm else "llama-bpe"),
          f"tokenizer.ggml.pre {val('tokenizer.ggml.pre')}")
    if spm:
        # the merge that first makes a token sets its score: -rank, so llama.cpp's
        # highest-score-first merging follows BPE's order
        scores = val("tokenizer.ggml.scores")
        first = {}
        for k, m in enumerate(merges):
            first.setdefault(vocab.get(m.replace(" ", "", 1)), k)
        check(all(scores[i] == -k for i, k in first.items() if i is not None), "tokenizer.ggml.scores: merge order")
        check(all(scores[i] < -1e5 for i in vocab.values() if i not in first), "tokenizer.ggml.scores: unmerged tokens")
    tc = json.load(open(os.path.join(model, "tokenizer_config.json")))
    for key, gkey in [("bos_token", "bos_token_id"), ("eos_token", "eos_token_id")]:
        if key in tc:
            check(val("tokenizer.ggml." + gkey) == vocab[tc[key]], f"tokenizer.ggml.{gkey} {val('tokenizer.ggml.' + gkey)}")
    check(val("tokenizer.chat_template") == tc.get("chat_template"), "tokenizer.chat_template")

for f in fails:
    print("  " + f)
sys.exit(1 if fails else 0)
