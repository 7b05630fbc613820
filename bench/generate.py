"""Generation speed: `ztrain generate` against Hugging Face's LlamaForCausalLM.generate
(greedy, fp32, same weights, same prompt ids, same thread count) on config b's size.

Both load the model that `ztrain init-model` writes from bench/configs/<config>/config.json
(random weights: the speed of a decode does not depend on what the weights say).  The
prompt is --prompt_tokens ids of English text, encoded by a byte-level BPE that
`ztrain tokenizer train` fits to the Debian licence texts (ztrain needs a tokenizer for a
vocabulary above 256; PyTorch gets the same ids).  Each side generates --new_tokens
tokens greedily (no eos), in its own child process:

  ztrain   build/ztrain generate --threads T: its own timing line on stderr (the prompt's
           prefill and the decode, loading excluded)
  PyTorch  transformers' LlamaForCausalLM (eager attention, use_cache=True),
           torch.set_num_threads(T); perf_counter around model.generate(...)

tokens/s = new tokens / (prefill + decode seconds).  With --repeat N each side runs N
times, alternating, and keeps its fastest run.  The two continuations are compared
(as text, decoded by the same tokenizer) and the first difference reported: with random
weights the logits are nearly tied, so a difference in the last bits of the arithmetic
may change the argmax; the tests check exact greedy equality on a fixture whose
logits are well separated (tests/test_generate.c).

Dev-time: needs transformers beside Debian's torch 1.13, e.g.
    /usr/bin/python3 -m venv --system-site-packages /tmp/venv
    /tmp/venv/bin/pip install transformers==4.38.2
    /tmp/venv/bin/python bench/generate.py --threads 2
"""

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
ZTRAIN = os.path.join(ROOT, "build", "ztrain")
TEXT = "/usr/share/common-licenses/GPL-3"


def run(cmd, **kw):
    return subprocess.run(cmd, check=True, capture_output=True, text=True, **kw)


def torch_child(model_dir, ids, new_tokens, threads):
    """Runs in a child process: load, generate, print JSON with the time and ids."""
    import torch
    import transformers
    torch.set_num_threads(threads)
    model = transformers.LlamaForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32).eval()
    inp = torch.tensor([ids])
    with torch.no_grad():
        t0 = time.perf_counter()
        out = model.generate(inp, attention_mask=torch.ones_like(inp), max_new_tokens=new_tokens,
                             min_new_tokens=new_tokens, do_sample=False, pad_token_id=0, eos_token_id=None)
        dt = time.perf_counter() - t0
    print(json.dumps({"seconds": dt, "ids": out[0, len(ids):].tolist()}))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", default="b")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--prompt_tokens", type=int, default=32)
    ap.add_argument("--new_tokens", type=int, default=128)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        torch_child(a.child[0], json.loads(a.child[1]), a.new_tokens, int(a.child[2]))
        return

    import tokenizers
    tmp = tempfile.mkdtemp(prefix="zt_bench_gen_")
    cfg = os.path.join(HERE, "configs", a.config, "config.json")
    vocab = json.load(open(cfg))["vocab_size"]
    model = os.path.join(tmp, "model")
    run([ZTRAIN, "init-model", "--model_config", cfg, "--output_dir", model, "--seed", "1"])
    tok = os.path.join(tmp, "tok")
    run([ZTRAIN, "tokenizer", "train", "--input", TEXT, "--vocab_size", str(min(vocab, 4096)),
         "--output_dir", tok])
    tk = tokenizers.Tokenizer.from_file(os.path.join(tok, "tokenizer.json"))
    text = open(TEXT, encoding="utf-8").read()
    ids = tk.encode(text[text.index("The licenses for most"):]).ids[:a.prompt_tokens]
    prompt = tk.decode(ids)
    assert tk.encode(prompt).ids == ids, "the prompt does not round-trip through the tokenizer"

    best = {"ztrain": None, "pytorch": None}
    texts = {}
    for rep in range(a.repeat):
        r = run([ZTRAIN, "generate", "--model", model, "--tokenizer", tok, "--prompt", prompt,
                 "--max_new_tokens", str(a.new_tokens), "--threads", str(a.threads), "--torch_dtype", "fp32"])
        m = re.search(r"(\d+) prompt tokens in ([\d.]+) s; (\d+) new tokens in ([\d.]+) s", r.stderr)
        assert m and int(m.group(1)) == len(ids) and int(m.group(3)) == a.new_tokens, r.stderr
        s = float(m.group(2)) + float(m.group(4))
        texts["ztrain"] = r.stdout
        best["ztrain"] = s if best["ztrain"] is None else min(best["ztrain"], s)
        r = run([sys.executable, os.path.abspath(__file__), "--new_tokens", str(a.new_tokens),
                 "--child", model, json.dumps(ids), str(a.threads)])
        res = json.loads(r.stdout.strip().splitlines()[-1])
        texts["pytorch"] = tk.decode(res["ids"])
        best["pytorch"] = res["seconds"] if best["pytorch"] is None else min(best["pytorch"], res["seconds"])
        print("run %d: ztrain %.2f s, PyTorch %.2f s" % (rep + 1, s, res["seconds"]), flush=True)

    n = a.new_tokens
    print("\nconfig %s (vocab %d), fp32, greedy, %d prompt + %d new tokens, %d threads, best of %d:"
          % (a.config, vocab, len(ids), n, a.threads, a.repeat))
    print("| | seconds | tokens/s |\n|---|---|---|")
    for k in ("ztrain", "pytorch"):
        print("| %s | %.2f | %.1f |" % (k, best[k], n / best[k]))
    print("ztrain / PyTorch: %.2fx" % (best["pytorch"] / best["ztrain"]))
    zt, pt = texts["ztrain"], texts["pytorch"]
    if zt == pt:
        print("continuations: identical text")
    else:
        i = next((k for k in range(min(len(zt), len(pt))) if zt[k] != pt[k]), min(len(zt), len(pt)))
        print("continuations differ from character %d of %d (random weights: near-tied logits)" % (i, len(pt)))


if __name__ == "__main__":
    main()
