"""ztrain against what users run: PyTorch 2.x, real FSDP and DeepSpeed, side by side (issue 18).

On bench config a and b (bench/configs, the data of bench/single.py), with the same weights
(the model.safetensors `ztrain init-model` writes), the same data and order (contract §4:
rank r at step s takes samples s*B*W + r*B .. +B) and the same threads, each pair runs
ztrain and then its peer, and reports both per-step losses and tokens/s per device:

  single     1 process, all cores.  ztrain `train --threads N` [--mixed_precision bf16]
             against transformers' LlamaForCausalLM (SDPA attention) in fp32 and under
             torch.autocast(cpu, bf16), and the same model after torch.compile when the
             compile works on this CPU (a failed compile is reported, not hidden).
  fsdp       2 ranks x 1 thread.  ztrain --use_fsdp --fsdp_sharding_strategy S against
             torch's FullyShardedDataParallel over gloo, wrapped per LlamaDecoderLayer as
             Accelerate's TRANSFORMER_BASED_WRAP does, BACKWARD_PRE prefetch, for S =
             FULL_SHARD, SHARD_GRAD_OP, NO_SHARD; fp32, and bf16 "aligned" (fp32 master;
             MixedPrecision(param, reduce, buffer = bf16) and autocast, which is what
             Accelerate sets up for mixed_precision bf16; ztrain --torch_dtype bfloat16
             --mixed_precision bf16).  Accelerate itself refuses FSDP on a machine without
             a GPU, so the peer builds the FSDP wrapper directly with Accelerate's choices.
  deepspeed  2 ranks x 1 thread.  ztrain --use_deepspeed --zero_stage N against
             deepspeed.initialize (DS_ACCELERATOR=cpu, gloo) with ZeRO stage N = 1, 2, 3;
             fp32, and bf16 (DeepSpeed's "bf16": {"enabled": true}: bf16 weights in the
             forward and backward, fp32 master and optimizer; ztrain the same with
             --torch_dtype bfloat16 --mixed_precision bf16).

Every peer uses ztrain's optimizer defaults: AdamW lr 5e-5, betas 0.9/0.999, eps 1e-8,
weight decay 0, linear decay to 0 over the run, gradient clipping at 1.0.  tokens/s per
device is B*T / the step time (ztrain: its JSONL's tokens_per_sec_per_device), the median
over the steps after --warmup.  The loss columns give the largest |ztrain - peer| over all
steps.  The CPU's ISA and whether it has native bf16 come from `ztrain env`.

  bench/peers/setup.sh                       # once: the venv (build/peers-venv)
  /usr/bin/python3 bench/peers/peers.py --configs a --suites fsdp,deepspeed --json OUT.json

bench/seed_figures.py (the seed's experiment on SmolLM2, bench/seed_experiment.sh --peers) runs
this file's worker with a `seed` spec: a constant lr, the model loaded in bf16 in every mode,
precision "bf16-flat" (FSDP without mixed precision: bf16 flat parameters and AdamW state),
and each step's lost-update fraction of the master weights.

The orchestrator runs under Debian's /usr/bin/python3 (numpy); the peers run in the venv
(--python, default build/peers-venv/bin/python).  Not a test: a benchmark.
"""

import argparse
import contextlib
import functools
import json
import os
import socket
import statistics
import subprocess
import sys
import time

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
import single as S   # noqa: E402  (data, configs, child-process helpers)

ROOT, ZTRAIN = S.ROOT, S.ZTRAIN
WORLD = 2
LR, BETAS, EPS, CLIP = 5e-5, (0.9, 0.999), 1e-8, 1.0

FSDP_STAGE = {"FULL_SHARD": "3", "SHARD_GRAD_OP": "2", "NO_SHARD": "0"}


def runs_of(suite, precisions):
    """(suite, variant, prec) of one suite; variant is the strategy, stage or attention."""
    out = []
    for prec in precisions:
        if suite == "single":
            out += [("single", "sdpa", prec), ("single", "sdpa+compile", prec)]
        elif suite == "fsdp":
            out += [("fsdp", s, prec) for s in ("FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD")]
        elif suite == "deepspeed":
            out += [("deepspeed", n, prec) for n in ("3", "2", "1")]
        else:
            raise SystemExit("peers: unknown suite %r (expected single, fsdp, deepspeed)" % suite)
    return out


