# LoRA checkpoints, resume and evaluation (issue 46, point 5; docs/lora.md).
# checkpoint-N of a --use_peft run holds the adapter units' state alone (master, m and
# v of the units that hold lora_A/lora_B, no base unit, no model.safetensors), the
# adapters in PEFT's format (so it is also an adapter directory), and in
# trainer_state.json the LoRA settings and the base's digest.  Resumed under the same
# plan (2 ranks, FULL_SHARD) the last two losses are the uninterrupted run's bit for
# bit, and so are the final adapters; resumed on 1 rank at stage 0 and on 2 ranks under
# DeepSpeed ZeRO-2 (NO_WRAP: other unit numbers), within 1e-5.  Refused with exit 2,
# by name: another base (both digests and the file named; the same weights in another
# file are the same base), other LoRA settings, a LoRA
# checkpoint resumed without --use_peft and a full fine-tuning one with it.  The eval
# loss with --use_peft is the model with its adapters: on a one-window stream that is
# also the training data, step 1's eval loss is step 2's training loss (the same
# adapters, the same window; without adapter dropout, which training alone draws), which the untrained model's loss (step 1's) is not.
# --load_best_model_at_end: the eval loss falls from step 2 to step 4, and
# --greater_is_better makes step 2 the best, so OUTPUT_DIR's adapter files are
# checkpoint-2's bit for bit, not checkpoint-4's (the last step's).
. "$(dirname "$0")/lib.bash"
fix=tests/fixtures/gqa_tied
args=(train --model $fix --data $fix/tokens.npy --block_size 16 --max_steps 4 --learning_rate 1e-3 --threads 1
      --peak_gflops 1 --shuffle false --progress false)
lora=(--use_peft --lora_target_modules all-linear --lora_r 4 --lora_alpha 8)
fsdp=(--per_device_train_batch_size 1 --use_fsdp --fsdp_sharding_strategy FULL_SHARD)
losses() { grep -o '"loss": [^,]*' "$1" | awk '{print $2}' | tr '\n' ' '; }
# run NAME W FLAGS...: W ranks (1: no mpirun), the log in $TMP/NAME.jsonl, output in $TMP/NAME
run() {
    local name=$1 w=$2
    shift 2
    local launcher=("${mpi[@]}" -np "$w")
    [ "$w" -eq 1 ] && launcher=()
    "${launcher[@]}" "$ZTRAIN" "${args[@]}" --output_dir "$TMP/$name" --log_jsonl "$TMP/$name.jsonl" "$@" \
        >"$TMP/$name.log" 2>&1 || fail "$name: $(tail -3 "$TMP/$name.log")"
}
run ref 2 "${lora[@]}" "${fsdp[@]}" --save_steps 2
ck="$TMP/ref/checkpoint-2"
/usr/bin/python3 - "$ck" <<'PY' || fail "the LoRA checkpoint's files ($ck)"
import json, os, struct, sys
ck = sys.argv[1]
def header(path):
    with open(path, "rb") as f:
        return json.loads(f.read(struct.unpack("<Q", f.read(8))[0]))
files = sorted(os.listdir(ck))
assert files == ["adapter_config.json", "adapter_model.safetensors", "config.json", "manifest.json",
                 "trainer_state.json", "zero"], files
ix = json.load(open(os.path.join(ck, "zero/index.json")))
adapter_units = {p["unit"] for p in ix["params"] if ".lora_" in p["name"]}
base_units = {p["unit"] for p in ix["params"] if ".lora_" not in p["name"]}
assert adapter_units and not adapter_units & base_units, (adapter_units, base_units)
want = {"unit.%d.%s" % (u, r) for u in adapter_units for r in ("master", "m", "v")}
for q in range(2):
    got = set(header(os.path.join(ck, "zero/shard-%d-of-2.safetensors" % q))) - {"__metadata__"}
    assert got == want, (q, sorted(got), sorted(want))
