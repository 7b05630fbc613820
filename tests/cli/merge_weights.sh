# FSDP's and DeepSpeed's checkpoint choices (issue 12, points 5 and 6):
# fsdp_state_dict_type SHARDED_STATE_DICT writes the shards and the index but no
# gathered model, FULL_STATE_DICT the HF model too; DeepSpeed ZeRO-3 writes the
# model only with stage3_gather_16bit_weights_on_model_save.  `ztrain
# merge-weights` turns a sharded checkpoint into an HF directory byte-identical to
# what FULL_STATE_DICT wrote at the same step (one file, and sharded above
# --max_shard_size), converts to bfloat16 as torch rounds, resumes work from a
# sharded checkpoint, and a damaged checkpoint is refused naming the file.
. "$(dirname "$0")/lib.bash"
fix=tests/fixtures/gqa_tied
args=(train --model $fix --data $fix/tokens.npy --block_size 16 --per_device_train_batch_size 1 --threads 1
      --peak_gflops 1 --max_steps 3 --save_steps 2 --progress false --max_shard_size 200KB)
for kind in FULL_STATE_DICT SHARDED_STATE_DICT; do
    printf 'distributed_type: FSDP\nfsdp_config:\n  fsdp_state_dict_type: %s\n' $kind > "$TMP/$kind.yaml"
    "${mpi[@]}" -np 2 "$ZTRAIN" "${args[@]}" --config_file "$TMP/$kind.yaml" --output_dir "$TMP/$kind" \
        > "$TMP/$kind.log" 2>&1 || fail "$kind: $(tail -3 "$TMP/$kind.log")"
done
full="$TMP/FULL_STATE_DICT/checkpoint-2" sharded="$TMP/SHARDED_STATE_DICT/checkpoint-2"
[ -f "$full/model.safetensors.index.json" ] && [ -f "$full/model-00001-of-00003.safetensors" ] ||
    fail "FULL_STATE_DICT should write the model (3 shards of 200KB): $(ls "$full")"
ls "$sharded" | grep -q '^model' && fail "SHARDED_STATE_DICT wrote a full model: $(ls "$sharded")"
[ -f "$sharded/zero/shard-1-of-2.safetensors" ] && [ -f "$sharded/zero/index.json" ] || fail "no shards in $sharded"

out=$("$ZTRAIN" merge-weights "$sharded" "$TMP/merged" --max_shard_size 200KB 2>&1) || fail "merge: $out"
printf '%s' "$out" | grep -q "peak resident memory" || fail "merge reports no peak memory: $out"
# (each carries its own run's id: the same bytes but for it)
cmp -s "$full/config.json" "$TMP/merged/config.json" || fail "merged config.json differs from FULL_STATE_DICT's"
cmp -s "$full/model.safetensors.index.json" "$TMP/merged/model.safetensors.index.json" || fail "merged index differs"
for f in $(cd "$full" && ls model-*); do
    d=$(same_checkpoint "$full/$f" "$TMP/merged/$f") || fail "merged $f differs from FULL_STATE_DICT's: $d"
done
"$ZTRAIN" merge-weights "$sharded" "$TMP/merged1" > /dev/null 2>&1 || fail "merge into one file"
[ -f "$TMP/merged1/model.safetensors" ] || fail "merge without a size limit should write one file"
# into a directory holding an older 3-shard output (issue 33): the stale shards of
# the model go, other files stay; and back to shards, the one file goes
touch "$TMP/merged/README.md"
"$ZTRAIN" merge-weights "$sharded" "$TMP/merged" > /dev/null 2>&1 || fail "merge over a 3-shard output"
got=$(cd "$TMP/merged" && ls | tr '\n' ' ')
[ "$got" = "README.md config.json generation_config.json model.safetensors " ] ||
    [ "$got" = "README.md config.json model.safetensors " ] || fail "merge over a 3-shard output left: $got"
