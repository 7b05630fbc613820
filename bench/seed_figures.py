#!/usr/bin/env python3
"""The seed's experiment on real weights (issue 40, point 5), run by bench/seed_experiment.sh.

SmolLM2-135M-Instruct (converted from its GGUF file by `ztrain convert`), loaded in bf16,
fine-tuned on the licence texts of /usr/share/common-licenses in SmolLM2's own tokens
(`ztrain tokenize`, one .npy that every run reads, so ztrain and its peers see the same
windows in the same order: contract §4 with --shuffle false), on 2 ranks x 1 thread, constant lr, no weight
decay, clipping at 1.0, in these runs:

  fsdp16@lr    FSDP face, memory-constrained: bf16 flat parameters and AdamW state
  fsdp16@2lr   the same at lr x ranks (the seed's "fix")
  fsdp-mp@lr   FSDP face with bf16 mixed precision: fp32 master (Accelerate's fixed mode)
  ds@lr        DeepSpeed face, ZeRO-3, bf16: fp32 master
  fsdp16@big   memory-constrained FSDP at a larger lr chosen from the audit (--big_lr,
               4e-4: docs/precision.md says why)
  ds@big       DeepSpeed at that learning rate

With --peers each run is repeated with the real thing from PyPI (bench/peers/peers.py's
worker in the peer venv): torch FSDP FULL_SHARD on the bf16-loaded model without mixed
precision (bf16 flat parameters and AdamW state), with Accelerate's mixed precision (the
model upcast to fp32, MixedPrecision(bf16) and autocast), and deepspeed.initialize with
ZeRO-3 and "bf16" enabled.  Each run records its loss and its lost-update fraction per
step; four SVG figures (solid: ztrain, dashed: its peer) and table.md are written to --out.

--audit only prints, for each learning rate, the fraction of the bf16 weights whose first
Adam step (lr x sign(g) per element) is smaller than half an ulp of the weight: the
updates that the memory-constrained mode must lose.  Standard library + numpy only.
"""
import argparse
import json
import os
import sys
import types

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(ROOT, "examples", "precision"))
sys.path.insert(0, os.path.join(HERE, "peers"))
import run as precision   # noqa: E402  (run_mode: one ztrain run and its JSONL)

FSDP16 = ["--use_fsdp"]
FSDP_MP = ["--use_fsdp", "--mixed_precision", "bf16"]
DS = ["--use_deepspeed", "--zero_stage", "3", "--mixed_precision", "bf16"]
# key, label, ztrain flags, peer run (suite, variant, precision), lr name
RUNS = [
    ("fsdp16@lr", "FSDP bf16 flat (memory-constrained)", FSDP16, ("fsdp", "FULL_SHARD", "bf16-flat"), "lr"),
    ("ds@lr", "DeepSpeed ZeRO-3 bf16 (fp32 master)", DS, ("deepspeed", "3", "bf16"), "lr"),
    ("fsdp16@2lr", "FSDP bf16 flat, lr x ranks", FSDP16, ("fsdp", "FULL_SHARD", "bf16-flat"), "2lr"),
    ("fsdp-mp@lr", "FSDP mixed precision (fp32 master)", FSDP_MP, ("fsdp", "FULL_SHARD", "bf16"), "lr"),
    ("fsdp16@big", "FSDP bf16 flat (memory-constrained)", FSDP16, ("fsdp", "FULL_SHARD", "bf16-flat"), "big"),
    ("ds@big", "DeepSpeed ZeRO-3 bf16 (fp32 master)", DS, ("deepspeed", "3", "bf16"), "big"),
]
FIGURES = [
    ("seed_fig1_small_lr", "small lr {lr:g}: FSDP bf16 stalls, DeepSpeed falls", ["fsdp16@lr", "ds@lr"],
     "fsdp16@lr"),
    ("seed_fig2_lr_x_ranks", "FSDP bf16 at lr x ranks = {lr2:g} (DeepSpeed at {lr:g} for reference)",
     ["fsdp16@2lr", "fsdp16@lr", "ds@lr"], "fsdp16@lr"),
    ("seed_fig3_few_lost", "FSDP bf16 and DeepSpeed at the audit's larger lr {big:g}",
     ["fsdp16@big", "ds@big"], "fsdp16@big"),
    ("seed_fig4_accelerate_fixed", "lr {lr:g}: Accelerate's fixed FSDP (fp32 master) tracks DeepSpeed",
     ["fsdp-mp@lr", "ds@lr", "fsdp16@lr"], "ds@lr"),
]
COLORS = {"fsdp16@lr": "#d62728", "ds@lr": "#1f77b4", "fsdp16@2lr": "#ff7f0e", "fsdp-mp@lr": "#2ca02c",
          "fsdp16@big": "#9467bd", "ds@big": "#17becf"}