adapters = header(os.path.join(ck, "adapter_model.safetensors"))
assert all(k.startswith("base_model.model.model.layers.") for k in adapters if k != "__metadata__"), list(adapters)
ztrain = json.load(open(os.path.join(ck, "trainer_state.json")))["stateful_callbacks"]["ztrain"]
l = ztrain["lora"]
assert (l["r"], l["lora_alpha"], l["use_rslora"]) == (4, 8, False) and len(l["base_digest"]) == 16, l
cfg = json.load(open(os.path.join(ck, "adapter_config.json")))
assert (cfg["peft_type"], cfg["r"]) == ("LORA", 4), cfg
PY
# resume: the same plan bit for bit (losses and final adapters), other plans within 1e-5
run same 2 "${lora[@]}" "${fsdp[@]}" --resume_from_checkpoint "$ck"
run one 1 "${lora[@]}" --per_device_train_batch_size 2 --resume_from_checkpoint "$ck"
run ds2 2 "${lora[@]}" --per_device_train_batch_size 1 --use_deepspeed --zero_stage 2 --resume_from_checkpoint "$ck"
grep -q "bit-exact: the same plan" "$TMP/same.log" || fail "same plan: $(grep resumed "$TMP/same.log")"
grep -q "resumed under 1 rank, MULTI_CPU" "$TMP/one.log" && grep -q "resumed under 2 ranks, DEEPSPEED ZeRO-2" "$TMP/ds2.log" ||
    fail "the resharded resumes: $(grep -h resumed "$TMP/one.log" "$TMP/ds2.log")"
for name in same one ds2; do
    /usr/bin/python3 - "$TMP/ref" "$TMP/$name" "$([ $name = same ] && echo 0 || echo 1e-5)" <<'PY' ||
import json, struct, sys
import numpy as np
ref, res, tol = sys.argv[1], sys.argv[2], float(sys.argv[3])
lr = [json.loads(l)["loss"] for l in open(ref + ".jsonl")][2:]
ls = [json.loads(l)["loss"] for l in open(res + ".jsonl")]
assert len(lr) == 2 and len(ls) == 2, (lr, ls)
for x, y in zip(ls, lr):
    assert abs(x - y) <= tol * abs(y), ("loss", ls, lr)
def load(d):
    raw = open(d + "/adapter_model.safetensors", "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    head = json.loads(raw[8:8 + n])
    return {k: np.frombuffer(raw[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]], dtype=np.float32)
            for k, v in head.items() if k != "__metadata__"}
a, b = load(res), load(ref)
assert a.keys() == b.keys() and a
for k in a:
    d = np.max(np.abs(a[k].astype(np.float64) - b[k])) / max(np.max(np.abs(b[k])), 1e-30)
    assert d <= tol, (k, d)
PY
        fail "$name's losses $(losses "$TMP/$name.jsonl")/adapters against the uninterrupted run's $(losses "$TMP/ref.jsonl")"
done
# another base: one weight changed; other LoRA settings; the other kind of checkpoint
mkdir -p "$TMP/base2"
cp $fix/config.json "$TMP/base2/"
/usr/bin/python3 - $fix/model.safetensors "$TMP/base2/model.safetensors" <<'PY' || fail "writing the changed base"
import struct, sys
raw = bytearray(open(sys.argv[1], "rb").read())
at = 8 + struct.unpack("<Q", raw[:8])[0]
raw[at:at + 4] = struct.pack("<f", struct.unpack("<f", raw[at:at + 4])[0] + 0.5)
open(sys.argv[2], "wb").write(raw)
PY
# the same weights in another file (the tensors in reverse order, other metadata): the
# digest is of the weights as loaded, so the resume goes on, bit for bit
mkdir -p "$TMP/base3"
cp $fix/config.json "$TMP/base3/"
/usr/bin/python3 - $fix/model.safetensors "$TMP/base3/model.safetensors" <<'PY' || fail "writing the reordered base"
import json, struct, sys
raw = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
head, data = json.loads(raw[8:8 + n]), raw[8 + n:]
head.pop("__metadata__", None)
out, blobs, at = {"__metadata__": {"format": "pt", "written_by": "lora_checkpoint.sh"}}, [], 0
for k in sorted(head, reverse=True):
    s, e = head[k]["data_offsets"]
    out[k] = dict(head[k], data_offsets=[at, at + e - s])
    blobs.append(data[s:e])
    at += e - s
h = json.dumps(out).encode()
h += b" " * (-len(h) % 8)
open(sys.argv[2], "wb").write(struct.pack("<Q", len(h)) + h + b"".join(blobs))
PY
cmp -s $fix/model.safetensors "$TMP/base3/model.safetensors" && fail "the reordered base is the same file"
run moved 2 "${lora[@]}" "${fsdp[@]}" --resume_from_checkpoint "$ck" --model "$TMP/base3"
[ "$(losses "$TMP/moved.jsonl")" = "$(losses "$TMP/same.jsonl")" ] ||
    fail "resumed on the same weights in another file: $(losses "$TMP/moved.jsonl"), not $(losses "$TMP/same.jsonl")"
