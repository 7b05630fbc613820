#!/usr/bin/env python3
"""The seed's experiment on this machine, in one command.

A small Llama, loaded in bf16, trains on real English text on several MPI ranks
in five precision modes (contract §1):

  (i)   FSDP memory-constrained: bf16 master and Adam state, small lr
  (ii)  the same with the lr multiplied by the number of ranks (the seed's "fix")
  (iii) FSDP aligned: fp32 master and Adam state (Accelerate's upcast), bf16 compute
  (iv)  DeepSpeed ZeRO-3 with bf16: always an fp32 master
  (v)   bf16 master with Kahan compensation of the update (ztrain's low-memory mode)

It writes each mode's per-step JSONL, a plot of loss and grad norm against step
(SVG), and a table of final loss, model-state memory per rank and tokens/s per
device (the seed's Tables 2 and 3).  With --check it also asserts what the seed
found: (i) barely improves, (iii) and (iv) converge and agree bit for bit, (ii)
moves but differs from (iii), and (v) follows (iii).

Only the standard library is used; ztrain does the training.
"""
import argparse
import json
import os
import re
import subprocess
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))

MODES = [
    ("i", "FSDP memory-constrained", ["--use_fsdp"], 1),
    ("ii", "FSDP memory-constrained, lr x ranks", ["--use_fsdp"], None),
    ("iii", "FSDP aligned (fp32 master)", ["--use_fsdp", "--mixed_precision", "bf16"], 1),
    ("iv", "DeepSpeed ZeRO-3 bf16", ["--use_deepspeed", "--zero_stage", "3", "--mixed_precision", "bf16"], 1),
    ("v", "bf16 master + Kahan", ["--use_fsdp", "--master_compensation", "kahan"], 1),
]
COLORS = {"i": "#d62728", "ii": "#ff7f0e", "iii": "#1f77b4", "iv": "#17becf", "v": "#2ca02c"}


def sh(cmd, **kw):
    return subprocess.run(cmd, check=True, text=True, capture_output=True, **kw)


def prepare(out, ztrain):
    """Real text from Debian's base-files, and a bf16 model initialised once."""
    text = os.path.join(out, "text.txt")
    if not os.path.exists(text):
        lic = "/usr/share/common-licenses"
        with open(text, "wb") as f:
            for name in sorted(os.listdir(lic)):
                p = os.path.join(lic, name)
                if os.path.isfile(p) and not os.path.islink(p):
                    f.write(open(p, "rb").read())
    model = os.path.join(out, "model")
    sh([ztrain, "init-model", "--model_config", os.path.join(ROOT, "examples/precision/config.json"),
        "--output_dir", model, "--torch_dtype", "bf16", "--seed", "0"])
    return text, model


def run_mode(key, flags, lr, args, text, model, out, ztrain):
    log = os.path.join(out, f"{key}.jsonl")
    cmd = [ztrain, "launch", "--num_processes", str(args.ranks), "train", "--model", model,
           "--data", text, "--torch_dtype", "bfloat16", "--block_size", str(args.block_size),
           "--per_device_train_batch_size", str(args.batch), "--max_steps", str(args.steps),
           "--learning_rate", repr(lr), "--lr_scheduler_type", "constant", "--weight_decay", "0",
           "--log_jsonl", log, "--progress", "false", "--peak_gflops", "1"] + flags
    if args.tokenizer:
        cmd += ["--tokenizer", args.tokenizer]
    res = sh(cmd)
    steps = [json.loads(line) for line in open(log)]
    mem = re.search(r"memory per rank: master params ([\d.]+) MiB, grads ([\d.]+) MiB, optimizer ([\d.]+) MiB",
                    res.stdout)
    params = int(re.search(r"model: (\d+) parameters", res.stdout).group(1))
    state_mib = sum(float(x) for x in mem.groups()) if mem else float("nan")
    return {"steps": steps, "state_mib": state_mib, "params": params, "stdout": res.stdout,
            "warned": "rounded away" in res.stderr}


