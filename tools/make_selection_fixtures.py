"""Write tests/fixtures/selection/: what transformers decides at each evaluation of a
sequence of eval losses (early_stopping.txt), and the fields of its TrainerState
(trainer_state_fields.json, the schema tests/cli/selection.sh holds
trainer_state.json to, since CI has no transformers).

Run with the dev venv (transformers 5.x; the version is written into both files):
    OMP_NUM_THREADS=1 /work/devvenv/bin/python tools/make_selection_fixtures.py

early_stopping.txt, one case a line:
    PATIENCE THRESHOLD GREATER N V_1 ... V_N | STOP BEST_STEP BEST_METRIC
V_k is the metric of evaluation k (at step k); EarlyStoppingCallback.on_evaluate,
then Trainer._determine_best_metric (Trainer's order) run on each; STOP is the
evaluation after which should_training_stop is first set (0: never), BEST_STEP and
BEST_METRIC the state's best_global_step and best_metric at that point.
Deterministic.
"""

import dataclasses
import json
import os
import types

import transformers
from transformers import EarlyStoppingCallback, Trainer, TrainerControl, TrainerState
from transformers.trainer_utils import SaveStrategy

SEQUENCES = [
    [3.0, 2.5, 2.6, 2.7, 2.4, 2.45],
    [3.0, 2.99, 2.98, 2.97, 2.96],
    [1.0, 1.0, 1.0, 1.0],
    [5.0, 4.0, 3.0, 2.0, 1.0],
    [2.0, 2.2, 1.9, 2.3, 2.4, 1.5, 1.6],
    [0.5, 0.6, 0.4, 0.45, 0.3, 0.31, 0.32, 0.33],
]
SETTINGS = [(1, 0.0, False), (2, 0.0, False), (2, 0.015, False), (3, 0.05, False), (1, 0.0, True),
            (2, 0.0, True), (2, 0.05, True)]


def run(values, patience, threshold, greater):
    args = types.SimpleNamespace(metric_for_best_model="eval_loss", greater_is_better=greater,
                                 save_strategy=SaveStrategy.STEPS, load_best_model_at_end=True)
    state = TrainerState()
    cb = EarlyStoppingCallback(early_stopping_patience=patience, early_stopping_threshold=threshold)
    fake = types.SimpleNamespace(args=args, state=state)
    for k, v in enumerate(values, start=1):
        control = TrainerControl()
        state.global_step = k
        metrics = {"eval_loss": v}
        cb.on_evaluate(args, state, control, metrics=metrics)
        Trainer._determine_best_metric(fake, metrics=metrics, trial=None)
        if control.should_training_stop:
            return k, state.best_global_step, state.best_metric
    return 0, state.best_global_step, state.best_metric


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out = os.path.join(root, "tests", "fixtures", "selection")
    lines = [f"# transformers {transformers.__version__}: tools/make_selection_fixtures.py"]
    for values in SEQUENCES:
        for patience, threshold, greater in SETTINGS:
            stop, step, best = run(values, patience, threshold, greater)
            vals = " ".join(repr(v) for v in values)
            lines.append(f"{patience} {threshold!r} {int(greater)} {len(values)} {vals} | {stop} {step} {best!r}")
    with open(os.path.join(out, "early_stopping.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")
    fields = {fl.name: str(fl.type) for fl in dataclasses.fields(TrainerState)}
    with open(os.path.join(out, "trainer_state_fields.json"), "w") as f:
        json.dump({"transformers": transformers.__version__, "fields": fields}, f, indent=1, sort_keys=True)
        f.write("\n")
    print(f"{out}: {len(lines) - 1} cases, {len(fields)} TrainerState fields")


if __name__ == "__main__":
    main()
