#!/usr/bin/env python3
"""profile_check.py TRACE TABLE STEP_A STEP_B [--collectives] — checks a `train --profile`
trace and the table the run printed (tests/cli/profile.sh):
  - the trace is JSON {"traceEvents": [...]}, complete events ("ph": "X") with numeric
    ts and dur >= 0, pid and tid, named tracks (thread_name metadata);
  - the expected kinds: kernels (matmul, attention, ...), the phases forward, backward,
    optimizer, data, log, one step event per profiled step, collectives if asked;
  - only steps STEP_A..STEP_B are there;
  - on the compute track (tid 1) events nest: any two are disjoint or one holds the
    other; every kernel and phase lies inside its step; kernels of the model lie in
    forward or backward;
  - the table's shares (kernel classes and "(outside any kernel)") add up to 100 %."""
import json, re, sys

trace, table, a, b = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
want_coll = "--collectives" in sys.argv
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
for k in ("matmul", "attention_forward", "attention_backward", "rmsnorm_forward", "adamw_step", "xent"):
    if k not in cats.get("kernel", set()):
        bad.append(f"kernel {k} missing: {sorted(cats.get('kernel', []))}")
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
for e in comp:
    if e["name"] in ("attention_forward", "attention_backward", "xent", "embed_forward") and \
            not inside(e, "phase", ("forward", "backward")):
        bad.append(f"{e['name']} outside forward/backward")
        break

rows, on = [], False
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
total = sum(rows)
if not rows or abs(total - 100.0) > 0.5:
    bad.append(f"table shares add up to {total:.2f} % over {len(rows)} rows")
for b_ in bad:
    print("  profile_check:", b_)
sys.exit(1 if bad else 0)
