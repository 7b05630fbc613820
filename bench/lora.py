"""LoRA's memory and speed (issue 46, point 6): full fine-tuning and LoRA r 16 (targets all-linear,
and q_proj,v_proj), ztrain against PEFT with PyTorch and transformers at the same settings, side by
side in one run, alternated and repeated.

The model is SmolLM2-135M-Instruct, the GGUF file scripts/setup.sh installs ($ZT_SMOLLM2_GGUF
overrides its path), converted once by `ztrain convert --from gguf`; both sides load that directory
(fp32 weights).  Without the file, the demo model's architecture (examples/demo/config.json) with
seeded random weights and random tokens stands in.  Every measurement is a child process of its
own, with the same thread count:

  setting   B x T tokens a step (GPL-3, SmolLM2's tokens), fp32 weights and compute (LoRA in
            ztrain is fp32 only so far), AdamW (lr 1e-5, constant), clipping 1.0; LoRA r 16,
            alpha 32, dropout 0, bias none (PEFT's LoraConfig with task_type CAUSAL_LM)
  ztrain    build/ztrain train --threads T [--use_peft --lora_r 16 --lora_target_modules M --lora_dropout 0]:
            step_time_s of its JSONL log; its accounted bytes (core/mem.h: the JSONL's
            memory_bytes plus host_memory_bytes, every category) at their largest over the steps
  PyTorch   transformers' LlamaForCausalLM (eager attention), peft.get_peft_model for LoRA,
            torch.optim.AdamW and clip_grad_norm_ over the trainable parameters; perf_counter
            around the whole step
  both      peak RSS: the child's ru_maxrss (os.wait4), model loading included

tokens/s = B*T / the median step time after --warmup steps; with --repeat N the six runs go
round N times (ztrain and PyTorch alternating within each setting) and each keeps its fastest
time and its smallest peak RSS.  The step-1 losses of all six must agree (fp32: 1e-4 relative:
LoRA's B starts at zero, so its first loss is the base model's), so the runs cannot compare
different models or data.  Run with the dev venv (torch 2, transformers 5, peft):

    OMP_NUM_THREADS=2 /work/devvenv/bin/python bench/lora.py --threads 2
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

from smollm2 import GGUF, ROOT, ZTRAIN, torch_steps, ztrain_cmd

R, ALPHA = 16, 32
MODES = {"full": None, "lora all-linear": "all-linear", "lora q_proj,v_proj": "q_proj,v_proj"}
MiB = 1048576.0


def run(cmd):
    """cmd to its end; its stdout and its own peak RSS in bytes (wait4's ru_maxrss, in KiB)."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as errs:
        p = subprocess.Popen(cmd, stdout=out, stderr=errs, text=True)
        _, status, ru = os.wait4(p.pid, 0)
        p.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        errs.seek(0)
        if p.returncode:
            sys.exit("%s failed (%d):\n%s" % (" ".join(cmd[:3]), p.returncode, errs.read()[-3000:]))
        return out.read(), ru.ru_maxrss * 1024


def torch_train(model_dir, data, a):
    """Child: a.steps steps of transformers' model, with PEFT when a.targets; prints JSON."""
    import torch
    import transformers
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM.from_pretrained(model_dir, dtype=torch.float32,
                                                          attn_implementation="eager")
    if a.targets:
        import peft
        targets = a.targets if a.targets == "all-linear" else a.targets.split(",")
        model = peft.get_peft_model(model, peft.LoraConfig(r=R, lora_alpha=ALPHA, lora_dropout=0.0,
                                                           target_modules=targets, bias="none",
                                                           task_type="CAUSAL_LM"))
    params = [p for p in model.parameters() if p.requires_grad]
    times, losses = torch_steps(model, params, data, a, False)
    trainable = sum(p.numel() for p in params)
    print(json.dumps({"step_times": times, "losses": losses, "trainable": trainable}))


def ztrain_train(model_dir, data, a, targets, out):
    log = os.path.join(out, "zt.jsonl")
    if os.path.exists(log):
        os.remove(log)
    cmd = ztrain_cmd(model_dir, data, a, out, log)
    if targets:
        cmd += ["--use_peft", "--lora_r", str(R), "--lora_alpha", str(ALPHA), "--lora_target_modules", targets,
                "--lora_dropout", "0"]
    out_text, rss = run(cmd)
    recs = [json.loads(line) for line in open(log) if '"step"' in line]
    acc = max(sum(r["memory_bytes"].values()) + sum(r["host_memory_bytes"].values()) for r in recs)
    plan = [line for line in out_text.splitlines() if line.startswith("lora r=")]
    return {"step_times": [r["step_time_s"] for r in recs], "losses": [r["loss"] for r in recs],
            "rss": rss, "accounted": acc, "plan": plan[0] if plan else ""}


def prepare(a, tmp):
    """The model directory and the tokens file both sides read."""
    import numpy as np
    model = os.path.join(tmp, "model")
    data = os.path.join(tmp, "tokens.npy")
    n = a.steps * a.batch * a.block + 1
    if os.path.exists(GGUF):
        import tokenizers
        run([ZTRAIN, "convert", "--from", "gguf", GGUF, "--output_dir", model])
        tk = tokenizers.Tokenizer.from_file(os.path.join(model, "tokenizer.json"))
        ids = tk.encode(open("/usr/share/common-licenses/GPL-3", encoding="utf-8").read()).ids[:n]
        name = "SmolLM2-135M-Instruct"
    else:
        cfg = os.path.join(ROOT, "examples", "demo", "config.json")
        run([ZTRAIN, "init-model", "--model_config", cfg, "--output_dir", model, "--seed", "0"])
        vocab = json.load(open(cfg))["vocab_size"]
        ids = np.random.default_rng(0).integers(0, vocab, n)
        name = "the demo model (random weights; %s is absent)" % GGUF
    np.save(data, np.asarray(ids, dtype=np.int32))
    return model, data, name


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--block", type=int, default=128)
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--targets", help=argparse.SUPPRESS)
    ap.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        torch_train(a.child[0], a.child[1], a)
        return

    tmp = tempfile.mkdtemp(prefix="zt_bench_lora_")
    model, data, name = prepare(a, tmp)
    start = time.time()
    print("load at the start: %s" % open("/proc/loadavg").read().strip(), flush=True)
    best, first_loss, plans, trainable = {}, {}, {}, {}

    def keep(key, t, rss, acc=None):
        old = best.get(key, {"t": float("inf"), "rss": float("inf"), "acc": None})
        best[key] = {"t": min(old["t"], t), "rss": min(old["rss"], rss), "acc": acc if acc is not None else old["acc"]}

    for rep in range(a.repeat):
        for mode, targets in MODES.items():
            # ztrain first on even rounds, PyTorch first on odd ones: load falls on both alike
            for side in (("ztrain", "pytorch") if rep % 2 == 0 else ("pytorch", "ztrain")):
                if side == "ztrain":
                    z = ztrain_train(model, data, a, targets, tmp)
                    t, loss = statistics.median(z["step_times"][a.warmup:]), z["losses"][0]
                    keep((mode, side), t, z["rss"], z["accounted"])
                    plans[mode] = z["plan"]
                else:
                    cmd = [sys.executable, os.path.abspath(__file__), "--threads", str(a.threads),
                           "--block", str(a.block), "--batch", str(a.batch), "--steps", str(a.steps),
                           "--child", model, data] + (["--targets", targets] if targets else [])
                    out, rss = run(cmd)
                    p = json.loads(out.strip().splitlines()[-1])
                    t, loss = statistics.median(p["step_times"][a.warmup:]), p["losses"][0]
                    keep((mode, side), t, rss)
                    trainable[mode] = p["trainable"]
                first_loss[(mode, side)] = loss
                print("run %d, %s, %s: step %.3f s, peak RSS %.0f MiB, step-1 loss %.6f (load %s)"
                      % (rep + 1, mode, side, t, best[(mode, side)]["rss"] / MiB, loss,
                         open("/proc/loadavg").read().split()[0]), flush=True)

    ref = first_loss[("full", "pytorch")]
    worst = max(abs(v - ref) / ref for v in first_loss.values())
    print("\nstep-1 losses: %s (largest relative difference %.1e)"
          % (", ".join("%s %s %.6f" % (m, s, v) for (m, s), v in first_loss.items()), worst))
    if worst > 1e-4:
        sys.exit("the step-1 losses differ: not the same model or data")
    for mode in MODES:
        if plans.get(mode):
            print("ztrain %s: %s; PEFT trainable %d" % (mode, plans[mode], trainable[mode]))
    tok = a.batch * a.block
    print("%s, fp32, %d x %d tokens a step, %d threads, best of %d; %.0f s; load at the end: %s"
          % (name, a.batch, a.block, a.threads, a.repeat, time.time() - start, open("/proc/loadavg").read().strip()))
    print("| fp32 | ztrain tokens/s | PyTorch tokens/s | ztrain / PyTorch | ztrain peak RSS | PyTorch peak RSS "
          "| ztrain / PyTorch | ztrain accounted |\n|---|---|---|---|---|---|---|---|")
    for mode in MODES:
        z, p = best[(mode, "ztrain")], best[(mode, "pytorch")]
        print("| %s | %.1f | %.1f | %.2fx | %.0f MiB | %.0f MiB | %.2f | %.1f MiB |"
              % (mode, tok / z["t"], tok / p["t"], p["t"] / z["t"], z["rss"] / MiB, p["rss"] / MiB,
                 z["rss"] / p["rss"], z["acc"] / MiB))
    f = best[("full", "ztrain")]
    for mode in list(MODES)[1:]:
        z, p, pf = best[(mode, "ztrain")], best[(mode, "pytorch")], best[("full", "pytorch")]
        print("%s against full fine-tuning: ztrain %.2fx the speed, %.2f the peak RSS, %.2f the accounted bytes; "
              "PyTorch %.2fx the speed, %.2f the peak RSS" % (mode, f["t"] / z["t"], z["rss"] / f["rss"],
                                                             z["acc"] / f["acc"], pf["t"] / p["t"], p["rss"] / pf["rss"]))


if __name__ == "__main__":
    main()
