#!/usr/bin/env python3
"""profile_check.py TRACE TABLE STEP_A STEP_B [--collectives] [--mode exact|fast|fast-bf16]
— checks a `train --profile` trace and the table the run printed (tests/cli/profile.sh):
  - the trace is JSON {"traceEvents": [...]}, complete events ("ph": "X") with numeric
    ts and dur >= 0, pid and tid, named tracks (thread_name metadata);
  - the expected kinds: the kernels of the kernel mode (--mode, default exact: the
    entries the model and the engine call in that mode, and none of the other mode's
    where the two differ), the phases forward, backward, optimizer, data, log, one step
    event per profiled step, collectives if asked;
  - only steps STEP_A..STEP_B are there;
  - on the compute track (tid 1) events nest: any two are disjoint or one holds the
    other; every kernel and phase lies inside its step; kernels of the model lie in
    forward or backward;
  - the table's shares (kernel classes and "(outside any kernel)") add up to 100 %;
    its kernel classes are the trace's kernel names, each with the trace's count, and
    the rate is TFLOP/s for the products and the attention, GB/s for the others."""
import json, re, sys

trace, table, a, b = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
want_coll = "--collectives" in sys.argv
mode = sys.argv[sys.argv.index("--mode") + 1] if "--mode" in sys.argv else "exact"
# What each kernel mode calls (docs/gpu.md, "Kernel modes"), and what it must not: both
# modes take the one step, one AdamW launch per unit and the verdict on the device (never
# per-parameter AdamW nor a host verdict's sums of squares); exact mode's cross-entropy on
# the whole logits with its loss on the host; fast mode's fused lm-head cross-entropy;
# with bf16 compute, fast mode's attention and SwiGLU over bf16 activations, and on one
# rank no pass rounding the gradients to the bf16 reduce dtype (round_bf16): the norm reads
# them rounded (sumsq_bf16_into), AdamW rounds as it reads.
MODES = {
    "exact": ({"matmul", "matmul_out", "attention_forward", "attention_backward", "rmsnorm_forward",
               "swiglu_forward", "adamw_unit", "step_verdict", "sumsq_into", "xent"},
              {"lmhead_xent", "adamw_step", "sumsq", "xent_into"}),
    "fast": ({"matmul", "matmul_out", "attention_forward", "attention_backward", "rmsnorm_forward",
              "swiglu_forward", "lmhead_xent", "adamw_unit", "step_verdict"},
             {"xent", "adamw_step", "sumsq"}),
    "fast-bf16": ({"matmul", "matmul_out", "attention_forward_act16", "attention_backward_act16",
                   "swiglu_forward_act16", "swiglu_backward_act16", "rmsnorm_forward", "lmhead_xent",
                   "adamw_unit", "step_verdict", "sumsq_bf16_into"},
                  {"xent", "adamw_step", "sumsq", "attention_forward", "attention_backward", "swiglu_forward",
                   "round_bf16"}),
}
want_k, never_k = MODES[mode]
# the classes whose work is counted in FLOPs (prof_backend.c); every other kernel moves bytes
FLOP_CLASSES = {"matmul", "matmul_out", "lmhead_xent", "attention_cache_forward"}
bad = []
d = json.load(open(trace))
ev = d["traceEvents"]
X = [e for e in ev if e.get("ph") == "X"]
names = {e["args"]["name"] for e in ev if e.get("ph") == "M" and e["name"] == "thread_name"}
if not any("kernels" in n for n in names):
    bad.append(f"no named compute track: {names}")
for e in X:
    if not (isinstance(e["ts"], (int, float)) and isinstance(e["dur"], (int, float)) and e["dur"] >= 0
            and isinstance(e["pid"], int) and isinstance(e["tid"], int) and e["name"] and e["cat"]):
        bad.append(f"malformed event {e}")
        break
cats = {}
for e in X:
    cats.setdefault(e["cat"], set()).add(e["name"])
