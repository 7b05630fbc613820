# `train --report_to tensorboard`: the event files ztrain writes itself are read
# back by TensorBoard's own reader (the tensorboard package from PyPI, which
# scripts/setup.sh installs): Trainer's tags, the steps of --logging_steps and the
# last, the values of the JSONL log, and the default directory OUTPUT_DIR/runs/.
# Without the package this test fails: it is a dependency, not an option.
. "$(dirname "$0")/lib.bash"
py=/usr/bin/python3
$py -c "import tensorboard" 2>/dev/null || { fail "python3 lacks the tensorboard package: run scripts/setup.sh"; finish; }
cfg=tests/fixtures/gqa_tied/config.json
"$ZTRAIN" init-model --model_config "$cfg" --output_dir "$TMP/init" --seed 3 >/dev/null || fail "init-model"
printf 'The quick brown fox jumps over the lazy dog. %.0s' $(seq 60) > "$TMP/text.txt"
run() { "$ZTRAIN" train --model "$TMP/init" --data "$TMP/text.txt" --block_size 32 --per_device_train_batch_size 2 \
    --threads 1 --learning_rate 1e-3 --warmup_steps 2 "$@"; }
run --max_steps 5 --logging_steps 2 --report_to tensorboard --output_dir "$TMP/out" --log_jsonl "$TMP/log.jsonl" \
    --eval_data "$TMP/text.txt" --eval_steps 4 > /dev/null || fail "train --report_to tensorboard"
ls "$TMP"/out/runs/*_*/events.out.tfevents.* >/dev/null 2>&1 || fail "no OUTPUT_DIR/runs/<time>_<host>/events.out.tfevents.*"
$py - "$TMP/out/runs" "$TMP/log.jsonl" <<'PY' || fail "TensorBoard read back other values than the JSONL log"
import glob, json, math, sys
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
runs = glob.glob(sys.argv[1] + "/*")
assert len(runs) == 1, runs
ea = EventAccumulator(runs[0], size_guidance={"scalars": 0})
ea.Reload()
tags = sorted(ea.Tags()["scalars"])
assert tags == ["eval/loss", "train/epoch", "train/grad_norm", "train/learning_rate", "train/loss"], tags
recs = [json.loads(l) for l in open(sys.argv[2])]
steps = {r["step"]: r for r in recs if "loss" in r}
evals = {r["step"]: r for r in recs if "eval_loss" in r}
def scalars(tag):
    return [(e.step, e.value) for e in ea.Scalars(tag)]
def close(a, b):
    return math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-12)
# every 2 steps and after the last (5); the loss is the mean since the previous log
assert [s for s, _ in scalars("train/loss")] == [2, 4, 5], scalars("train/loss")
for (s, v), first in zip(scalars("train/loss"), [1, 3, 5]):
    mean = sum(steps[k]["loss"] for k in range(first, s + 1)) / (s + 1 - first)
    assert close(v, mean), (s, v, mean)
for s, v in scalars("train/learning_rate"):
    assert close(v, steps[s]["lr"]), (s, v, steps[s]["lr"])
for s, v in scalars("train/grad_norm"):
    assert close(v, steps[s]["grad_norm"]), (s, v)
# (2700 - 1) // 32 = 84 windows, 2 a step: epoch = step * 2 / 84
for s, v in scalars("train/epoch"):
    assert close(v, s * 2 / 84), (s, v)
assert [s for s, _ in scalars("eval/loss")] == [4], scalars("eval/loss")
assert close(scalars("eval/loss")[0][1], evals[4]["eval_loss"])
PY
# --logging_dir puts the events where it says, without --output_dir
run --max_steps 2 --report_to tensorboard --logging_dir "$TMP/tb" > /dev/null || fail "--logging_dir"
ls "$TMP"/tb/events.out.tfevents.* >/dev/null 2>&1 || fail "--logging_dir: no event file in it"
# a damaged record is noticed by TensorBoard's reader: the CRCs are TFRecord's
f=$(ls "$TMP"/tb/events.out.tfevents.*)
$py - "$f" <<'PY' || fail "TensorBoard's reader did not notice a flipped byte: the CRCs are not checked or not written"
import sys
from tensorboard.compat.tensorflow_stub import errors
from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import PyRecordReader_New
data = bytearray(open(sys.argv[1], "rb").read())
n = int.from_bytes(data[:8], "little")
data[12 + n // 2] ^= 0x40  # a byte inside the first record's data
open(sys.argv[1], "wb").write(data)
r = PyRecordReader_New(sys.argv[1])
try:
    r.GetNext()
except errors.DataLossError:
    sys.exit(0)
sys.exit(1)
PY
# two ranks: rank 0 alone writes, one event file
"${mpi[@]}" -np 2 "$ZTRAIN" train --model "$TMP/init" --data "$TMP/text.txt" --block_size 32 \
    --per_device_train_batch_size 2 --threads 1 --max_steps 3 --logging_steps 1 --report_to tensorboard \
    --logging_dir "$TMP/tb2" > /dev/null 2>&1 || fail "train --report_to tensorboard on 2 ranks"
[ "$(ls "$TMP"/tb2/events.out.tfevents.* 2>/dev/null | wc -l)" -eq 1 ] || fail "2 ranks: want one event file in $TMP/tb2"
$py - "$TMP/tb2" <<'PY' || fail "2 ranks: the event file does not hold steps 1-3"
import sys
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
ea = EventAccumulator(sys.argv[1]); ea.Reload()
assert [e.step for e in ea.Scalars("train/loss")] == [1, 2, 3]
PY
expect_exit 2 "--report_to: expected none or tensorboard" -- run --report_to wandb
expect_exit 2 "--report_to tensorboard: give --output_dir" -- run --report_to tensorboard
finish
