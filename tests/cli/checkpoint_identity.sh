# Checkpoints carry their identity (issue 33 point 3): each shard records its
# rank, the shard count, the world size, the plan, the step and a run id that
# trainer_state.json and zero/index.json share, and every reader (checkpoint show,
# resume, merge-weights) checks them against trainer_state.json, whatever the
# manifest says.  Swapped rank files, a shard of another step or of another run
# are refused (exit 2, naming the file and the field) even with the manifest
# rebuilt to match.  trainer_state.json refuses duplicate and unknown keys.
# Checkpoints from before identities are read with a warning; a mix is refused.
# The HF model of a checkpoint records its run and step the same way (issue 44).
. "$(dirname "$0")/lib.bash"
fix=tests/fixtures/gqa_tied
args=(train --model $fix --data $fix/tokens.npy --block_size 16 --per_device_train_batch_size 1 --threads 1
      --peak_gflops 1 --max_steps 4 --save_steps 2 --progress false --use_fsdp)
for run in a b; do
    "${mpi[@]}" -np 2 "$ZTRAIN" "${args[@]}" --output_dir "$TMP/$run" > "$TMP/$run.log" 2>&1 ||
        fail "run $run: $(tail -3 "$TMP/$run.log")"
done
ck="$TMP/a/checkpoint-4"
"$ZTRAIN" checkpoint show "$ck" > "$TMP/show" 2>&1 || fail "a sound checkpoint: $(cat "$TMP/show")"

# the manifest rebuilt over whatever the directory now holds (as someone hiding a mix would)
remanifest() {
    /usr/bin/python3 - "$1" <<'PY'
import ctypes, ctypes.util, json, os, sys
lib = ctypes.CDLL(ctypes.util.find_library('xxhash'))
lib.XXH3_64bits.restype = ctypes.c_uint64
lib.XXH3_64bits.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
d = sys.argv[1]
m = json.load(open(os.path.join(d, 'manifest.json')))
for p in m['files']:
    b = open(os.path.join(d, p), 'rb').read()
    m['files'][p] = {'bytes': len(b), 'xxh3': '%016x' % lib.XXH3_64bits(b, len(b))}
json.dump(m, open(os.path.join(d, 'manifest.json'), 'w'))
PY
}
# mixed CASE: a copy of checkpoint-4 to change
mixed() { rm -rf "$TMP/$1"; cp -r "$ck" "$TMP/$1"; echo "$TMP/$1"; }
# refused CASE PATTERN: checkpoint show, a resume and merge-weights all refuse it
refused() {
    expect_exit 2 "$2" -- "$ZTRAIN" checkpoint show "$TMP/$1"
    expect_exit 2 "$2" -- "$ZTRAIN" merge-weights "$TMP/$1" "$TMP/$1.merged"
    expect_exit 2 "$2" -- "$ZTRAIN" "${args[@]}" --output_dir "$TMP/$1.out" --resume_from_checkpoint "$TMP/$1"
}

d=$(mixed swapped)
mv "$d/zero/shard-0-of-2.safetensors" "$d/x"; mv "$d/zero/shard-1-of-2.safetensors" "$d/zero/shard-0-of-2.safetensors"
mv "$d/x" "$d/zero/shard-1-of-2.safetensors"; remanifest "$d"
refused swapped "swapped/zero/shard-0-of-2.safetensors: __metadata__.rank is \"1\", but this checkpoint expects \"0\".*another rank's file"

d=$(mixed step); cp "$TMP/a/checkpoint-2/zero/shard-1-of-2.safetensors" "$d/zero/"; remanifest "$d"
refused step "step/zero/shard-1-of-2.safetensors: __metadata__.step is \"2\", but this checkpoint expects \"4\".*another step"

d=$(mixed run); cp "$TMP/b/checkpoint-4/zero/shard-1-of-2.safetensors" "$d/zero/"; remanifest "$d"
refused run "run/zero/shard-1-of-2.safetensors: __metadata__.run_id is \"[0-9a-f]{16}\", but this checkpoint expects.*another run"

d=$(mixed index); cp "$TMP/b/checkpoint-4/zero/index.json" "$d/zero/"; remanifest "$d"
refused index "index/zero/index.json: run_id \"[0-9a-f]{16}\" differs from trainer_state.json's"

# the HF model a checkpoint carries records the run and step too (issue 44,
# point 5): another run's or another step's model.safetensors is refused, by
# eval --model on the checkpoint as well; a sound one evaluates as its merge does
python3 - "$ck" <<'PY' || fail "checkpoint-4/model.safetensors should record run_id and step 4"
import json, struct, sys
d = sys.argv[1]
b = open(d + '/model.safetensors', 'rb').read()
m = json.loads(b[8:8 + struct.unpack('<Q', b[:8])[0]])['__metadata__']
assert m == {'format': 'pt', 'run_id': json.load(open(d + '/trainer_state.json'))['stateful_callbacks']['ztrain']['run_id'], 'step': '4'}, m
PY
d=$(mixed model_run); cp "$TMP/b/checkpoint-4/model.safetensors" "$d/"; remanifest "$d"
refused model_run "model_run/model.safetensors: __metadata__.run_id is \"[0-9a-f]{16}\", but trainer_state.json says.*another run"
expect_exit 2 "model_run/model.safetensors: __metadata__.run_id" -- "$ZTRAIN" eval --model "$d" --data $fix/tokens.npy \
    --block_size 16 --threads 1