kern = cats.get("kernel", set())
for k in sorted(want_k - kern):
    bad.append(f"{mode} mode: kernel {k} missing: {sorted(kern)}")
for k in sorted(never_k & kern):
    bad.append(f"{mode} mode: kernel {k} called: {sorted(kern)}")
for p in ("forward", "backward", "optimizer", "data", "log"):
    if p not in cats.get("phase", set()):
        bad.append(f"phase {p} missing")
if want_coll and not cats.get("collective"):
    bad.append("no collective events")
steps = sorted(e["args"]["step"] for e in X if e["cat"] == "step")
if steps != list(range(a, b + 1)):
    bad.append(f"step events {steps}, want {a}..{b}")
if {e["args"]["step"] for e in X} - set(range(a, b + 1)):
    bad.append("events outside the profiled steps")

eps = 1e-3  # the trace's µs have 3 decimals
comp = sorted((e for e in X if e["tid"] == 1), key=lambda e: (e["ts"], -e["dur"]))
for i, x in enumerate(comp):  # nesting: each next event starts after x ends, or ends inside x
    xe = x["ts"] + x["dur"]
    for y in comp[i + 1:]:
        if y["ts"] >= xe - eps:
            break
        if y["ts"] + y["dur"] > xe + eps:
            bad.append(f"{y['name']} overlaps {x['name']} without nesting")
            break
def inside(e, cat, names=None):
    return any(p["cat"] == cat and (names is None or p["name"] in names) and p["ts"] - eps <= e["ts"]
               and e["ts"] + e["dur"] <= p["ts"] + p["dur"] + eps and p["args"]["step"] == e["args"]["step"]
               for p in comp)
for e in comp:
    if e["cat"] != "step" and not inside(e, "step"):
        bad.append(f"{e['name']} outside its step")
        break
MODEL_KERNELS = ("attention_forward", "attention_backward", "attention_forward_act16", "attention_backward_act16",
                 "xent", "lmhead_xent", "embed_forward")
for e in comp:
    if e["name"] in MODEL_KERNELS and not inside(e, "phase", ("forward", "backward")):
        bad.append(f"{e['name']} outside forward/backward")
        break

rows, classes, on = [], {}, False
for line in open(table):
    if line.startswith("profile: steps"):
        on = True
        continue
    if on:
        m = re.match(r"\s+(\S.*?)\s+(?:\d+\s+)?(-?[\d.]+)\s+(-?[\d.]+)(\s|$)", line)
        if line.strip().startswith("collectives") or line.strip().startswith("phases"):
            break
        if m and not line.strip().startswith("kernel class"):
            rows.append(float(m.group(3)))
        # a kernel class: name, count, total ms, share %, achieved rate
        k = re.match(r"\s+(\S+)\s+(\d+)\s+[\d.]+\s+[\d.]+\s+(.*\S)\s*$", line)
        if k:
            classes[k.group(1)] = (int(k.group(2)), k.group(3))
count = {}
for e in X:
    if e["cat"] == "kernel" and e["pid"] == X[0]["pid"]:
        count[e["name"]] = count.get(e["name"], 0) + 1
if {c for c in classes if c in kern} != set(count):
    bad.append(f"table classes {sorted(classes)} are not the trace's kernels {sorted(count)}")
for c, (n, rate) in classes.items():
    if c in count and n != count[c]:
        bad.append(f"table: {c} counted {n}, the trace has {count[c]}")
    unit = "TFLOP/s" if c in FLOP_CLASSES or c.startswith("attention_") else "GB/s"
    if c in want_k and not rate.endswith(" " + unit):
        bad.append(f"table: {c} achieved '{rate}', want {unit}")
total = sum(rows)
if not rows or abs(total - 100.0) > 0.5:
    bad.append(f"table shares add up to {total:.2f} % over {len(rows)} rows")
for b_ in bad:
    print("  profile_check:", b_)
sys.exit(1 if bad else 0)
