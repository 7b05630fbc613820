"""Speed on the real model (issue 40, point 7): SmolLM2-135M-Instruct, ztrain against PyTorch
with transformers' LlamaForCausalLM, side by side in one run, alternated and repeated.

The model is the GGUF file scripts/setup.sh installs, converted once by `ztrain convert
--from gguf`; both sides load that directory (fp32 weights).  Each measurement runs in its
own child process, with the same thread count:

  training    B x T tokens a step of GPL-3 text (SmolLM2's tokens), fp32 or bf16 mixed
              precision (fp32 master and AdamW state), lr 1e-5, clipping 1.0:
                ztrain   build/ztrain train --threads T: step_time_s of its JSONL log
                PyTorch  transformers' model (eager attention), torch.optim.AdamW,
                         clip_grad_norm_, torch.autocast("cpu", bf16) for bf16;
                         perf_counter around the whole step
              tokens/s = B*T / the median step time after --warmup steps.
  generation  greedy, fp32, --new_tokens after a --prompt_tokens prompt, no eos stop:
                ztrain   build/ztrain generate: its own timing line (prefill + decode)
                PyTorch  bench/generate.py's child: model.generate with its KV cache
              tokens/s = new tokens / (prefill + decode seconds).

With --repeat N the sides alternate N times and each keeps its fastest run.  Both sides'
step-1 losses are printed and must agree (fp32: 1e-4 relative), so the benchmark cannot
compare different models.  Run with the dev venv (torch 2, transformers 5):

    OMP_NUM_THREADS=2 /work/devvenv/bin/python bench/smollm2.py --threads 2
"""

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
ZTRAIN = os.path.join(ROOT, "build", "ztrain")
GGUF = os.environ.get("ZT_SMOLLM2_GGUF", "/usr/local/lib/ztrain/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")
LR = 1e-5


def run(cmd, **kw):
    return subprocess.run(cmd, check=True, capture_output=True, text=True, **kw)


def torch_train(model_dir, data, a):
    """Child: a steps of transformers' model; prints JSON with step times and losses."""
    import torch
    import transformers
    torch.set_num_threads(a.threads)
    model = transformers.LlamaForCausalLM.from_pretrained(model_dir, dtype=torch.float32,
                                                          attn_implementation="eager")
    times, losses = torch_steps(model, list(model.parameters()), data, a, a.precision == "bf16")
    print(json.dumps({"step_times": times, "losses": losses}))


def torch_steps(model, params, data, a, bf16):
    """a.steps AdamW steps of model over params (bench/lora.py's too): step times and losses."""
    import numpy as np
    import torch
    model.train()
    opt = torch.optim.AdamW(params, lr=LR, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0)
    tokens = torch.from_numpy(np.load(data).astype(np.int64))
    B, T = a.batch, a.block
    times, losses = [], []
    for s in range(a.steps):
        t0 = time.perf_counter()
        seqs = torch.stack([tokens[k * T:k * T + T + 1] for k in range(s * B, s * B + B)])
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            logits = model(input_ids=seqs[:, :-1]).logits
        loss = torch.nn.functional.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), seqs[:, 1:].reshape(-1))
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        times.append(time.perf_counter() - t0)
        losses.append(loss.item())
    return times, losses


def ztrain_cmd(model_dir, data, a, out, log):
    """`ztrain train` at the benchmark's settings (bench/lora.py's too)."""
    return [ZTRAIN, "train", "--model", model_dir, "--torch_dtype", "float32", "--data", data,
           "--block_size", str(a.block), "--per_device_train_batch_size", str(a.batch), "--max_steps", str(a.steps),
           "--learning_rate", str(LR), "--lr_scheduler_type", "constant", "--threads", str(a.threads),
           "--output_dir", os.path.join(out, "zt"), "--save_strategy", "no", "--log_jsonl", log,
           "--shuffle", "false"]  # the windows in order, as the PyTorch side reads them


def ztrain_train(model_dir, data, a, out):
    log = os.path.join(out, "zt.jsonl")
    cmd = ztrain_cmd(model_dir, data, a, out, log)
    if a.precision == "bf16":
        cmd += ["--mixed_precision", "bf16"]
    run(cmd)
    recs = [json.loads(line) for line in open(log) if '"step"' in line]
    return {"step_times": [r["step_time_s"] for r in recs], "losses": [r["loss"] for r in recs]}