def median(xs):
    xs = sorted(xs)
    return xs[len(xs) // 2] if xs else float("nan")


def svg_plot(results, args, path):
    """Two panels, loss and grad norm against step, one polyline per mode."""
    W, H, pad = 900, 360, 50
    panel_w = (W - 3 * pad) / 2

    def panel(x0, metric, title):
        series = {k: [s[metric] for s in r["steps"]] for k, r in results.items()}
        lo = min(min(v) for v in series.values())
        hi = max(max(v) for v in series.values())
        if hi == lo:
            hi = lo + 1
        n = max(len(v) for v in series.values())
        def xy(i, y):
            return (x0 + panel_w * i / max(1, n - 1), pad + (H - 2 * pad) * (hi - y) / (hi - lo))
        parts = [f'<rect x="{x0}" y="{pad}" width="{panel_w}" height="{H - 2 * pad}" fill="none" stroke="#999"/>',
                 f'<text x="{x0 + panel_w / 2}" y="{pad - 12}" text-anchor="middle" font-size="14">{title}</text>',
                 f'<text x="{x0}" y="{H - pad + 16}" font-size="11">1</text>',
                 f'<text x="{x0 + panel_w}" y="{H - pad + 16}" text-anchor="end" font-size="11">{n}</text>',
                 f'<text x="{x0 + panel_w / 2}" y="{H - pad + 30}" text-anchor="middle" font-size="12">optimizer step</text>',
                 f'<text x="{x0 - 4}" y="{pad + 4}" text-anchor="end" font-size="11">{hi:.3g}</text>',
                 f'<text x="{x0 - 4}" y="{H - pad}" text-anchor="end" font-size="11">{lo:.3g}</text>']
        # (iii), (iv) and (v) may coincide: draw (iii) wide underneath, (iv) dashed
        # and (v) dotted on top, so each stays visible
        style = {"iii": ' stroke-width="4" stroke-opacity="0.5"', "iv": ' stroke-width="1.6" stroke-dasharray="7,5"',
                 "v": ' stroke-width="1.6" stroke-dasharray="2,3"'}
        for k, v in series.items():
            pts = " ".join("%.1f,%.1f" % xy(i, y) for i, y in enumerate(v))
            st = style.get(k, ' stroke-width="1.4"')
            parts.append(f'<polyline fill="none" stroke="{COLORS[k]}"{st} points="{pts}"/>')
        return parts

    body = panel(pad, "loss", "training loss") + panel(2 * pad + panel_w, "grad_norm", "gradient norm (pre-clip)")
    legend = []
    y = H + 4
    for n, (key, name, _, _) in enumerate(m for m in MODES if m[0] in results):
        x = pad + (n % 3) * 280
        yy = y + (n // 3) * 16
        legend.append(f'<rect x="{x}" y="{yy - 5}" width="14" height="3" fill="{COLORS[key]}"/>'
                      f'<text x="{x + 18}" y="{yy}" font-size="11">({key}) {name}</text>')
    title = (f'<text x="{W / 2}" y="16" text-anchor="middle" font-size="13">bf16-loaded Llama, '
             f'{args.ranks} ranks, lr {args.lr:g} (ii: x{args.ranks})</text>')
    with open(path, "w") as f:
        f.write(f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H + 40}" font-family="sans-serif">'
                f'<rect width="100%" height="100%" fill="white"/>{title}{"".join(body)}{"".join(legend)}</svg>\n')


def table(results, args):
    rows = ["| mode | final loss | loss drop | lost updates (last 10 steps) | model state per rank (MiB) "
            "| bytes/param | tokens/s per device |", "|---|---|---|---|---|---|---|"]
    for key, name, _, _ in MODES:
        if key not in results:
            continue
        r = results[key]
        st = r["steps"]
        lost = sum(s["lost_update_fraction"] for s in st[-10:]) / min(10, len(st))
        tps = median([s["tokens_per_sec_per_device"] for s in st[2:]] or [st[-1]["tokens_per_sec_per_device"]])
        bpp = r["state_mib"] * 1048576 * args.ranks / r["params"]
        rows.append(f"| ({key}) {name} | {st[-1]['loss']:.4f} | {st[0]['loss'] - st[-1]['loss']:.4f} "
                    f"| {lost:.1%} | {r['state_mib']:.3f} | {bpp:.1f} | {tps:.0f} |")
    return "\n".join(rows)


def check(results):
    """What the seed found, as assertions (the small version is a test)."""
    def drop(k):  # mean of the first five steps' losses minus the last five's
        st = [s["loss"] for s in results[k]["steps"]]
        return sum(st[:5]) / 5 - sum(st[-5:]) / 5
    failures = []
    def expect(cond, what):
        if not cond:
            failures.append(what)
    expect(drop("i") < 0.35 * drop("iii"), f"(i) should barely improve: drop {drop('i'):.4f} vs (iii) {drop('iii'):.4f}")
    expect(drop("iii") > 0.1, f"(iii) should converge: drop {drop('iii'):.4f}")
    a = [(s["loss"], s["grad_norm"]) for s in results["iii"]["steps"]]
    b = [(s["loss"], s["grad_norm"]) for s in results["iv"]["steps"]]
    expect(a == b, "(iii) FSDP aligned and (iv) DeepSpeed must agree bit for bit")
    expect(drop("ii") > 2 * drop("i"), f"(ii) should move: drop {drop('ii'):.4f} vs (i) {drop('i'):.4f}")
    ii = [s["loss"] for s in results["ii"]["steps"]]
    iii = [s["loss"] for s in results["iii"]["steps"]]
    expect(max(abs(x - y) for x, y in zip(ii, iii)) > 0.05, "(ii) should differ from (iii)")
    expect(abs(drop("v") - drop("iii")) < 0.1 * drop("iii"),
           f"(v) Kahan should follow (iii): drop {drop('v'):.4f} vs {drop('iii'):.4f}")
    lost_i = results["i"]["steps"][-1]["lost_update_fraction"]
    expect(lost_i > 0.5, f"(i) should lose most updates, lost {lost_i:.2f}")
    expect(results["i"]["warned"], "(i) should warn about lost updates")
    expect(results["iii"]["steps"][-1]["lost_update_fraction"] < 0.05, "(iii) should keep its updates")
    return failures


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.path.join(ROOT, "out", "precision"))
    ap.add_argument("--ztrain", default=os.path.join(ROOT, "build", "ztrain"))
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--batch", type=int, default=4, help="per rank")
    ap.add_argument("--block_size", type=int, default=64)
    ap.add_argument("--lr", type=float, default=1e-5, help="the seed's learning rate")
    ap.add_argument("--small", action="store_true", help="the fast version the test suite runs")
    ap.add_argument("--check", action="store_true", help="assert the seed's findings")
    ap.add_argument("--model", help="a pretrained model directory to fine-tune instead of the small random "
                    "Llama (bench/seed_experiment.sh: SmolLM2-135M-Instruct); loaded in bf16 all the same")
    ap.add_argument("--tokenizer", help="the tokenizer.json directory for --model's vocabulary")
    args = ap.parse_args()
    if args.small:
        args.steps = 100
    os.makedirs(args.out, exist_ok=True)
    text, model = prepare(args.out, args.ztrain)
    model = args.model or model
    results = {}
    for key, name, flags, mult in MODES:
        lr = args.lr * (args.ranks if mult is None else mult)
        print(f"({key}) {name}: lr {lr:g} ...", flush=True)
        results[key] = run_mode(key, flags, lr, args, text, model, args.out, args.ztrain)
    plot = os.path.join(args.out, "precision.svg")
    svg_plot(results, args, plot)
    tab = table(results, args)
    with open(os.path.join(args.out, "table.md"), "w") as f:
        f.write(tab + "\n")
    print(tab)
    print(f"plot: {plot}\nper-step metrics: {args.out}/<mode>.jsonl")
    if args.check:
        failures = check(results)
        for f in failures:
            print("check failed:", f, file=sys.stderr)
        if failures:
            sys.exit(1)
        print("checks passed: (i) barely moves, (iii) == (iv) bit for bit, (ii) moves but differs, (v) follows (iii)")


if __name__ == "__main__":
    main()
