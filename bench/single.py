"""Single-process training speed: ztrain against PyTorch on the same model (issue 3).

For each config (bench/configs/<name>/config.json) and precision this trains the same
Llama twice, each in its own child process, with the same weights, data, batch, data
order, optimizer and thread count:

  ztrain   build/ztrain train ... --log_jsonl   (fp32, or --mixed_precision bf16)
  PyTorch  the reference Llama of tools/make_fixtures.py (plain torch, mirrors Hugging
           Face's LlamaForCausalLM, eager attention), weights read from the
           model.safetensors that `ztrain init-model` wrote; torch.optim.AdamW with the
           Hugging Face trainer defaults (lr 5e-5, betas 0.9/0.999, eps 1e-8, wd 0,
           linear schedule, clip_grad_norm_ 1.0); bf16 = torch.autocast("cpu", bf16)
           with fp32 weights and optimizer state.

tokens/s is the median over the steps after the first --warmup steps of B*T/step time
(ztrain: step_time_s of its JSONL log; PyTorch: perf_counter around the whole step:
batch, forward, loss, backward, clipping, AdamW, schedule).  MFU = FLOPs/token * tokens/s
/ peak, with ztrain's FLOPs per token (see flops_per_token) and the matrix-product peak
that `ztrain env` measures (bf16 peak for bf16 runs, fp32 peak for fp32 runs), measured
just before and just after each child, the higher of the two taken; the table's last
column gives ztrain's MFU against the highest peak measured at any time in the run.
With --repeat N each side runs N times, alternating, and its fastest run is kept.  Peak RSS is each child's own ru_maxrss
(os.wait4).  "Other load" is the average number of cores that processes other than the
measured child kept busy while it ran (/proc/stat minus the child's own CPU time): on a
shared machine, figures taken under load above ~0.1 core are not clean.  Both frameworks' losses of step 1 are printed
and must agree (fp32: to 1e-4), so the benchmark cannot silently compare different models.

Run with Debian's /usr/bin/python3 (torch 1.13 + numpy), normally through
bench/run_single.sh, which also picks the BLAS the PyTorch peer's fp32 matmuls use.
"""

import argparse
import contextlib
import json
import os
import signal
import statistics
import struct
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
ZTRAIN = os.path.join(ROOT, "build", "ztrain")
TEXT_DIR = "/usr/share/common-licenses"

# block size, per-device batch and default steps of each config; model shapes are in
# bench/configs/<name>/config.json.  Config a trains on bytes of English text, b on ids
# < 32000 made from the same text (see make_data).
CONFIGS = {
    "a": dict(block=256, batch=8, steps=8, data="txt"),
    "b": dict(block=512, batch=4, steps=5, data="npy"),
}

FP32_LOSS_TOL = 1e-4   # |ztrain - PyTorch| of the step-1 loss, fp32
BF16_LOSS_WARN = 5e-2  # bf16 rounds differently in the two; only a warning


# ----------------------------------------------------------------------------- shared helpers

