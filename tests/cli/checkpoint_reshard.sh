# Universal resume (issue 12, point 4): a checkpoint written by W ranks under
# one stage, face and wrap resumes on W' ranks under another, the global batch
# (12 sequences) kept.  Each resumed run's losses of steps 4-6 and its final
# weights are within 1e-5 (relative) of the run that never stopped; under the
# same plan and W they are bit-identical.  Covered: 2 -> 1, 2 -> 4, 4 -> 3,
# FSDP FULL_SHARD -> DeepSpeed ZeRO-1 and ZeRO-2, DeepSpeed ZeRO-2 -> FSDP, and
# 4 ranks HYBRID_SHARD (shard groups of 2, one copy saved) -> 2 ranks SIZE_BASED_WRAP.
. "$(dirname "$0")/lib.bash"
fix=tests/fixtures/gqa_tied
base=(train --model $fix --data $fix/tokens.npy --block_size 16 --threads 1 --peak_gflops 1 --max_steps 6
      --learning_rate 1e-3 --warmup_steps 2 --weight_decay 0.1 --progress false)
fsdp=(--use_fsdp --fsdp_sharding_strategy FULL_SHARD)
ds1=(--use_deepspeed --zero_stage 1)
ds2=(--use_deepspeed --zero_stage 2)

# run NAME W PLAN... [extra flags]: W ranks with 12/W sequences each
run() {
    local name=$1 w=$2
    shift 2
    local launcher=("${mpi[@]}" -np "$w")
    [ "$w" -eq 1 ] && launcher=()
    "${launcher[@]}" "$ZTRAIN" "${base[@]}" --per_device_train_batch_size $((12 / w)) --output_dir "$TMP/$name" \
        --log_jsonl "$TMP/$name.jsonl" "$@" > "$TMP/$name.log" 2>&1 || fail "$name: $(tail -5 "$TMP/$name.log")"
}

# compare RESUMED REFERENCE TOL: the resumed run's 3 losses equal the reference's
# last 3, and every final weight, within TOL relative (0: bit-identical)
compare() {
    /usr/bin/python3 - "$TMP/$1" "$TMP/$2" "$3" <<'PY' || fail "$1 against $2 (tolerance $3)"
import json, struct, sys
import numpy as np
a, b, tol = sys.argv[1], sys.argv[2], float(sys.argv[3])
la = [json.loads(l)["loss"] for l in open(a + ".jsonl")]
lb = [json.loads(l)["loss"] for l in open(b + ".jsonl")][3:]
assert len(la) == 3 and len(lb) == 3, (la, lb)
for x, y in zip(la, lb):
    assert abs(x - y) <= tol * abs(y), ("loss", x, y)
def load(d):
    raw = open(d + "/model.safetensors", "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    head = json.loads(raw[8:8 + n])
    out = {}
    for k, v in head.items():
        if k == "__metadata__":
            continue
        s, e = v["data_offsets"]
        out[k] = np.frombuffer(raw[8 + n + s:8 + n + e], dtype=np.float32)
    return out
wa, wb = load(a), load(b)
assert wa.keys() == wb.keys()
for k in wa:
    diff = np.max(np.abs(wa[k].astype(np.float64) - wb[k])) / max(np.max(np.abs(wb[k])), 1e-30)
    assert diff <= tol, (k, diff)
PY
}

run ref2 2 "${fsdp[@]}" --save_steps 3
run ref4 4 "${fsdp[@]}" --save_steps 3
run ref2ds 2 "${ds2[@]}" --save_steps 3
ck2="$TMP/ref2/checkpoint-3"
run same 2 "${fsdp[@]}" --resume_from_checkpoint "$ck2"
grep -q "at step 3: bit-exact" "$TMP/same.log" || fail "same plan: $(grep resumed "$TMP/same.log")"
compare same ref2 0
run to1 1 "${fsdp[@]}" --resume_from_checkpoint "$ck2"
grep -q "at step 3: resharded: saved under 2 ranks" "$TMP/to1.log" || fail "2 -> 1: $(grep resumed "$TMP/to1.log")"
compare to1 ref2 1e-5
run to4 4 "${fsdp[@]}" --resume_from_checkpoint "$ck2"
compare to4 ref2 1e-5
run to3 3 "${fsdp[@]}" --resume_from_checkpoint "$TMP/ref4/checkpoint-3"
grep -q "resharded: saved under 4 ranks" "$TMP/to3.log" || fail "4 -> 3: $(grep resumed "$TMP/to3.log")"
compare to3 ref4 1e-5
run tods1 2 "${ds1[@]}" --resume_from_checkpoint "$ck2"
grep -q "resharded: saved under 2 ranks, FSDP" "$TMP/tods1.log" || fail "FSDP -> ZeRO-1: $(grep resumed "$TMP/tods1.log")"
compare tods1 ref2 1e-5
run tods2 2 "${ds2[@]}" --resume_from_checkpoint "$ck2"
compare tods2 ref2 1e-5
run tofsdp 2 "${fsdp[@]}" --resume_from_checkpoint "$TMP/ref2ds/checkpoint-3"
compare tofsdp ref2ds 1e-5
run ref4h 4 "${fsdp[@]}" --fsdp_sharding_strategy HYBRID_SHARD --ranks_per_node 2 --save_steps 3
ls "$TMP/ref4h/checkpoint-3/zero" | grep -q '^shard-2' && fail "hybrid sharding saved more than one copy"
run tosize 2 "${fsdp[@]}" --fsdp_auto_wrap_policy SIZE_BASED_WRAP --fsdp_min_num_params 100000 \
    --resume_from_checkpoint "$TMP/ref4h/checkpoint-3"
grep -q "resharded: saved under 4 ranks, FSDP HYBRID_SHARD" "$TMP/tosize.log" || fail "hybrid -> size wrap: $(grep resumed "$TMP/tosize.log")"
compare tosize ref4h 1e-5
finish
