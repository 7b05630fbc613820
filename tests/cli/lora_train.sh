# Training with LoRA adapters through the command line (issue 46; docs/lora.md): the
# adapters start as PEFT's (B zero), so the first step's loss is the full fine-tuning
# run's bit for bit; the later ones differ from it (only the adapters move) and from the
# untrained model's on the same batches (a run at learning rate 0: the adapters do
# train, which they would not if A started at zero too); the state holds
# gradients and optimizer state for the adapters alone (all-linear at r 4 on gqa_tied:
# 9248 parameters, 36992 gradient bytes, twice that of optimizer state); FSDP's
# FULL_SHARD on 2 ranks gives the 1-rank losses (within 1e-5, the order of the sums);
# the memory gate estimates LoRA's state and activations, not full fine-tuning's;
# --output_dir holds the adapters in PEFT's format (PeftModel.from_pretrained loads them:
# checked by hand with peft 0.21.2, docs/lora.md); ranks given different adapters are
# refused by name (exit 2).  Checkpoints, resume and evaluation: lora_checkpoint.sh.  The numbers against PEFT
# itself: tests/test_lora.c.
. "$(dirname "$0")/lib.bash"
fix=tests/fixtures/gqa_tied
args=(--model $fix --data $fix/tokens.npy --block_size 16 --max_steps 3 --learning_rate 1e-3 --threads 1
      --peak_gflops 1 --shuffle false)
lora=(--use_peft --lora_target_modules all-linear --lora_r 4 --lora_alpha 8)
losses() { grep -o '"loss": [^,]*' "$1" | awk '{print $2}' | tr '\n' ' '; }
"$ZTRAIN" train "${args[@]}" --per_device_train_batch_size 2 --log_jsonl "$TMP/full.jsonl" >"$TMP/log" 2>&1 ||
    fail "full fine-tuning: $(tail -3 "$TMP/log")"
"$ZTRAIN" train "${args[@]}" --per_device_train_batch_size 2 --log_jsonl "$TMP/base.jsonl" --learning_rate 0 \
    >"$TMP/log" 2>&1 || fail "learning rate 0: $(tail -3 "$TMP/log")"
"$ZTRAIN" train "${args[@]}" --per_device_train_batch_size 2 "${lora[@]}" --log_jsonl "$TMP/lora.jsonl" \
    >"$TMP/log" 2>&1 || fail "LoRA: $(tail -3 "$TMP/log")"
grep -q "^lora r=4, alpha=8 (scale 2), targets q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj, trainable 9248 of " \
    "$TMP/log" || fail "LoRA's plan line: $(grep '^lora' "$TMP/log")"
read -r f1 f2 f3 <<<"$(losses "$TMP/full.jsonl")"
read -r l1 l2 l3 <<<"$(losses "$TMP/lora.jsonl")"
read -r b1 b2 b3 <<<"$(losses "$TMP/base.jsonl")"
[ -n "$l3" ] || fail "LoRA logged no 3 losses: $(losses "$TMP/lora.jsonl")"
[ "$l1" = "$f1" ] || fail "step 1: LoRA's loss $l1 is not the full fine-tuning run's $f1 (B starts at zero)"
[ "$l2" != "$f2" ] && [ "$l3" != "$f3" ] && [ "$l2" != "$b2" ] && [ "$l3" != "$b3" ] && [ "$b1" = "$f1" ] ||
    fail "LoRA's losses $l1 $l2 $l3 against full fine-tuning's $f1 $f2 $f3 and the untrained model's $b1 $b2 $b3"
grep -q '"grads": 36992, "optimizer": 73984,' "$TMP/lora.jsonl" ||
    fail "LoRA's state: $(grep -o '"memory_bytes": {[^}]*}' "$TMP/lora.jsonl" | head -1)"