def model_config(cfg_dir):
    with open(os.path.join(cfg_dir, "config.json")) as f:
        c = json.load(f)
    c.setdefault("num_key_value_heads", c["num_attention_heads"])
    c.setdefault("head_dim", c["hidden_size"] // c["num_attention_heads"])
    c.setdefault("tie_word_embeddings", False)
    return c


def flops_per_token(c, T):
    """ztrain's count (zt_model_flops_per_token): 6 * matrix params + causal attention.

    6*(L*(C*(nh+2*nkv)*hd + nh*hd*C + 3*C*F) + V*C) + 3 * L*4*nh*hd*(T+1)/2
    (the embedding lookup is not a product; lm_head is counted once even when tied)."""
    L, C, F = c["num_hidden_layers"], c["hidden_size"], c["intermediate_size"]
    nh, nkv, hd, V = c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"], c["vocab_size"]
    matrix = L * (C * (nh + 2 * nkv) * hd + nh * hd * C + 3 * C * F) + V * C
    attn = L * 4.0 * nh * hd * (T + 1) / 2.0
    return 6.0 * matrix + 3.0 * attn


FLOPS_FORMULA = ("FLOPs/token = 6*(L*(C*(nh+2*nkv)*hd + nh*hd*C + 3*C*F) + V*C)"
                 " + 3*L*4*nh*hd*(T+1)/2")


def make_data(workdir):
    """The token files: text.txt (bytes of /usr/share/common-licenses, sorted file names,
    concatenated) and tokens32k.npy (int32: non-overlapping byte pairs hashed into
    [0, 32000) by Knuth's multiplicative hash, so ids of the whole range occur)."""
    parts = []
    for name in sorted(os.listdir(TEXT_DIR)):
        p = os.path.join(TEXT_DIR, name)
        if os.path.isfile(p):
            with open(p, "rb") as f:
                parts.append(f.read())
    text = b"".join(parts)
    txt = os.path.join(workdir, "text.txt")
    with open(txt, "wb") as f:
        f.write(text)
    b = np.frombuffer(text[:len(text) // 2 * 2], dtype=np.uint8).astype(np.uint64)
    pairs = b[0::2] * 256 + b[1::2]
    ids = ((pairs * np.uint64(2654435761)) % np.uint64(1 << 32)) % np.uint64(32000)
    npy = os.path.join(workdir, "tokens32k.npy")
    np.save(npy, ids.astype(np.int32))
    return {"txt": txt, "npy": npy}


def load_tokens(path):
    if path.endswith(".npy"):
        return np.load(path).astype(np.int64)
    with open(path, "rb") as f:
        return np.frombuffer(f.read(), dtype=np.uint8).astype(np.int64)


def busy_cpu_s():
    """CPU seconds the whole machine has been busy (/proc/stat: user, nice, system, irq,
    softirq, steal), to see how much of it other work took while a child ran."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:9]]
    return (v[0] + v[1] + v[2] + v[5] + v[6] + v[7]) / os.sysconf("SC_CLK_TCK")


# Each child runs in a session of its own, so that stopping the benchmark (a timeout's
# SIGTERM, Ctrl-C, SIGHUP) stops everything the child started too: `ztrain launch`,
# its mpirun and the ranks, or the DDP workers, none of which would otherwise notice
# that the benchmark is gone.
CHILD_SESSIONS = set()


def session_members(sid):
    """Pids of the processes of session sid (/proc/PID/stat's 6th field)."""
    pids = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open("/proc/%s/stat" % d) as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[3]) == sid:
                pids.append(int(d))
    return pids


def stop_children(grace_s=5.0):
    """SIGTERM to every process of every child session, then SIGKILL to what is left
    after grace_s (a rank inside a collective may not answer SIGTERM)."""
    for sig, wait in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 0.0)):
        for sid in list(CHILD_SESSIONS):
            for pid in session_members(sid):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, sig)
        end = time.monotonic() + wait
        while time.monotonic() < end and any(session_members(s) for s in CHILD_SESSIONS):
            time.sleep(0.1)
    CHILD_SESSIONS.clear()


def on_stop_signal(signum, frame):
    stop_children()
    sys.exit(128 + signum)


def install_stop_handlers():
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, on_stop_signal)


def start_child(argv, **kw):
    """Popen in a new session, remembered for stop_children."""
    proc = subprocess.Popen(argv, start_new_session=True, **kw)
    CHILD_SESSIONS.add(proc.pid)
    return proc


def reap(proc):
    """os.wait4 on a start_child child; its session is forgotten once it is gone (a rank
    it left behind is stopped here, as the benchmark moves on)."""
    _, status, ru = os.wait4(proc.pid, 0)
    if session_members(proc.pid):
        CHILD_SESSIONS.add(proc.pid)
        stop_children()
    CHILD_SESSIONS.discard(proc.pid)
    return status, ru


def run_child(argv, stdout_path, env=None):
    """Run argv to completion; returns dict(rc, rss bytes, wall s, others: the average
    number of cores that processes other than this child kept busy meanwhile).
    os.wait4 gives this child's own rusage, so ru_maxrss is its peak, not a max over
    all children so far."""
    t0, b0 = time.perf_counter(), busy_cpu_s()
    with open(stdout_path, "wb") as out:
        proc = start_child(argv, stdout=out, stderr=subprocess.STDOUT, env=env)
        status, ru = reap(proc)
        proc.returncode = os.waitstatus_to_exitcode(status)
    wall, busy = time.perf_counter() - t0, busy_cpu_s() - b0
    others = max(0.0, busy - ru.ru_utime - ru.ru_stime) / wall
    return dict(rc=proc.returncode, rss=ru.ru_maxrss * 1024, wall=wall, others=others,
                user=ru.ru_utime, sys=ru.ru_stime)