# ----------------------------------------------------------------------------- ztrain

def ztrain_argv(suite, variant, prec, model_dir, data, T, B, steps, threads, log):
    common = ["--model", model_dir, "--data", data, "--block_size", str(T),
              "--per_device_train_batch_size", str(B), "--max_steps", str(steps),
              "--progress", "false", "--log_jsonl", log]
    bf16 = ["--torch_dtype", "bfloat16", "--mixed_precision", "bf16"]
    if suite == "single":
        return [ZTRAIN, "train", "--threads", str(threads)] + common + (
            ["--mixed_precision", "bf16"] if prec == "bf16" else [])
    launch = [ZTRAIN, "launch", "--num_processes", str(WORLD), "--threads_per_process", "1", "train"]
    if suite == "fsdp":
        plan = ["--use_fsdp", "--fsdp_sharding_strategy", variant]
    else:
        plan = ["--use_deepspeed", "--zero_stage", variant]
    return launch + common + plan + (bf16 if prec == "bf16" else [])


def run_ztrain(run, model_dir, data, T, B, steps, threads, workdir):
    suite, variant, prec = run
    tag = "ztrain-%s-%s-%s" % (suite, variant.replace("+", "-"), prec)
    log, out = os.path.join(workdir, tag + ".jsonl"), os.path.join(workdir, tag + ".out")
    if os.path.exists(log):
        os.remove(log)
    argv = ztrain_argv(suite, variant, prec, model_dir, data, T, B, steps, threads, log)
    ch = S.run_child(argv, out)
    if ch["rc"] != 0:
        raise SystemExit("peers: ztrain failed (exit %d): %s\n%s" % (ch["rc"], " ".join(argv), S.tail(out)))
    with open(log) as f:
        rows = [json.loads(line) for line in f if line.strip()]
    return dict(argv=argv, losses=[r["loss"] for r in rows],
                tps=[r["tokens_per_sec_per_device"] for r in rows], mfu=[r["mfu"] for r in rows],
                peak=[r["peak_gflops"] for r in rows], others=ch["others"], rss=ch["rss"])


# ----------------------------------------------------------------------------- peers (venv)

def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_peer(run, model_dir, data, T, B, steps, threads, workdir, python, seed=None, tag=None):
    """seed: the seed experiment's settings (bench/seed_peers.py): dict(lr=...) for a
    constant lr, the model loaded in bf16 in every mode, and the lost-update audit."""
    suite, variant, prec = run
    tag = tag or "peer-%s-%s-%s" % (suite, variant.replace("+", "-"), prec)
    world = 1 if suite == "single" else WORLD
    spec = dict(suite=suite, variant=variant, prec=prec, model_dir=model_dir, data=data, T=T, B=B,
                W=world, steps=steps, threads=threads if world == 1 else 1,
                result=os.path.join(workdir, tag + ".json"), seed=seed)
    if os.path.exists(spec["result"]):
        os.remove(spec["result"])
    spec_path = os.path.join(workdir, tag + ".spec.json")
    with open(spec_path, "w") as f:
        json.dump(spec, f)
    port = free_port()
    t0, b0 = time.perf_counter(), S.busy_cpu_s()
    procs, outs = [], []
    for r in range(world):
        env = dict(os.environ, OMP_NUM_THREADS=str(spec["threads"]), DS_ACCELERATOR="cpu",
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(r), LOCAL_RANK=str(r),
                   WORLD_SIZE=str(world), LOCAL_WORLD_SIZE=str(world), PYTHONUNBUFFERED="1")
        out = os.path.join(workdir, "%s-rank%d.out" % (tag, r))
        outs.append(out)
        with open(out, "wb") as fh:
            procs.append(subprocess.Popen([python, os.path.abspath(__file__), "--worker", spec_path],
                                          stdout=fh, stderr=subprocess.STDOUT, env=env))
    rcs, cpu, rss = [], 0.0, 0
    for p in procs:
        _, status, ru = os.wait4(p.pid, 0)
        rcs.append(os.waitstatus_to_exitcode(status))
        cpu += ru.ru_utime + ru.ru_stime
        rss = max(rss, ru.ru_maxrss * 1024)
    wall, busy = time.perf_counter() - t0, S.busy_cpu_s() - b0
    if any(rcs):
        r = next(i for i, x in enumerate(rcs) if x)
        return dict(error="rank %d exit %d: %s" % (r, rcs[r], S.tail(outs[r], 6).strip()))
    with open(spec["result"]) as f:
        res = json.load(f)
    res.update(others=max(0.0, busy - cpu) / wall, rss=rss)
    return res


