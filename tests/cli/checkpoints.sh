# Checkpoints on one process: the layout and manifest, --save_total_limit,
# resume from 'latest' bit for bit, damaged and partial checkpoints skipped by
# 'latest' and refused by name, changed hyper-parameters refused by field (or
# printed with --override_checkpoint_args), and an --output_dir that cannot be
# written refused before training (a file in the way, a read-only mount).
. "$(dirname "$0")/lib.bash"
fix=tests/fixtures/gqa_tied
args=(train --model $fix --data $fix/tokens.npy --block_size 16 --per_device_train_batch_size 1 --threads 1
      --peak_gflops 1 --max_steps 4 --learning_rate 1e-3 --progress false)

# the uninterrupted run, and one saving every step keeping the newest 2
"$ZTRAIN" "${args[@]}" --output_dir "$TMP/full" > /dev/null 2>&1 || fail "uninterrupted run"
# (the last step, 4, is saved too, as Trainer does; then it goes, so that 3 is the newest)
out=$("$ZTRAIN" "${args[@]}" --output_dir "$TMP/ck" --save_steps 1 --save_total_limit 3 2>&1) || fail "saving run: $out"
printf '%s' "$out" | grep -q "checkpoint saved to $TMP/ck/checkpoint-3" || fail "no 'checkpoint saved to' line: $out"
got=$(cd "$TMP/ck" && ls -d checkpoint-* | tr '\n' ' ')
[ "$got" = "checkpoint-2 checkpoint-3 checkpoint-4 " ] || fail "--save_total_limit 3 kept: $got"
d=$(same_checkpoint "$TMP/ck/checkpoint-4/model.safetensors" "$TMP/ck/model.safetensors") || fail "checkpoint-4 is not the final model: $d"
rm -rf "$TMP/ck/checkpoint-4"
for f in manifest.json trainer_state.json config.json model.safetensors zero/index.json zero/shard-0-of-1.safetensors; do
    [ -f "$TMP/ck/checkpoint-3/$f" ] || fail "checkpoint-3/$f is missing"
done
litter=$(find "$TMP/ck" -name '*.ztmp-*' -o -name '.checkpoint-*')
[ -z "$litter" ] || fail "temporary files left behind: $litter"
/usr/bin/python3 - "$TMP/ck/checkpoint-3" <<'PY' || fail "manifest.json does not list every file with its size"
import json, os, sys
d = sys.argv[1]
m = json.load(open(os.path.join(d, "manifest.json")))
files = {os.path.relpath(os.path.join(r, f), d) for r, _, fs in os.walk(d) for f in fs} - {"manifest.json"}
assert set(m["files"]) == files, (sorted(m["files"]), sorted(files))
for p, e in m["files"].items():
    assert e["bytes"] == os.path.getsize(os.path.join(d, p)) and len(e["xxh3"]) == 16, p
trainer = json.load(open(os.path.join(d, "trainer_state.json")))
assert trainer["global_step"] == 3 and trainer["max_steps"] == 4 and trainer["log_history"] == [], trainer
st = trainer["stateful_callbacks"]["ztrain"]  # ztrain's own state, inside Trainer's TrainerState
assert st["step"] == 3 and st["optimizer_steps"] == 3 and st["data_position"]["samples_seen"] == 3, st
assert st["plan"]["world"] == 1 and st["hyper_parameters"]["learning_rate"] == 1e-3, st
assert "--save_total_limit 3" in st["command_line"], st["command_line"]
PY

# 'latest' resumes from checkpoint-3 and ends where the uninterrupted run ended
cp -r "$TMP/ck" "$TMP/ck_orig"
cp -r "$TMP/ck" "$TMP/ck_bad"
printf '\x7f' | dd of="$TMP/ck_bad/checkpoint-3/zero/shard-0-of-1.safetensors" bs=1 seek=5000 conv=notrunc status=none
out=$("$ZTRAIN" "${args[@]}" --output_dir "$TMP/ck" --resume_from_checkpoint latest 2>&1) || fail "resume latest: $out"
printf '%s' "$out" | grep -q "resumed from $TMP/ck/checkpoint-3 at step 3: bit-exact" || fail "resume line: $out"
cmp -s "$TMP/ck/model.safetensors" "$TMP/full/model.safetensors" || fail "resumed model differs from the uninterrupted run"