def bf16_weights(model_dir):
    """Every weight of model.safetensors, rounded to bf16 (as --torch_dtype bfloat16 loads it)."""
    path = os.path.join(model_dir, "model.safetensors")
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(n))
        blob = f.read()
    parts = []
    for name, t in header.items():
        if name == "__metadata__":
            continue
        a, b = t["data_offsets"]
        if t["dtype"] == "F32":
            x = np.frombuffer(blob[a:b], dtype=np.float32)
        elif t["dtype"] == "BF16":
            x = (np.frombuffer(blob[a:b], dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)
        else:
            raise SystemExit("seed_figures: %s: tensor %s has dtype %s (expected F32 or BF16)"
                             % (path, name, t["dtype"]))
        u = x.view(np.uint32)
        parts.append(((u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000).view(np.float32))  # round to nearest even
    return np.concatenate(parts)


def audit(model_dir, lrs):
    """Predicted lost fraction of Adam's first step (|update| = lr for every element): a bf16
    weight w in [2^e, 2^(e+1)) has an ulp of 2^(e-7); the update is lost when lr < 2^(e-8)."""
    w = np.abs(bf16_weights(model_dir))
    w = w[w > 0]
    half_ulp = np.exp2(np.floor(np.log2(w)) - 8)
    rows = []
    for lr in lrs:
        rows.append((lr, float(np.mean(lr < half_ulp))))
        print("lr %-8g predicted lost fraction of step 1: %.1f%%" % (lr, 100 * rows[-1][1]))
    print("median |w| %.4g over %d non-zero bf16 weights" % (np.median(w), w.size))
    return rows


def lr_of(name, a):
    return {"lr": a.lr, "2lr": a.lr * a.ranks, "big": a.big_lr}[name]


def ztrain_run(key, flags, lr, a, model):
    args = types.SimpleNamespace(ranks=a.ranks, block_size=a.block_size, batch=a.batch, steps=a.steps,
                                 tokenizer=None)
    # windows in order (contract §4 without the shuffle), as the peers read them
    r = precision.run_mode("ztrain-" + key, flags + ["--shuffle", "false"], lr, args, a.data, model, a.out,
                           a.ztrain)
    return dict(loss=[s["loss"] for s in r["steps"]], lost=[s["lost_update_fraction"] for s in r["steps"]],
                step_s=[s["step_time_s"] for s in r["steps"]])


def peer_run(key, run, lr, a, model):
    import peers
    res = peers.run_peer(run, model, a.data, a.block_size, a.batch, a.steps, 1, a.out, a.python,
                         seed=dict(lr=lr), tag="peer-" + key.replace("@", "-"))
    if "error" in res:
        return dict(error=res["error"])
    return dict(loss=res["losses"], lost=res["lost_update_fraction"], step_s=res["step_times"],
                versions="torch %s, transformers %s%s" % (res["torch"], res["transformers"],
                                                         ", " + res["note"] if res["note"] else ""))


def tail_mean(xs, n=10):
    xs = xs[-n:]
    return sum(xs) / len(xs)


def svg(path, title, keys, ref, results):
    """Two panels against step: the loss, and the loss minus ztrain's run `ref` on the same
    batch (every run reads the same windows in the same order, so this difference is free of
    the batch-to-batch noise of the loss).  ztrain solid, its peer dashed, one colour per
    run; the legend gives each curve's lost-update fraction (mean of the last 10 steps) and
    final loss."""
    W, L, R, PH, GAP = 760, 60, 20, 200, 56
    curves = [(k, side) for k in keys for side in ("ztrain", "peer") if "loss" in results.get(side, {}).get(k, {})]
    base = results["ztrain"][ref]["loss"]
    n = max(len(results[side][k]["loss"]) for k, side in curves)
    pw = W - L - R
    out = ['<rect width="100%" height="100%" fill="white"/>',
           f'<text x="{W / 2}" y="18" text-anchor="middle" font-size="13">{title}</text>']
    label = dict((x[0], x[1]) for x in RUNS)
    for p, (what, f) in enumerate([("training loss (mean over ranks)", lambda ys: ys),
                                   (f"loss minus ztrain {ref}'s on the same batch",
                                    lambda ys: [y - b for y, b in zip(ys, base)])]):
        top = 34 + p * (PH + GAP)
        series = [(k, side, f(results[side][k]["loss"])) for k, side in curves]
        lo = min(min(v) for _, _, v in series)
        hi = max(max(v) for _, _, v in series)
        hi = hi if hi > lo else lo + 1

        def xy(i, y):
            return L + pw * i / max(1, n - 1), top + PH * (hi - y) / (hi - lo)
        out += [f'<rect x="{L}" y="{top}" width="{pw}" height="{PH}" fill="none" stroke="#999"/>',
                f'<text x="{L + 4}" y="{top + 13}" font-size="11">{what}</text>',
                f'<text x="{L - 4}" y="{top + 4}" text-anchor="end" font-size="11">{hi:.3f}</text>',
                f'<text x="{L - 4}" y="{top + PH}" text-anchor="end" font-size="11">{lo:.3f}</text>',
                f'<text x="{L}" y="{top + PH + 14}" font-size="11">1</text>',
                f'<text x="{L + pw}" y="{top + PH + 14}" text-anchor="end" font-size="11">{n}</text>',
                f'<text x="{L + pw / 2}" y="{top + PH + 28}" text-anchor="middle" font-size="11">optimizer step</text>']
        if lo < 0 < hi:
            y0 = xy(0, 0)[1]
            out.append(f'<line x1="{L}" y1="{y0:.1f}" x2="{L + pw}" y2="{y0:.1f}" stroke="#ccc"/>')
        for k, side, v in series:
            pts = " ".join("%.1f,%.1f" % xy(i, y) for i, y in enumerate(v))
            dash = ' stroke-dasharray="6,4"' if side == "peer" else ""
            out.append(f'<polyline fill="none" stroke="{COLORS[k]}" stroke-width="1.5"{dash} points="{pts}"/>')
    y = 34 + 2 * (PH + GAP) - 14
    for k, side in curves:
        r = results[side][k]
        dash = ' stroke-dasharray="6,4"' if side == "peer" else ""
        who = "ztrain" if side == "ztrain" else "real peer"
        out.append(f'<line x1="{L}" y1="{y - 4}" x2="{L + 24}" y2="{y - 4}" stroke="{COLORS[k]}" stroke-width="2"{dash}/>'
                   f'<text x="{L + 30}" y="{y}" font-size="11">{who}: {label[k]}, lr {results["lr"][k]:g}: '
                   f'lost {tail_mean(r["lost"]):.1%}, final loss {r["loss"][-1]:.3f}</text>')
        y += 16
    with open(path, "w") as f:
        f.write(f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{y}" '
                f'font-family="sans-serif">{"".join(out)}</svg>\n')


def table(results):
    rows = ["| run | lr | ztrain final loss | ztrain lost (last 10) | peer final loss | peer lost (last 10) "
            "| max abs dloss | ztrain s/step | peer s/step |", "|---|---|---|---|---|---|---|---|---|"]
    for key, label, _, _, _ in RUNS:
        z, p = results["ztrain"].get(key), results["peer"].get(key, {})
        if z is None:
            continue
        row = [f"{key}: {label}", f"{results['lr'][key]:g}", f"{z['loss'][-1]:.4f}", f"{tail_mean(z['lost']):.1%}"]
        if "loss" in p:
            dl = max(abs(x - y) for x, y in zip(z["loss"], p["loss"]))
            row += [f"{p['loss'][-1]:.4f}", f"{tail_mean(p['lost']):.1%}", f"{dl:.3f}",
                    f"{np.median(z['step_s']):.2f}", f"{np.median(p['step_s']):.2f}"]
        else:
            row += [p.get("error", "not run").splitlines()[-1][:80] if p else "not run", "–", "–",
                    f"{np.median(z['step_s']):.2f}", "–"]
        rows.append("| " + " | ".join(row) + " |")
    return "\n".join(rows)


def load(path):
    if not os.path.exists(path):
        return {"ztrain": {}, "peer": {}, "lr": {}}
    with open(path) as f:
        return json.load(f)


def save(path, results, side, key, r, lr):
    """Merge one run into results.json as it is on disk now, so that two drivers writing the
    same --out (say ztrain's runs and the peers' at the same time) keep each other's runs."""
    disk = load(path)
    disk[side][key] = r
    disk["lr"][key] = lr
    results.update(disk)
    with open(path + ".tmp", "w") as f:
        json.dump(disk, f)
    os.replace(path + ".tmp", path)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True, help="the converted SmolLM2 directory")
    ap.add_argument("--data", required=True, help="the token ids (.npy) every run reads")
    ap.add_argument("--out", required=True)
    ap.add_argument("--ztrain", default=os.path.join(ROOT, "build", "ztrain"))
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--block_size", type=int, default=32)
    ap.add_argument("--batch", type=int, default=2, help="sequences per rank and step")
    ap.add_argument("--lr", type=float, default=1e-5, help="the small learning rate (the seed's)")
    ap.add_argument("--big_lr", type=float, default=4e-4,
                    help="the audit's middle learning rate (docs/precision.md says why 4e-4)")
    ap.add_argument("--runs", default=",".join(r[0] for r in RUNS),
                    help="which runs (default: all six; '' runs none and only draws)")
    ap.add_argument("--peers", action="store_true", help="repeat each run with torch FSDP / DeepSpeed")
    ap.add_argument("--no_ztrain", action="store_true", help="only the peers (reuses ztrain's results.json)")
    ap.add_argument("--python", default=os.path.join(ROOT, "build", "peers-venv", "bin", "python"))
    ap.add_argument("--merge", action="append", help="also take the runs of this other --out directory")
    ap.add_argument("--audit", action="store_true", help="only print the predicted lost fractions")
    a = ap.parse_args()
    if a.audit:
        audit(a.model, [1e-6, 2e-6, 5e-6, 1e-5, 2e-5, 5e-5, 1e-4, 2e-4, 3e-4, 4e-4, 5e-4, 1e-3])
        return 0
    if a.peers and not os.access(a.python, os.X_OK):
        raise SystemExit("seed_figures: no peer python at %s (bench/peers/setup.sh, or --python)" % a.python)
    os.makedirs(a.out, exist_ok=True)
    saved = os.path.join(a.out, "results.json")
    results = load(saved)
    for other in a.merge or []:   # runs made in another --out
        o = load(os.path.join(other, "results.json"))
        for side in ("ztrain", "peer"):
            for key, r in o[side].items():
                save(saved, results, side, key, r, o["lr"][key])
    want = a.runs.split(",") if a.runs else []
    for key, label, flags, run, lr_name in RUNS:
        if key not in want:
            continue
        lr = lr_of(lr_name, a)
        results["lr"][key] = lr
        for side in (["ztrain"] if not a.no_ztrain else []) + (["peer"] if a.peers else []):
            print(f"{side} {key}: {label}, lr {lr:g} ...", flush=True)
            r = ztrain_run(key, flags, lr, a, a.model) if side == "ztrain" else peer_run(key, run, lr, a, a.model)
            results[side][key] = r
            print("  " + (r["error"] if "error" in r else "final loss %.4f, lost %.1f%% (last 10), %.2f s/step"
                          % (r["loss"][-1], 100 * tail_mean(r["lost"]), np.median(r["step_s"]))), flush=True)
            save(saved, results, side, key, r, lr)
    # the titles name the lr each run was made at (a redraw with --runs '' may not repeat it)
    lrs = results["lr"]
    names = dict(lr=lrs.get("fsdp16@lr", a.lr), lr2=lrs.get("fsdp16@2lr", a.lr * a.ranks),
                 big=lrs.get("fsdp16@big", a.big_lr))
    for name, title, keys, ref in FIGURES:
        if all(k in results["ztrain"] for k in keys):
            svg(os.path.join(a.out, name + ".svg"), title.format(**names), keys, ref, results)
    tab = table(results)
    with open(os.path.join(a.out, "table.md"), "w") as f:
        f.write(tab + "\n")
    print(tab)
    return 0


if __name__ == "__main__":
    sys.exit(main())