digest=$(/usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["stateful_callbacks"]["ztrain"]["lora"]["base_digest"])' "$ck/trainer_state.json")
"$ZTRAIN" checkpoint show "$ck" 2>&1 | grep -q "LoRA adapters only: r 4, alpha 8, rsLoRA off, target bits 0x3bc; base digest $digest" ||
    fail "checkpoint show: $("$ZTRAIN" checkpoint show "$ck" 2>&1 | tail -2)"
resume=("$ZTRAIN" "${args[@]}" --per_device_train_batch_size 2 --resume_from_checkpoint "$ck")
expect_exit 2 "$ck/trainer_state.json records base digest $digest .*base $TMP/base2 has digest [0-9a-f]{16}" -- \
    "${resume[@]}" "${lora[@]}" --model "$TMP/base2"
expect_exit 2 "trained with r=4, .*this run's --lora_r differs \(r=8" -- "${resume[@]}" "${lora[@]}" --lora_r 8
expect_exit 2 "this run's --lora_target_modules differs" -- "${resume[@]}" --use_peft --lora_r 4 --lora_alpha 8
expect_exit 2 "a LoRA checkpoint \(adapters only\) cannot resume full fine-tuning" -- "${resume[@]}"
run full 1 --per_device_train_batch_size 2 --save_steps 2 --max_steps 2
expect_exit 2 "a full fine-tuning checkpoint cannot resume a LoRA run" -- \
    "$ZTRAIN" "${args[@]}" --per_device_train_batch_size 2 --max_steps 2 "${lora[@]}" \
    --resume_from_checkpoint "$TMP/full/checkpoint-2"
expect_exit 2 "a LoRA checkpoint holds the adapters only" -- "$ZTRAIN" merge-weights "$ck" "$TMP/merged"
# evaluation with the adapters: one window of 17 tokens, trained on and evaluated
/usr/bin/python3 -c 'import numpy as np, sys; np.save(sys.argv[2], np.load(sys.argv[1])[:17])' $fix/tokens.npy \
    "$TMP/win.npy" || fail "writing the one-window stream"
"$ZTRAIN" train --model $fix --data "$TMP/win.npy" --eval_data "$TMP/win.npy" --eval_steps 1 --block_size 16 \
    --per_device_eval_batch_size 1 --per_device_train_batch_size 1 --max_steps 2 --learning_rate 1e-2 --threads 1 \
    --peak_gflops 1 --shuffle false --progress false --use_peft --lora_r 4 --lora_dropout 0 --log_jsonl "$TMP/ev.jsonl" \
    >"$TMP/ev.log" 2>&1 || fail "LoRA with --eval_data: $(tail -3 "$TMP/ev.log")"
/usr/bin/python3 - "$TMP/ev.jsonl" <<'PY' || fail "the eval loss with adapters: $(cat "$TMP/ev.jsonl" | cut -c1-60)"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
train = {r["step"]: r["loss"] for r in rows if "loss" in r}
ev = {r["step"]: r["eval_loss"] for r in rows if "eval_loss" in r}
# the training log keeps 9 significant digits: equal to them
assert abs(ev[1] - train[2]) <= 1e-8 * train[2], (ev, train)
assert abs(train[1] - train[2]) > 1e-4, ("the adapters did not move the loss", train)
PY
run best 1 "${lora[@]}" --per_device_train_batch_size 2 --eval_data "$TMP/win.npy" --per_device_eval_batch_size 1 \
    --load_best_model_at_end --greater_is_better true --save_steps 2 --eval_steps 2 --learning_rate 0.3
grep -q "best adapters (eval_loss [0-9.]* at step 2) loaded from $TMP/best/checkpoint-2" "$TMP/best.log" ||
    fail "the best step is not 2: $(grep -h eval_loss "$TMP/best.jsonl" | cut -c1-80)"
for f in adapter_model.safetensors adapter_config.json; do
    cmp "$TMP/best/$f" "$TMP/best/checkpoint-2/$f" || fail "--load_best_model_at_end: $f is not checkpoint-2's"
done
cmp -s "$TMP/best/adapter_model.safetensors" "$TMP/best/checkpoint-4/adapter_model.safetensors" &&
    fail "--load_best_model_at_end: the adapters are the last step's (checkpoint-4's)"
finish