# a flipped bit in a shard: 'latest' warns and falls back to checkpoint-2; named, it is refused
rm -rf "$TMP/ck" && cp -r "$TMP/ck_orig" "$TMP/ck"
shard="$TMP/ck/checkpoint-3/zero/shard-0-of-1.safetensors"
printf '\x7f' | dd of="$shard" bs=1 seek=5000 conv=notrunc status=none
out=$("$ZTRAIN" "${args[@]}" --output_dir "$TMP/ck" --resume_from_checkpoint latest 2>&1) || fail "latest past a damaged one: $out"
printf '%s' "$out" | grep -q "warning: .*skipping $TMP/ck/checkpoint-3: $shard: checksum" || fail "no warning naming the shard: $out"
printf '%s' "$out" | grep -q "resumed from $TMP/ck/checkpoint-2 at step 2" || fail "should fall back to checkpoint-2: $out"
cmp -s "$TMP/ck/model.safetensors" "$TMP/full/model.safetensors" || fail "resumed from checkpoint-2, the model differs"
expect_exit 2 "resume_from_checkpoint: $shard: checksum .* does not match" -- \
    "$ZTRAIN" "${args[@]}" --output_dir "$TMP/other" --resume_from_checkpoint "$TMP/ck/checkpoint-3"
# a truncated file, and a checkpoint without its manifest (a partial one)
truncate -s 100 "$TMP/ck/checkpoint-2/trainer_state.json"
expect_exit 2 "checkpoint-2/trainer_state.json: 100 bytes, the manifest says" -- \
    "$ZTRAIN" "${args[@]}" --output_dir "$TMP/other" --resume_from_checkpoint "$TMP/ck/checkpoint-2"
rm -rf "$TMP/ck" && cp -r "$TMP/ck_orig" "$TMP/ck"
rm "$TMP/ck/checkpoint-3/manifest.json"
out=$("$ZTRAIN" "${args[@]}" --output_dir "$TMP/ck" --resume_from_checkpoint latest 2>&1) || fail "latest past a partial one: $out"
printf '%s' "$out" | grep -q "skipping $TMP/ck/checkpoint-3: .*manifest.json: missing" || fail "partial not named: $out"
expect_exit 2 "no complete checkpoint-N in $TMP/empty" -- \
    "$ZTRAIN" "${args[@]}" --output_dir "$TMP/empty" --resume_from_checkpoint latest

# changed hyper-parameters are refused by field, or printed with --override_checkpoint_args
ck3="$TMP/ck_orig/checkpoint-3"
expect_exit 2 "learning_rate was 0.001 when saved, this run has 0.002" -- \
    "$ZTRAIN" "${args[@]}" --learning_rate 2e-3 --resume_from_checkpoint "$ck3"
expect_exit 2 "global batch size .* was 1 when saved, this run has 2" -- \
    "$ZTRAIN" "${args[@]}" --per_device_train_batch_size 2 --resume_from_checkpoint "$ck3"
expect_exit 2 "max_steps was 4 when saved, this run has 5" -- \
    "$ZTRAIN" "${args[@]}" --max_steps 5 --resume_from_checkpoint "$ck3"
expect_exit 2 "compute dtype was fp32 when saved, this run has bf16" -- \
    "$ZTRAIN" "${args[@]}" --mixed_precision bf16 --resume_from_checkpoint "$ck3"