cmp -s "$TMP/merged/model.safetensors" "$TMP/merged1/model.safetensors" || fail "merge over a 3-shard output differs"
"$ZTRAIN" merge-weights "$sharded" "$TMP/merged" --max_shard_size 300KB > /dev/null 2>&1 || fail "merge into 2 shards"
got=$(cd "$TMP/merged" && ls model* | tr '\n' ' ')
[ "$got" = "model-00001-of-00002.safetensors model-00002-of-00002.safetensors model.safetensors.index.json " ] ||
    fail "merge into 2 shards over one file left: $got"
"$ZTRAIN" merge-weights "$sharded" "$TMP/bf16" --dtype bfloat16 > /dev/null 2>&1 || fail "merge --dtype bfloat16"
/usr/bin/python3 - "$TMP/merged1/model.safetensors" "$TMP/bf16/model.safetensors" <<'PY' || fail "bf16 merge != torch's rounding"
import json, struct, sys
import torch
def load(p):
    raw = open(p, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    h = json.loads(raw[8:8 + n])
    return {k: (v["dtype"], raw[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]]) for k, v in h.items() if k != "__metadata__"}
a, b = load(sys.argv[1]), load(sys.argv[2])
assert a.keys() == b.keys()
for k in a:
    assert a[k][0] == "F32" and b[k][0] == "BF16", (k, a[k][0], b[k][0])
    want = torch.frombuffer(bytearray(a[k][1]), dtype=torch.float32).to(torch.bfloat16)
    got = torch.frombuffer(bytearray(b[k][1]), dtype=torch.bfloat16)
    assert torch.equal(want.view(torch.int16), got.view(torch.int16)), k
PY
expect_exit 2 "expected fp32 or bf16 \(float32, bfloat16\)" -- "$ZTRAIN" merge-weights "$sharded" "$TMP/x" --dtype float16

# a sharded checkpoint resumes, bit for bit, on 2 ranks and resharded on 1
"${mpi[@]}" -np 2 "$ZTRAIN" "${args[@]}" --config_file "$TMP/SHARDED_STATE_DICT.yaml" --output_dir "$TMP/res2" \
    --resume_from_checkpoint "$sharded" > "$TMP/res2.log" 2>&1 || fail "resume sharded: $(tail -3 "$TMP/res2.log")"
grep -q "at step 2: bit-exact" "$TMP/res2.log" || fail "resume sharded: $(grep resumed "$TMP/res2.log")"
cmp -s "$TMP/res2/model-00001-of-00003.safetensors" "$TMP/SHARDED_STATE_DICT/model-00001-of-00003.safetensors" ||
    fail "resumed from a sharded checkpoint, the final model differs"

# DeepSpeed ZeRO-3: the model only with stage3_gather_16bit_weights_on_model_save
for gather in true false; do
    printf '{"zero_optimization": {"stage": 3, "stage3_gather_16bit_weights_on_model_save": %s}}\n' $gather \
        > "$TMP/ds_$gather.json"
    "${mpi[@]}" -np 2 "$ZTRAIN" "${args[@]}" --deepspeed_config_file "$TMP/ds_$gather.json" \
        --output_dir "$TMP/ds_$gather" > "$TMP/ds_$gather.log" 2>&1 || fail "ds $gather: $(tail -3 "$TMP/ds_$gather.log")"
done
ls "$TMP/ds_true/checkpoint-2" | grep -q '^model' || fail "gather true: no model in $(ls "$TMP/ds_true/checkpoint-2")"
ls "$TMP/ds_false/checkpoint-2" | grep -q '^model' && fail "gather false: a model was written"

# a damaged checkpoint is refused naming the file
printf '\x01' | dd of="$sharded/zero/shard-0-of-2.safetensors" bs=1 seek=4000 conv=notrunc status=none
expect_exit 2 "shard-0-of-2.safetensors: checksum" -- "$ZTRAIN" merge-weights "$sharded" "$TMP/bad"
[ -e "$TMP/bad" ] && fail "a refused merge left $TMP/bad"
finish