def tail(path, n=20):
    with open(path, errors="replace") as f:
        return "".join(f.readlines()[-n:])


def median_tps(step_times, tokens_per_step, warmup):
    kept = step_times[warmup:]
    if not kept:
        raise SystemExit("bench: --warmup %d leaves no measured step" % warmup)
    return statistics.median(tokens_per_step / t for t in kept)


# ----------------------------------------------------------------------------- ztrain

MEASURED_PEAKS = {"fp32": [], "bf16": []}  # every peak measured in this benchmark


def ztrain_env(threads):
    out = subprocess.run([ZTRAIN, "env", "--threads", str(threads)], check=True,
                         capture_output=True, text=True).stdout
    peaks = {}
    for line in out.splitlines():
        for prec in ("fp32", "bf16"):
            if line.startswith("peak %s matmul:" % prec):
                peaks[prec] = float(line.split(":")[1].split()[0])
    if set(peaks) != {"fp32", "bf16"}:
        raise SystemExit("bench: cannot read the matmul peaks from `ztrain env`:\n" + out)
    for prec in peaks:
        MEASURED_PEAKS[prec].append(peaks[prec])
    return out, peaks


def run_ztrain(model_dir, data, T, B, steps, threads, prec, workdir, tag):
    log = os.path.join(workdir, "ztrain-%s.jsonl" % tag)
    out = os.path.join(workdir, "ztrain-%s.out" % tag)
    argv = [ZTRAIN, "train", "--model", model_dir, "--data", data, "--block_size", str(T),
            "--per_device_train_batch_size", str(B), "--max_steps", str(steps),
            "--threads", str(threads), "--log_jsonl", log, "--progress", "false"]
    if prec == "bf16":
        argv += ["--mixed_precision", "bf16"]
    ch = run_child(argv, out)
    if ch["rc"] != 0:
        raise SystemExit("bench: ztrain failed (exit %d): %s\n%s"
                         % (ch["rc"], " ".join(argv), tail(out)))
    with open(log) as f:
        rows = [json.loads(line) for line in f if line.strip()]
    act = None
    with open(out) as f:
        for line in f:
            if line.startswith("activations:"):
                act = line.strip()
    return dict(argv=argv, losses=[r["loss"] for r in rows],
                step_times=[r["step_time_s"] for r in rows], rss=ch["rss"], wall=ch["wall"],
                others=ch["others"], user=ch["user"], sys=ch["sys"], activations=act)


# ----------------------------------------------------------------------------- PyTorch peer

def run_peer(model_dir, data, T, B, steps, threads, prec, workdir, tag, blas):
    spec = dict(model_dir=model_dir, data=data, T=T, B=B, steps=steps, threads=threads,
                prec=prec, result=os.path.join(workdir, "torch-%s.json" % tag))
    spec_path = os.path.join(workdir, "torch-%s.spec.json" % tag)
    with open(spec_path, "w") as f:
        json.dump(spec, f)
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), OPENBLAS_NUM_THREADS=str(threads))
    if blas != "system":
        env["LD_LIBRARY_PATH"] = blas + (":" + env["LD_LIBRARY_PATH"] if env.get("LD_LIBRARY_PATH") else "")
    out = os.path.join(workdir, "torch-%s.out" % tag)
    ch = run_child([sys.executable, os.path.abspath(__file__), "--peer", spec_path], out, env)
    if ch["rc"] != 0:
        raise SystemExit("bench: PyTorch peer failed (exit %d)\n%s" % (ch["rc"], tail(out)))
    with open(spec["result"]) as f:
        res = json.load(f)
    res.update(rss=ch["rss"], wall=ch["wall"], others=ch["others"], user=ch["user"], sys=ch["sys"])
    return res


def read_safetensors(path):
    """{name: fp32 tensor} from a single-file safetensors (8-byte header length, JSON header)."""
    import torch
    dtypes = {"F32": torch.float32, "BF16": torch.bfloat16, "F16": torch.float16}
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        blob = bytearray(f.read())
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        dt = dtypes[info["dtype"]]
        start, end = info["data_offsets"]
        count = (end - start) // torch.empty((), dtype=dt).element_size()
        t = torch.frombuffer(blob, dtype=dt, count=count, offset=start).reshape(info["shape"])
        out[name] = t.to(torch.float32).clone()
    return out


def loaded_blas():
    with open("/proc/self/maps") as f:
        libs = {line.split()[-1] for line in f if "blas" in line.split()[-1]}
    return sorted(libs)