def ztrain_generate(model_dir, prompt, a):
    r = run([ZTRAIN, "generate", "--model", model_dir, "--prompt", prompt, "--max_new_tokens", str(a.new_tokens),
             "--threads", str(a.threads), "--torch_dtype", "fp32"])
    m = re.search(r"(\d+) prompt tokens in ([\d.]+) s; (\d+) new tokens in ([\d.]+) s", r.stderr)
    assert m and int(m.group(3)) == a.new_tokens, "ztrain generate stopped early: " + r.stderr
    return float(m.group(2)) + float(m.group(4))


def median_after(times, warmup):
    return statistics.median(times[warmup:])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--block", type=int, default=128)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--precision", choices=("fp32", "bf16"), default="fp32")
    ap.add_argument("--prompt_tokens", type=int, default=32)
    ap.add_argument("--new_tokens", type=int, default=64)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        torch_train(a.child[0], a.child[1], a)
        return

    import numpy as np
    import tokenizers
    tmp = tempfile.mkdtemp(prefix="zt_bench_smollm2_")
    model = os.path.join(tmp, "model")
    run([ZTRAIN, "convert", "--from", "gguf", GGUF, "--output_dir", model])
    tk = tokenizers.Tokenizer.from_file(os.path.join(model, "tokenizer.json"))
    text = open("/usr/share/common-licenses/GPL-3", encoding="utf-8").read()
    ids = tk.encode(text).ids
    data = os.path.join(tmp, "tokens.npy")
    np.save(data, np.asarray(ids[:a.steps * a.batch * a.block + 1], dtype=np.int32))
    pids = tk.encode(text[text.index("The licenses for most"):]).ids[:a.prompt_tokens]
    prompt = tk.decode(pids)

    best = {}
    keep = lambda k, v: best.__setitem__(k, v if k not in best else min(best[k], v))
    first_loss = {}
    for rep in range(a.repeat):
        z = ztrain_train(model, data, a, tmp)
        r = run([sys.executable, os.path.abspath(__file__), "--threads", str(a.threads), "--block", str(a.block),
                 "--batch", str(a.batch), "--steps", str(a.steps), "--precision", a.precision,
                 "--child", model, data])
        p = json.loads(r.stdout.strip().splitlines()[-1])
        first_loss = {"ztrain": z["losses"][0], "pytorch": p["losses"][0]}
        keep("train ztrain", median_after(z["step_times"], a.warmup))
        keep("train pytorch", median_after(p["step_times"], a.warmup))
        zg = ztrain_generate(model, prompt, a)
        r = run([sys.executable, os.path.join(HERE, "generate.py"), "--new_tokens", str(a.new_tokens),
                 "--child", model, json.dumps(pids), str(a.threads)])
        pg = json.loads(r.stdout.strip().splitlines()[-1])["seconds"]
        keep("generate ztrain", zg)
        keep("generate pytorch", pg)
        print("run %d: train step ztrain %.2f s, PyTorch %.2f s (step-1 loss %.6f, %.6f); generate ztrain %.2f s, "
              "PyTorch %.2f s" % (rep + 1, median_after(z["step_times"], a.warmup), median_after(p["step_times"], a.warmup),
                                  z["losses"][0], p["losses"][0], zg, pg), flush=True)

    rel = abs(first_loss["ztrain"] - first_loss["pytorch"]) / first_loss["pytorch"]
    print("\nstep-1 loss: ztrain %.6f, PyTorch %.6f (relative %.1e)" % (first_loss["ztrain"], first_loss["pytorch"], rel))
    if a.precision == "fp32" and rel > 1e-4:
        sys.exit("the two step-1 losses differ: not the same model or data")
    tok = a.batch * a.block
    print("SmolLM2-135M-Instruct, %d threads, best of %d (%s)" % (a.threads, a.repeat, open("/proc/loadavg").read().strip()))
    print("| | ztrain | PyTorch + transformers | ztrain / PyTorch |\n|---|---|---|---|")
    zt, pt = tok / best["train ztrain"], tok / best["train pytorch"]
    print("| training, %s, %d x %d tokens a step (tokens/s) | %.1f | %.1f | %.2fx |" % (a.precision, a.batch, a.block, zt, pt, zt / pt))
    zt, pt = a.new_tokens / best["generate ztrain"], a.new_tokens / best["generate pytorch"]
    print("| greedy generation, fp32, %d + %d tokens (tokens/s) | %.1f | %.1f | %.2fx |"
          % (len(pids), a.new_tokens, zt, pt, zt / pt))


if __name__ == "__main__":
    main()
