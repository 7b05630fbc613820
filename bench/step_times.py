"""step_times.py — the figure the bench scripts take from a ztrain JSONL log: the
median step_time_s after the warm-up steps, and with --fastest the fastest step too.

  /usr/bin/python3 bench/step_times.py LOG [--skip N] [--fastest]

--skip N leaves out the first N steps (default: 2, or 1 when the log has fewer than
5 steps, so a short run still has a median of more than its last step)."""

import argparse
import json
import statistics

ap = argparse.ArgumentParser()
ap.add_argument("log")
ap.add_argument("--skip", type=int)
ap.add_argument("--fastest", action="store_true")
args = ap.parse_args()
with open(args.log) as f:
    t = [json.loads(line)["step_time_s"] for line in f]
skip = args.skip if args.skip is not None else (2 if len(t) >= 5 else 1)
t = t[skip:]
if not t:
    raise SystemExit("step_times: %s has no steps after the first %d" % (args.log, skip))
print("%.4f" % statistics.median(t) + (" %.4f" % min(t) if args.fastest else ""))