def peer_main(spec_path):
    import torch
    import torch.nn.functional as F
    sys.dont_write_bytecode = True   # leave no __pycache__ in tools/
    sys.path.insert(0, os.path.join(ROOT, "tools"))
    import make_fixtures as ref   # the reference Llama the parity tests use

    with open(spec_path) as f:
        s = json.load(f)
    torch.set_num_threads(s["threads"])
    c = model_config(s["model_dir"])
    T, B, S = s["T"], s["B"], s["steps"]
    params = read_safetensors(os.path.join(s["model_dir"], "model.safetensors"))
    tokens = load_tokens(s["data"])
    if tokens.max() >= c["vocab_size"]:
        raise SystemExit("peer: token id %d >= vocab %d" % (tokens.max(), c["vocab_size"]))
    p = {k: v.requires_grad_(True) for k, v in params.items()}
    decay = [v for v in p.values() if v.dim() == 2]
    no_decay = [v for v in p.values() if v.dim() != 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.0},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=5e-5, betas=(0.9, 0.999), eps=1e-8)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda u: max(0.0, (S - u) / S))
    autocast = (torch.autocast("cpu", dtype=torch.bfloat16) if s["prec"] == "bf16"
                else contextlib.nullcontext())
    n_samples = (len(tokens) - 1) // T
    losses, norms, times = [], [], []
    for step in range(S):
        t0 = time.perf_counter()
        rows = [tokens[(k % n_samples) * T:(k % n_samples) * T + T + 1]
                for k in range(step * B, step * B + B)]
        x = torch.from_numpy(np.stack(rows))
        ids, targets = x[:, :T].contiguous(), x[:, 1:].contiguous()
        opt.zero_grad(set_to_none=True)
        with autocast:
            logits = ref.forward(c, p, ids, F.linear).float()   # HF upcasts the logits
            loss = F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.view(-1))
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(list(p.values()), 1.0)
        opt.step()
        sched.step()
        losses.append(loss.item())
        norms.append(norm.item())
        times.append(time.perf_counter() - t0)
    with open(s["result"], "w") as f:
        json.dump(dict(losses=losses, grad_norms=norms, step_times=times,
                       torch=torch.__version__, blas=loaded_blas()), f)


# ----------------------------------------------------------------------------- main

def fmt_mib(b):
    return "%.0f" % (b / 2**20)


