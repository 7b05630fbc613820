# Trainer's model selection on `train` (issue 45, point 5): --early_stopping_patience
# stops the run after that many evaluations without improvement, --load_best_model_at_end
# writes the best checkpoint's model to --output_dir, and each checkpoint's
# trainer_state.json is Trainer's TrainerState (its fields only, as
# TrainerState.load_from_json needs: tests/fixtures/selection/trainer_state_fields.json)
# with log_history, best_metric, best_global_step and best_model_checkpoint; a resume
# keeps them.  (Which evaluation stops the run is held to transformers' own callback in
# test_selection; here the decision is recomputed from the file's own history.)
. "$(dirname "$0")/lib.bash"
"$ZTRAIN" init-model --model_config tests/fixtures/gqa_tied/config.json --output_dir "$TMP/init" --seed 3 >/dev/null ||
    fail "init-model"
printf 'The quick brown fox jumps over the lazy dog. %.0s' $(seq 40) > "$TMP/text.txt"
printf 'A lazy dog sleeps under the quick brown fox. %.0s' $(seq 10) > "$TMP/eval.txt"
run() { "$ZTRAIN" train --model "$TMP/init" --data "$TMP/text.txt" --eval_data "$TMP/eval.txt" --eval_steps 2 \
    --save_steps 2 --block_size 16 --per_device_train_batch_size 2 --threads 1 --peak_gflops 100 \
    --learning_rate 3e-2 --max_steps 40 --logging_steps 2 --early_stopping_patience 2 --load_best_model_at_end "$@"; }
run --output_dir "$TMP/out" > "$TMP/run.out" 2>&1 || fail "train with early stopping: $(tail -3 "$TMP/run.out")"
stop=$(sed -n 's/^early stopping after step \([0-9]*\):.*/\1/p' "$TMP/run.out")
[ -n "$stop" ] || fail "the run did not stop early: $(tail -3 "$TMP/run.out")"
/usr/bin/python3 - "$TMP/out" "$stop" <<'PY' || fail "trainer_state.json is not Trainer's, or the selection is wrong"
import json, os, sys
out, stop = sys.argv[1], int(sys.argv[2])
fields = json.load(open("tests/fixtures/selection/trainer_state_fields.json"))["fields"]
st = json.load(open(os.path.join(out, "checkpoint-%d" % stop, "trainer_state.json")))
assert set(st) <= set(fields), sorted(set(st) - set(fields))   # load_from_json takes its fields only
types = {"global_step": int, "max_steps": int, "epoch": (int, float), "log_history": list,
         "stateful_callbacks": dict, "is_world_process_zero": bool}
for k, t in types.items():
    assert isinstance(st[k], t), (k, st[k])
assert st["global_step"] == stop and st["max_steps"] == 40
h = st["log_history"]
evals = [r for r in h if "eval_loss" in r]
trains = [r for r in h if "loss" in r]
assert [r["step"] for r in evals] == list(range(2, stop + 1, 2)), evals
assert [r["step"] for r in trains] == list(range(2, stop + 1, 2)), trains
assert all(set(r) == {"epoch", "step", "loss", "grad_norm", "learning_rate"} for r in trains), trains[0]
# EarlyStoppingCallback (patience 2, threshold 0) and the best, from the history itself
best, count, stopped = None, 0, None
for r in evals:
    v = r["eval_loss"]
    count = 0 if best is None or v < best[0] else count + 1
    best = (v, r["step"]) if best is None or v < best[0] else best
    if count >= 2:
        stopped = r["step"]
        break
assert stopped == stop, (stopped, stop)
assert st["best_metric"] == best[0] and st["best_global_step"] == best[1], (st["best_metric"], best)
assert st["best_model_checkpoint"] == os.path.join(out, "checkpoint-%d" % best[1]), st["best_model_checkpoint"]
assert st["stateful_callbacks"]["EarlyStoppingCallback"]["attributes"]["early_stopping_patience_counter"] == 2
assert st["stateful_callbacks"]["ztrain"]["step"] == stop
PY
best=$(/usr/bin/python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['best_global_step'])" \
    "$TMP/out/checkpoint-$stop/trainer_state.json")
cmp -s "$TMP/out/model.safetensors" "$TMP/out/checkpoint-$best/model.safetensors" ||
    fail "--load_best_model_at_end: the final model is not checkpoint-$best's"
grep -q "^best model (eval_loss [0-9.]* at step $best) loaded from $TMP/out/checkpoint-$best$" "$TMP/run.out" ||
    fail "no line saying which model was saved: $(tail -3 "$TMP/run.out")"

# a resume from an earlier checkpoint keeps the history and decides the same
cp -r "$TMP/out" "$TMP/res"
rm -rf "$TMP/res/checkpoint-$stop" "$TMP/res/model.safetensors"
run --output_dir "$TMP/res" --resume_from_checkpoint "$TMP/res/checkpoint-4" > "$TMP/res.out" 2>&1 ||
    fail "resume: $(tail -3 "$TMP/res.out")"
grep -q "^early stopping after step $stop:" "$TMP/res.out" || fail "the resumed run did not stop at step $stop"
/usr/bin/python3 - "$TMP/out/checkpoint-$stop" "$TMP/res/checkpoint-$stop" <<'PY' || fail "resume lost the history"
import json, os, sys
a, b = (json.load(open(os.path.join(d, "trainer_state.json"))) for d in sys.argv[1:])
assert a["log_history"] == b["log_history"], "log_history"
assert (a["best_metric"], a["best_global_step"]) == (b["best_metric"], b["best_global_step"])
PY
d=$(same_checkpoint "$TMP/res/model.safetensors" "$TMP/out/model.safetensors") || fail "the resumed run saved another best model: $d"

# --save_total_limit 1 keeps the best checkpoint beside the newest, as Trainer's rotation does
run --output_dir "$TMP/lim" --save_total_limit 1 > "$TMP/lim.out" 2>&1 || fail "--save_total_limit 1: $(tail -3 "$TMP/lim.out")"
kept=$(cd "$TMP/lim" && ls -d checkpoint-* | sort -t- -k2 -n | tr '\n' ' ')
[ "$kept" = "checkpoint-$best checkpoint-$stop " ] || fail "--save_total_limit 1 kept '$kept', want checkpoint-$best and -$stop"
d=$(same_checkpoint "$TMP/lim/model.safetensors" "$TMP/out/model.safetensors") || fail "--save_total_limit 1: another best model: $d"

# without selection flags: no best, the history still kept
"$ZTRAIN" train --model "$TMP/init" --data "$TMP/text.txt" --block_size 16 --per_device_train_batch_size 2 \
    --threads 1 --peak_gflops 100 --max_steps 4 --logging_steps 2 --save_steps 4 --output_dir "$TMP/plain" \
    > /dev/null 2>&1 || fail "plain run"
/usr/bin/python3 -c "
import json, sys
st = json.load(open(sys.argv[1]))
assert st['best_metric'] is None and st['best_model_checkpoint'] is None, st
assert [r['step'] for r in st['log_history']] == [2, 4], st['log_history']" "$TMP/plain/checkpoint-4/trainer_state.json" ||
    fail "plain run's trainer_state.json"
expect_exit 2 "--early_stopping_patience needs evaluations" -- "$ZTRAIN" train --model "$TMP/init" \
    --data "$TMP/text.txt" --block_size 16 --early_stopping_patience 2
expect_exit 2 "--metric_for_best_model accuracy" -- run --output_dir "$TMP/x" --metric_for_best_model accuracy
finish