/usr/bin/python3 -c "import numpy as n; a=n.load('$fix/tokens.npy'); n.save('$TMP/other.npy', a[::-1].copy())"
expect_exit 2 "data \\(the token stream\\) was 1024 tokens" -- \
    "$ZTRAIN" "${args[@]}" --data "$TMP/other.npy" --resume_from_checkpoint "$ck3"
out=$("$ZTRAIN" "${args[@]}" --learning_rate 2e-3 --warmup_steps 1 --override_checkpoint_args \
      --resume_from_checkpoint "$ck3" 2>&1) || fail "override: $out"
printf '%s' "$out" | grep -q "overriding the checkpoint's learning_rate: 0.001 -> 0.002" &&
    printf '%s' "$out" | grep -q "overriding the checkpoint's warmup_steps: 0 -> 1" || fail "override lines: $out"

# a master-dtype change is refused naming both plans
expect_exit 2 "refused: saved under 1 rank.*fp32 master, fp32 compute; this run.s plan is 1 rank.*bf16 master, bf16 compute: a master-dtype change is refused unless --allow_precision_change" -- \
    "$ZTRAIN" "${args[@]}" --torch_dtype bf16 --resume_from_checkpoint "$ck3"

# ... or converted with --allow_precision_change (the compute dtype changes too, so the override)
out=$("$ZTRAIN" "${args[@]}" --torch_dtype bf16 --allow_precision_change --override_checkpoint_args \
      --output_dir "$TMP/conv" --resume_from_checkpoint "$ck3" 2>&1) || fail "precision change: $out"
printf '%s' "$out" | grep -q "at step 3: resharded and converted: saved under .*fp32 master.*resumed under .*bf16 master" ||
    fail "precision change: $out"

# checkpoint show: the state, the plan it was saved under, and what a resume would do
out=$("$ZTRAIN" checkpoint show "$ck3" --max_steps 4 2>&1) || fail "checkpoint show: $out"
for want in "complete (every file matches manifest.json)" "step 3, optimizer steps 3" "learning_rate 0.001" \
            "saved under: 1 rank" "command line: ztrain train .*--save_steps 1" \
            "resuming under this plan: bit-exact"; do
    printf '%s' "$out" | grep -q -- "$want" || fail "checkpoint show lacks '$want': $out"
done
"$ZTRAIN" checkpoint show "$ck3" --num_processes 4 --use_fsdp | grep -q "resuming under this plan: resharded: saved under 1 rank.*resumed under 4 ranks, FSDP FULL_SHARD" ||
    fail "checkpoint show --num_processes 4 --use_fsdp"
"$ZTRAIN" checkpoint show "$ck3" --torch_dtype bf16 | grep -q "resuming under this plan: refused: .*--allow_precision_change" ||
    fail "checkpoint show --torch_dtype bf16"
expect_exit 2 "shard-0-of-1.safetensors: checksum" -- "$ZTRAIN" checkpoint show "$TMP/ck/../ck_bad/checkpoint-3"

# --output_dir that cannot be written: refused with exit 2 before the first step
touch "$TMP/afile"
expect_exit 2 "output_dir: $TMP/afile: exists and is not a directory" -- "$ZTRAIN" "${args[@]}" --output_dir "$TMP/afile"
mkdir -p "$TMP/ro"
if mount -t tmpfs -o size=64k,ro tmpfs "$TMP/ro" 2>/dev/null; then
    trap 'umount "$TMP/ro" 2>/dev/null; rm -rf "$TMP"' EXIT
    out=$("$ZTRAIN" "${args[@]}" --output_dir "$TMP/ro" 2>&1)
    rc=$?
    [ "$rc" -eq 2 ] && printf '%s' "$out" | grep -q "output_dir $TMP/ro: cannot write there: Read-only file system" ||
        fail "read-only --output_dir: exit $rc: $out"
    printf '%s' "$out" | grep -q "^model:" && fail "a read-only --output_dir must be refused before training: $out"
    umount "$TMP/ro"
else
    fail "cannot mount a tmpfs (the test needs root)"
fi
finish