def worker(spec_path):
    """One rank of a peer run (in the venv)."""
    import numpy as np
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    import transformers

    with open(spec_path) as f:
        s = json.load(f)
    T, B, W, steps, rank = s["T"], s["B"], s["W"], s["steps"], int(os.environ["RANK"])
    cpus = sorted(os.sched_getaffinity(0))
    if W > 1 and len(cpus) >= W:   # as ztrain launch binds its ranks: one core each
        os.sched_setaffinity(0, {cpus[rank]})
    torch.set_num_threads(s["threads"])
    torch.manual_seed(0)
    bf16 = s["prec"] in ("bf16", "bf16-flat")
    # "bf16-flat" (the seed experiment): FSDP without mixed precision on the bf16-loaded
    # model, so its flat parameters and AdamW's state stay bf16 (the memory-constrained mode)
    flat16 = s["prec"] == "bf16-flat"
    seed = s.get("seed")
    lr = seed["lr"] if seed else LR
    # ztrain's bf16 runs load the model in bf16 (--torch_dtype bfloat16) and keep an fp32
    # master made from it, as Accelerate's FSDP upcasts a bf16-loaded model and DeepSpeed's
    # bf16 engine keeps its fp32 master of the bf16 weights.  The FSDP peer loads it the
    # same way; from unrounded fp32 weights its first updates would show through the bf16
    # copy where ztrain's, on bf16-exact masters, mostly round away.
    # The seed experiment loads the model in bf16 for every mode, as its ztrain runs do.
    load = torch.bfloat16 if bf16 and (s["suite"] == "fsdp" or seed) else torch.float32
    model = transformers.LlamaForCausalLM.from_pretrained(s["model_dir"], dtype=load,
                                                          attn_implementation="sdpa")
    if not flat16:
        model = model.float()
    tokens = S.load_tokens(s["data"])
    if W > 1 and s["suite"] == "fsdp":
        dist.init_process_group("gloo", rank=rank, world_size=W)
    autocast = torch.autocast("cpu", dtype=torch.bfloat16) if bf16 and not flat16 else contextlib.nullcontext()
    note = ""

    def schedule(opt):
        if seed:   # constant lr, as the seed's runs
            return torch.optim.lr_scheduler.LambdaLR(opt, lambda u: 1.0)
        return torch.optim.lr_scheduler.LambdaLR(opt, lambda u: max(0.0, (steps - u) / steps))

    if s["suite"] == "single":
        if s["variant"].endswith("+compile"):
            model = torch.compile(model)
        opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=BETAS, eps=EPS, weight_decay=0.0)
        sched = schedule(opt)

        def backward_step(loss):
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP)
            opt.step()
            sched.step()
            opt.zero_grad(set_to_none=True)
    elif s["suite"] == "fsdp":
        from torch.distributed.fsdp import (BackwardPrefetch, FullyShardedDataParallel, MixedPrecision,
                                            ShardingStrategy)
        from torch.distributed.fsdp.wrap import transformer_auto_wrap_policy
        from transformers.models.llama.modeling_llama import LlamaDecoderLayer
        mp = MixedPrecision(param_dtype=torch.bfloat16, reduce_dtype=torch.bfloat16,
                            buffer_dtype=torch.bfloat16) if bf16 and not flat16 else None
        model = FullyShardedDataParallel(
            model, sharding_strategy=getattr(ShardingStrategy, s["variant"]),
            auto_wrap_policy=functools.partial(transformer_auto_wrap_policy,
                                               transformer_layer_cls={LlamaDecoderLayer}),
            mixed_precision=mp, backward_prefetch=BackwardPrefetch.BACKWARD_PRE,
            use_orig_params=True, device_id=torch.device("cpu"))
        opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=BETAS, eps=EPS, weight_decay=0.0)
        sched = schedule(opt)

        def backward_step(loss):
            loss.backward()
            model.clip_grad_norm_(CLIP)
            opt.step()
            sched.step()
            opt.zero_grad(set_to_none=True)
    else:
        import deepspeed
        deepspeed.init_distributed(dist_backend="gloo")
        opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=BETAS, eps=EPS, weight_decay=0.0)
        config = {"train_micro_batch_size_per_gpu": B, "gradient_accumulation_steps": 1,
                  "gradient_clipping": CLIP, "zero_optimization": {"stage": int(s["variant"])},
                  "bf16": {"enabled": bf16}, "zero_allow_untested_optimizer": True,
                  "steps_per_print": 1 << 30, "wall_clock_breakdown": False}
        model, opt, _, sched = deepspeed.initialize(model=model, optimizer=opt, lr_scheduler=schedule(opt),
                                                    config=config)
        autocast = contextlib.nullcontext()   # DeepSpeed's bf16 runs the module in bf16 itself
        note = "deepspeed %s" % deepspeed.__version__

        def backward_step(loss):
            model.backward(loss)
            model.step()

    def masters():
        """This rank's master weights, where the optimizer adds its updates: the FSDP
        shards (bf16 in the memory-constrained mode, fp32 in the aligned one), DeepSpeed's
        fp32 partitions (ZeRO-3's flat groups, ZeRO-1/2's single partitions)."""
        for name in ("fp32_partitioned_groups_flat", "single_partition_of_fp32_groups"):
            if hasattr(opt, name):
                return list(getattr(opt, name))
        return [p for p in model.parameters() if p.numel()]

    def audited(step_fn):
        """The lost-update fraction of one step: master elements that the step left
        unchanged although Adam moved them (ztrain's lost_update_fraction), over all ranks."""
        before = [p.detach().clone() for p in masters()]
        step_fn()
        after = masters()
        n = torch.tensor([0.0, 0.0], dtype=torch.float64)
        for a, b in zip(before, after):
            n[0] += (a == b.detach()).sum().item()
            n[1] += a.numel()
        if W > 1:
            dist.all_reduce(n)
        return (n[0] / n[1]).item() if n[1] else float("nan")

    n_samples = (len(tokens) - 1) // T
    losses, times, lost = [], [], []
    if W > 1:
        dist.barrier()
    for step in range(steps):
        t0 = time.perf_counter()
        k0 = step * B * W + rank * B   # contract §4
        rows = [tokens[(k % n_samples) * T:(k % n_samples) * T + T + 1] for k in range(k0, k0 + B)]
        x = torch.from_numpy(np.stack(rows))
        ids, targets = x[:, :T].contiguous(), x[:, 1:].contiguous()
        with autocast:
            logits = model(input_ids=ids).logits.float()
            loss = F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.view(-1))
        if seed:
            lost.append(audited(lambda: backward_step(loss)))
        else:
            backward_step(loss)
        gl = loss.detach().float().clone()
        if W > 1:
            dist.all_reduce(gl)   # the global mean loss, as ztrain logs it
        losses.append(gl.item() / W)
        times.append(time.perf_counter() - t0)
    if rank == 0:
        with open(s["result"], "w") as f:
            json.dump(dict(losses=losses, step_times=times, lost_update_fraction=lost, torch=torch.__version__,
                           transformers=transformers.__version__, note=note), f)
    if W > 1:
        dist.barrier()
        dist.destroy_process_group()
    return 0