def main():
    install_stop_handlers()
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--configs", default="a,b", help="comma list of %s" % ",".join(CONFIGS))
    ap.add_argument("--precisions", default="fp32,bf16", help="comma list of fp32,bf16")
    ap.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)),
                    help="threads for both frameworks (default: the cores this process may use)")
    ap.add_argument("--steps", type=int, default=0,
                    help="optimizer steps per run (default: %s)"
                    % ", ".join("%d for %s" % (v["steps"], k) for k, v in CONFIGS.items()))
    ap.add_argument("--warmup", type=int, default=2, help="steps left out of tokens/s (default 2)")
    ap.add_argument("--workdir", default=os.path.join(ROOT, "build", "bench"),
                    help="models, data and logs (default build/bench)")
    ap.add_argument("--torch_blas", default="system",
                    help="folder with the libblas.so.3 the PyTorch peer loads (LD_LIBRARY_PATH), "
                         "or 'system' (default)")
    ap.add_argument("--repeat", type=int, default=1,
                    help="run each side this many times, alternating, and keep each side's "
                         "fastest run (default 1): this machine's speed drifts by several per "
                         "cent over minutes, and both frameworks get the same treatment")
    ap.add_argument("--json", help="also write the results here")
    ap.add_argument("--peer", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.peer:
        return peer_main(a.peer)

    if a.repeat < 1:
        ap.error("--repeat must be at least 1")
    configs = [x for x in a.configs.split(",") if x]
    precs = [x for x in a.precisions.split(",") if x]
    for x in configs:
        if x not in CONFIGS:
            ap.error("--configs: unknown config %r" % x)
    for x in precs:
        if x not in ("fp32", "bf16"):
            ap.error("--precisions: unknown precision %r" % x)
    if not os.access(ZTRAIN, os.X_OK):
        raise SystemExit("bench: %s not built (make build/ztrain)" % ZTRAIN)
    os.makedirs(a.workdir, exist_ok=True)
    t_start = time.perf_counter()

    env_text, peaks_before = ztrain_env(a.threads)
    print("ztrain env --threads %d:\n  %s" % (a.threads, env_text.strip().replace("\n", "\n  ")))
    print("PyTorch peer BLAS (fp32 matmuls): %s" % a.torch_blas)
    print(FLOPS_FORMULA)
    print("tokens/s: median over steps %d..S of B*T/step time\n" % (a.warmup + 1))
    data = make_data(a.workdir)

    results = []
    for name in configs:
        cc = CONFIGS[name]
        cfg_dir = os.path.join(HERE, "configs", name)
        c = model_config(cfg_dir)
        T, B = cc["block"], cc["batch"]
        steps = a.steps or cc["steps"]
        fpt = flops_per_token(c, T)
        model_dir = os.path.join(a.workdir, "model-" + name)
        subprocess.run([ZTRAIN, "init-model", "--model_config", os.path.join(cfg_dir, "config.json"),
                        "--output_dir", model_dir, "--seed", "0"], check=True,
                       stdout=subprocess.DEVNULL)
        print("config %s: hidden %d, %d layers, %d heads (%d kv), ffn %d, vocab %d, block %d, "
              "batch %d, %d steps; %.4g GFLOP/token"
              % (name, c["hidden_size"], c["num_hidden_layers"], c["num_attention_heads"],
                 c["num_key_value_heads"], c["intermediate_size"], c["vocab_size"], T, B, steps,
                 fpt / 1e9))
        for prec in precs:
            tag = "%s-%s" % (name, prec)
            z, t = None, None
            for attempt in range(a.repeat):  # alternate the two sides; keep each one's best
                # each child's MFU is taken against the higher of the peaks measured just
                # before and just after it (the machine's speed drifts over minutes)
                p0 = ztrain_env(a.threads)[1][prec]
                zi = run_ztrain(model_dir, data[cc["data"]], T, B, steps, a.threads, prec,
                                a.workdir, tag)
                p1 = ztrain_env(a.threads)[1][prec]
                ti = run_peer(model_dir, data[cc["data"]], T, B, steps, a.threads, prec,
                              a.workdir, tag, a.torch_blas)
                p2 = ztrain_env(a.threads)[1][prec]
                zi["local_peaks"], ti["local_peaks"] = [p0, p1], [p1, p2]
                if a.repeat > 1:
                    print("  %s attempt %d: ztrain %.0f tok/s, PyTorch %.0f tok/s"
                          % (prec, attempt + 1, median_tps(zi["step_times"], B * T, a.warmup),
                             median_tps(ti["step_times"], B * T, a.warmup)))
                if z is None or median_tps(zi["step_times"], B * T, a.warmup) > \
                        median_tps(z["step_times"], B * T, a.warmup):
                    z = zi
                if t is None or median_tps(ti["step_times"], B * T, a.warmup) > \
                        median_tps(t["step_times"], B * T, a.warmup):
                    t = ti
            print("  %s ztrain:  %.1f s (cpu user %.1f s, sys %.1f s; other processes: %.2f cores),"
                  " losses %s" % (prec, z["wall"], z["user"], z["sys"], z["others"],
                                  " ".join("%.5f" % x for x in z["losses"])))
            print("  %s ztrain:  %s" % (prec, z["activations"]))
            print("  %s PyTorch: %.1f s (cpu user %.1f s, sys %.1f s; other processes: %.2f cores),"
                  " losses %s" % (prec, t["wall"], t["user"], t["sys"], t["others"],
                                  " ".join("%.5f" % x for x in t["losses"])))
            print("  %s PyTorch: BLAS loaded: %s" % (prec, ", ".join(t["blas"]) or "none"))
            if any("/blas/libblas" in x for x in t["blas"]):
                print("  note: that is the netlib reference BLAS; PyTorch's fp32 products are "
                      "slow with it (see bench/run_single.sh)")
            dl = abs(z["losses"][0] - t["losses"][0])
            if prec == "fp32" and not dl <= FP32_LOSS_TOL:
                raise SystemExit("bench: config %s fp32 step-1 losses differ by %.3g (ztrain %.6f, "
                                 "PyTorch %.6f): the two runs do not train the same model"
                                 % (name, dl, z["losses"][0], t["losses"][0]))
            if prec == "bf16" and not dl <= BF16_LOSS_WARN:
                print("  WARNING: bf16 step-1 losses differ by %.3g" % dl)
            tps_z = median_tps(z["step_times"], B * T, a.warmup)
            tps_t = median_tps(t["step_times"], B * T, a.warmup)
            r = dict(config=name, precision=prec, threads=a.threads, steps=steps, warmup=a.warmup,
                     flops_per_token=fpt, ztrain_tps=tps_z, torch_tps=tps_t, ratio=tps_z / tps_t,
                     ztrain_others=z["others"], torch_others=t["others"],
                     ztrain_cpu=[z["user"], z["sys"]], torch_cpu=[t["user"], t["sys"]], ztrain_rss=z["rss"], torch_rss=t["rss"], activations=z["activations"],
                     ztrain_loss1=z["losses"][0], torch_loss1=t["losses"][0],
                     ztrain_losses=z["losses"], torch_losses=t["losses"],
                     ztrain_step_times=z["step_times"], torch_step_times=t["step_times"],
                     ztrain_local_peaks=z["local_peaks"], torch_local_peaks=t["local_peaks"],
                     torch_blas=t["blas"], ztrain_argv=z["argv"])
            results.append(r)
            print("  %s: ztrain %.0f tok/s, PyTorch %.0f tok/s, ratio %.3f\n"
                  % (prec, tps_z, tps_t, r["ratio"]))

    # MFU against the higher of the peaks measured just before and just after each child
    # (a peak measured while the machine is slow is low and would flatter the MFU; one
    # measured minutes away from the run may belong to a faster or slower spell).  The
    # MFU against the highest peak of the whole benchmark is kept too (global_*).
    _, peaks_after = ztrain_env(a.threads)
    peaks = {k: max(peaks_before[k], peaks_after[k], *MEASURED_PEAKS[k]) for k in peaks_before}
    for r in results:
        pk = peaks[r["precision"]]
        for side in ("ztrain", "torch"):
            local = max(r[side + "_local_peaks"])
            r[side + "_peak"] = local
            r[side + "_mfu"] = r["flops_per_token"] * r[side + "_tps"] / (local * 1e9)
            r["global_" + side + "_mfu"] = r["flops_per_token"] * r[side + "_tps"] / (pk * 1e9)
        r["global_peak"] = pk
    wall = time.perf_counter() - t_start
    print("`ztrain env` peaks, GFLOP/s: before fp32 %.1f bf16 %.1f; after fp32 %.1f bf16 %.1f; "
          "highest measured fp32 %.1f bf16 %.1f"
          % (peaks_before["fp32"], peaks_before["bf16"], peaks_after["fp32"], peaks_after["bf16"],
             peaks["fp32"], peaks["bf16"]))
    print("MFU below is against the higher of the two peaks measured just before and just after "
          "each child (GFLOP/s, in brackets); the last column is ztrain's MFU against the highest "
          "peak measured at any time in the benchmark\n")
    head = ("| config | precision | threads | ztrain tok/s | PyTorch tok/s | ratio | ztrain MFU [peak] "
            "| PyTorch MFU [peak] | ztrain peak RSS MiB | PyTorch peak RSS MiB | step-1 loss ztrain / PyTorch "
            "| other load (cores) ztrain / PyTorch | ztrain MFU [highest peak] |")
    print(head)
    print("|" + "---|" * (head.count("|") - 1))
    for r in results:
        print("| %s | %s | %d | %.0f | %.0f | %.3f | %.3f [%.0f] | %.3f [%.0f] | %s | %s | %.6f / %.6f "
              "| %.2f / %.2f | %.3f [%.0f] |"
              % (r["config"], r["precision"], r["threads"], r["ztrain_tps"], r["torch_tps"],
                 r["ratio"], r["ztrain_mfu"], r["ztrain_peak"], r["torch_mfu"], r["torch_peak"],
                 fmt_mib(r["ztrain_rss"]), fmt_mib(r["torch_rss"]), r["ztrain_loss1"],
                 r["torch_loss1"], r["ztrain_others"], r["torch_others"],
                 r["global_ztrain_mfu"], r["global_peak"]))
    print()
    for r in results:
        print("ztrain %s %s: %s" % (r["config"], r["precision"], r["activations"]))
    print("benchmark wall time: %.0f s" % wall)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(dict(env=env_text, peaks_before=peaks_before, peaks_after=peaks_after,
                           peaks=peaks, torch_blas=a.torch_blas, wall_s=wall, repeat=a.repeat,
                           results=results), f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