"$ZTRAIN" launch --num_processes 2 train "${args[@]}" --per_device_train_batch_size 1 "${lora[@]}" --use_fsdp \
    --fsdp_sharding_strategy FULL_SHARD --log_jsonl "$TMP/z3.jsonl" >"$TMP/log" 2>&1 ||
    fail "LoRA under FULL_SHARD on 2 ranks: $(tail -3 "$TMP/log")"
awk -v a="$(losses "$TMP/lora.jsonl")" -v b="$(losses "$TMP/z3.jsonl")" 'BEGIN { n = split(a, x); m = split(b, y);
    if (n != 3 || m != 3) exit 1; for (i = 1; i <= n; i++) { d = x[i] - y[i]; if (d < 0) d = -d;
    if (d > 1e-5 * x[i]) exit 1 } }' ||
    fail "LoRA on 1 rank ($(losses "$TMP/lora.jsonl")) and FULL_SHARD on 2 ($(losses "$TMP/z3.jsonl")) differ"
# --output_dir: the adapters alone in PEFT's format: adapter_model.safetensors holds
# exactly the tensors PEFT saves for this model and targets (names and shapes from PEFT,
# tests/fixtures/lora/counts.json), every B moved off zero; adapter_config.json says
# LORA, r, alpha, the targets, rsLoRA off
"$ZTRAIN" train "${args[@]}" --per_device_train_batch_size 2 "${lora[@]}" --output_dir "$TMP/out" >"$TMP/log" 2>&1 ||
    fail "LoRA with --output_dir: $(tail -3 "$TMP/log")"
/usr/bin/python3 - "$TMP/out" tests/fixtures/lora/counts.json <<'PY' || fail "the adapter files in $TMP/out"
import json, os, struct, sys
out, counts = sys.argv[1], json.load(open(sys.argv[2]))
want = next(c for c in counts["cases"] if c["model"] == "gqa_tied" and c["target_modules"] == "all-linear")
with open(os.path.join(out, "adapter_model.safetensors"), "rb") as f:
    n = struct.unpack("<Q", f.read(8))[0]
    head = json.loads(f.read(n))
    data = f.read()
meta = head.pop("__metadata__", {})
got = sorted([k, v["shape"]] for k, v in head.items())
assert got == want["adapter_tensors"], (got[:2], want["adapter_tensors"][:2])
assert all(v["dtype"] == "F32" for v in head.values()) and meta == {"format": "pt"}
for k, v in head.items():
    lo, hi = v["data_offsets"]
    vals = struct.unpack("<%df" % ((hi - lo) // 4), data[lo:hi])
    assert any(vals), k + " is all zeros"
cfg = json.load(open(os.path.join(out, "adapter_config.json")))
assert (cfg["peft_type"], cfg["r"], cfg["lora_alpha"], cfg["use_rslora"], cfg["bias"]) == ("LORA", 4, 8, False, "none"), cfg
assert sorted(cfg["target_modules"]) == want["targets"], cfg["target_modules"]
assert sorted(os.listdir(out)) == ["adapter_config.json", "adapter_model.safetensors"], os.listdir(out)
PY
# the memory gate counts what LoRA allocates: 1500KB refuses full fine-tuning (an
# estimated 2.38 MB) and lets LoRA (1.14 MB) run
gate=("$ZTRAIN" train "${args[@]}" --per_device_train_batch_size 2 --max_steps 1 --max_memory 1500KB)
expect_exit 2 "the run needs an estimated 2.38 MB per rank" -- "${gate[@]}"
"${gate[@]}" --use_peft --lora_r 4 >"$TMP/log" 2>&1 || fail "LoRA under --max_memory 1500KB: $(tail -2 "$TMP/log")"
# ranks that would build other adapter units stop before any collective moves them
one=(train "${args[@]}" --per_device_train_batch_size 1 "${lora[@]}")
expect_exit 2 "rank 0: rank 1 and rank 0 resolved a different model config \(and LoRA's adapters\)" -- \
    "${mpi[@]}" -np 1 "$ZTRAIN" "${one[@]}" : -np 1 "$ZTRAIN" "${one[@]}" --lora_r 8
finish