# ----------------------------------------------------------------------------- main

def cpu_isa():
    out = subprocess.run([ZTRAIN, "env"], check=True, capture_output=True, text=True).stdout
    keep = [" ".join(line.split()) for line in out.splitlines()
            if line.split(":")[0].strip() in ("onednn", "cpu", "cpu features", "native bf16", "build isa")]
    return keep


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--configs", default="a,b")
    ap.add_argument("--suites", default="single,fsdp,deepspeed")
    ap.add_argument("--precisions", default="fp32,bf16")
    ap.add_argument("--variants", help="only these strategies/stages/attentions, e.g. "
                    "FULL_SHARD,SHARD_GRAD_OP,3,2,sdpa (default: all)")
    ap.add_argument("--steps", type=int, default=0, help="optimizer steps (default: the config's)")
    ap.add_argument("--warmup", type=int, default=2, help="steps left out of the median (default 2)")
    ap.add_argument("--threads", type=int, default=os.cpu_count(), help="threads of the single-process runs")
    ap.add_argument("--python", default=os.path.join(ROOT, "build", "peers-venv", "bin", "python"))
    ap.add_argument("--workdir", default=os.path.join(ROOT, "build", "bench", "peers"))
    ap.add_argument("--json", help="also write the results here")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        return worker(a.worker)
    if not os.access(a.python, os.X_OK):
        raise SystemExit("peers: no peer python at %s (run bench/peers/setup.sh, or give --python)" % a.python)
    os.makedirs(a.workdir, exist_ok=True)
    data = S.make_data(a.workdir)
    isa = cpu_isa()
    print("peers: ztrain against PyTorch / FSDP / DeepSpeed;", "; ".join(isa))
    results = []
    for name in a.configs.split(","):
        cfg = S.CONFIGS[name]
        T, B = cfg["block"], cfg["batch"]
        steps = a.steps or max(cfg["steps"], a.warmup + 3)
        model_dir = os.path.join(a.workdir, "model-" + name)
        subprocess.run([ZTRAIN, "init-model", "--model_config", os.path.join(ROOT, "bench", "configs", name,
                                                                             "config.json"),
                        "--output_dir", model_dir, "--seed", "0"], check=True, capture_output=True)
        print("\nconfig %s: block %d, batch %d per device, %d steps, median of steps %d..%d"
              % (name, T, B, steps, a.warmup + 1, steps))
        print("| suite | peer | precision | ztrain tok/s | peer tok/s | ratio | ztrain MFU | peer MFU "
              "| max abs dloss | other load |")
        print("|---|---|---|---|---|---|---|---|---|---|")
        keep = set(a.variants.split(",")) if a.variants else None
        for run in [r for s in a.suites.split(",") for r in runs_of(s, a.precisions.split(","))
                    if keep is None or r[1] in keep]:
            z = run_ztrain(run, model_dir, data[cfg["data"]], T, B, steps, a.threads, a.workdir)
            p = run_peer(run, model_dir, data[cfg["data"]], T, B, steps, a.threads, a.workdir, a.python)
            zt = statistics.median(z["tps"][a.warmup:])
            # MFU: ztrain's against the matrix-product peak of its JSONL (the same FLOPs per
            # token and the same peak for the peer, so the peer's is ztrain's x the tok/s
            # ratio).  A ratio is bounded by ztrain's MFU over the peer's: this is the profile
            # that says how far a target ratio is reachable at all.
            zm = statistics.median(z["mfu"][a.warmup:])
            row = dict(config=name, suite=run[0], variant=run[1], prec=run[2], ztrain=z, peer=p, ztrain_tps=zt,
                       ztrain_mfu=zm, peak_gflops=z["peak"][-1])
            if "error" in p:
                print("| %s | %s | %s | %.0f | failed: %s | – | %.2f | – | – | %.2f |"
                      % (run[0], run[1], run[2], zt, p["error"].splitlines()[-1][:120], zm, z["others"]))
            else:
                pt = S.median_tps(p["step_times"], B * T, a.warmup)
                dl = max(abs(x - y) for x, y in zip(z["losses"], p["losses"]))
                row.update(peer_tps=pt, ratio=zt / pt, max_dloss=dl, peer_mfu=zm * pt / zt)
                print("| %s | %s | %s | %.0f | %.0f | %.2f | %.2f | %.2f | %.1e | %.2f / %.2f |"
                      % (run[0], run[1], run[2], zt, pt, zt / pt, zm, zm * pt / zt, dl, z["others"], p["others"]))
            sys.stdout.flush()
            results.append(row)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(dict(isa=isa, results=results), f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
