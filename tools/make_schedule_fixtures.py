"""Write tests/fixtures/schedules/lr.txt: the learning rate transformers' get_scheduler
gives at every step, for each of the schedules ztrain offers, with and without
lr_scheduler_kwargs (what Trainer passes as scheduler_specific_kwargs).

Run with the dev venv (torch 2.x and transformers 5.x; the versions used are written
into the file's first line):
    OMP_NUM_THREADS=1 /work/devvenv/bin/python tools/make_schedule_fixtures.py

One case a line, fields separated by single spaces:
    NAME S W LR KWARGS N LR_0 ... LR_{N-1}
KWARGS is a JSON object without spaces, LR_u the learning rate of update u (0-based,
as ztrain numbers them: the lr LambdaLR holds after u scheduler steps), printed with
17 significant digits.  tests/test_optim.c reads it.  Deterministic.
"""

import json
import os

import torch
import transformers
from transformers import get_scheduler

# (name, kwargs); the six older schedules at their defaults and with kwargs, then the three added
CASES = [
    ("linear", {}), ("cosine", {}), ("cosine", {"num_cycles": 1.25}),
    ("cosine_with_restarts", {}), ("cosine_with_restarts", {"num_cycles": 3}),
    ("polynomial", {}), ("polynomial", {"lr_end": 1e-6, "power": 2.0}),
    ("constant", {}), ("constant_with_warmup", {}),
    ("cosine_with_min_lr", {"min_lr": 1e-6}), ("cosine_with_min_lr", {"min_lr_rate": 0.1}),
    ("cosine_with_min_lr", {"min_lr_rate": 0.25, "num_cycles": 1.5}),
    ("warmup_stable_decay", {"num_decay_steps": 3}),
    ("warmup_stable_decay", {"num_decay_steps": 4, "num_stable_steps": 2, "decay_type": "linear",
                             "min_lr_ratio": 0.1}),
    ("warmup_stable_decay", {"num_decay_steps": 2, "warmup_type": "cosine", "decay_type": "1-sqrt",
                             "min_lr_ratio": 0.05}),
    ("warmup_stable_decay", {"num_decay_steps": 5, "warmup_type": "1-sqrt", "num_cycles": 1.0}),
    ("inverse_sqrt", {}), ("inverse_sqrt", {"timescale": 5}),
]
TOTALS = [1, 7, 10, 30]
WARMUPS = [0, 1, 3, 10]
LRS = [5e-5, 1e-3]


def sequence(name, kwargs, total, warmup, lr):
    p = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.AdamW([p], lr=lr)
    sched = get_scheduler(name, opt, num_warmup_steps=warmup, num_training_steps=total,
                          scheduler_specific_kwargs=dict(kwargs))
    out = []
    for _ in range(total + 3):
        out.append(sched.get_last_lr()[0])
        opt.step()
        sched.step()
    return out


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    lines = [f"# transformers {transformers.__version__}, torch {torch.__version__}: tools/make_schedule_fixtures.py"]
    for name, kwargs in CASES:
        for total in TOTALS:
            for warmup in WARMUPS:
                if warmup >= total and name == "polynomial":
                    continue  # transformers divides by S - w
                for lr in LRS:
                    if name == "polynomial" and lr <= kwargs.get("lr_end", 1e-7):
                        continue
                    lrs = sequence(name, kwargs, total, warmup, lr)
                    kw = json.dumps(kwargs, separators=(",", ":"), sort_keys=True)
                    vals = " ".join(f"{v:.17g}" for v in lrs)
                    lines.append(f"{name} {total} {warmup} {lr!r} {kw} {len(lrs)} {vals}")
    path = os.path.join(root, "tests", "fixtures", "schedules", "lr.txt")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    print(f"{path}: {len(lines) - 1} cases")


if __name__ == "__main__":
    main()