d=$(mixed model_step); cp "$TMP/a/checkpoint-2/model.safetensors" "$d/"; remanifest "$d"
refused model_step "model_step/model.safetensors: __metadata__.step is \"2\", but trainer_state.json says 4"
"$ZTRAIN" merge-weights "$ck" "$TMP/ck.merged" > /dev/null 2>&1 || fail "merge-weights of checkpoint-4"
cmp -s "$ck/model.safetensors" "$TMP/ck.merged/model.safetensors" || fail "merge-weights differs from the checkpoint's model"
ev() { "$ZTRAIN" eval --model "$1" --data $fix/tokens.npy --block_size 16 --threads 1 2>&1 | grep -o 'loss [0-9.]*'; }
[ -n "$(ev "$ck")" ] && [ "$(ev "$ck")" = "$(ev "$TMP/ck.merged")" ] ||
    fail "eval --model checkpoint-4 and of its merge disagree: $(ev "$ck") vs $(ev "$TMP/ck.merged")"

# trainer_state.json: a key twice (the first used to win), and an unknown key
d=$(mixed dup)
/usr/bin/python3 - "$d/trainer_state.json" <<'PY'
import sys
p = sys.argv[1]; t = open(p).read()
open(p, 'w').write(t.replace('"step":', '"step":\t1,\n\t"step":', 1))
PY
remanifest "$d"
expect_exit 2 "dup/trainer_state.json: duplicate key step" -- "$ZTRAIN" checkpoint show "$d"
d=$(mixed unknown)
sed -i 's/"optimizer_steps":/"optimiser_steps":\t4,\n\t"optimizer_steps":/' "$d/trainer_state.json"; remanifest "$d"
expect_exit 2 "unknown/trainer_state.json: unknown key optimiser_steps \(expected format, version, run_id, step" -- \
    "$ZTRAIN" checkpoint show "$d"
d=$(mixed unknown2)
sed -i 's/"samples_seen":/"samples_sen":\t0,\n\t\t"samples_seen":/' "$d/trainer_state.json"; remanifest "$d"
expect_exit 2 "unknown2/trainer_state.json: unknown key data_position.samples_sen" -- "$ZTRAIN" checkpoint show "$d"
# Trainer's TrainerState keys around ztrain's state are checked by name as well
d=$(mixed unknown3)
sed -i 's/"global_step":/"globalstep":\t4,\n\t"global_step":/' "$d/trainer_state.json"; remanifest "$d"
expect_exit 2 "unknown3/trainer_state.json: unknown key globalstep \(expected epoch, global_step" -- \
    "$ZTRAIN" checkpoint show "$d"

# before identities: shards with only the format, no run_id anywhere; read with a warning
strip() { # strip DIR [SHARD...]: the identity out of the shards named (all without), run_id out of the JSON with none named
    /usr/bin/python3 - "$@" <<'PY'
import glob, json, os, struct, sys
d, names = sys.argv[1], sys.argv[2:]
for p in names or glob.glob(os.path.join(d, 'zero', 'shard-*')):
    p = os.path.join(d, 'zero', p) if names else p
    b = bytearray(open(p, 'rb').read())
    n = struct.unpack('<Q', b[:8])[0]
    h = json.loads(b[8:8 + n]); h['__metadata__'] = {'format': 'ztrain-zero'}
    t = json.dumps(h).encode(); b[8:8 + n] = t + b' ' * (n - len(t))
    open(p, 'wb').write(b)
if not names:
    for p in ('trainer_state.json', 'zero/index.json'):
        j = json.load(open(os.path.join(d, p)))
        del (j['stateful_callbacks']['ztrain'] if 'stateful_callbacks' in j else j)['run_id']
        json.dump(j, open(os.path.join(d, p), 'w'))
PY
    remanifest "$1"
}
d=$(mixed legacy); strip "$d"
"$ZTRAIN" checkpoint show "$d" > "$TMP/show" 2>&1 || fail "legacy checkpoint refused by show: $(cat "$TMP/show")"
out=$("${mpi[@]}" -np 2 "$ZTRAIN" "${args[@]}" --output_dir "$TMP/legacy.out" --resume_from_checkpoint "$d" 2>&1) ||
    fail "legacy resume: $out"
printf '%s' "$out" | grep -q "warning: .*legacy was written before checkpoints carried their identity" || fail "no legacy warning: $out"
printf '%s' "$out" | grep -q "at step 4: bit-exact" || fail "legacy resume not bit-exact: $out"
d=$(mixed half); strip "$d" shard-1-of-2.safetensors
refused half "half/zero/shard-1-of-2.safetensors: trainer_state.json has a run_id and this shard has none"
finish
