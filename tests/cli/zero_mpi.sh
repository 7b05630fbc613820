# The ZeRO engine on real ranks: test_zero under mpirun with 2 and 4 ranks
# (oversubscribed on small machines), and the command line's multi-rank errors:
# ranks that disagree, a rank whose input is bad, a world the plan cannot use.
. "$(dirname "$0")/lib.bash"
build=$(dirname "$ZTRAIN")
for n in 2 4; do
    out=$("${mpi[@]}" -np $n "$build/tests/test_zero" 2>&1)
    rc=$?
    printf '%s\n' "$out" | grep -Eq "^[1-9][0-9]* passed, 0 failed" && [ "$rc" -eq 0 ] ||
        { fail "test_zero on $n ranks (exit $rc)"; printf '%s\n' "$out" | tail -30; }
done

fix=tests/fixtures/gqa_tied
args=(train --model $fix --block_size 16 --per_device_train_batch_size 1 --max_steps 2 --threads 1 --peak_gflops 1)
expect_exit 2 "rank 0: rank 1 and rank 0 resolved a different optimizer" -- \
    "${mpi[@]}" -np 1 "$ZTRAIN" "${args[@]}" --data $fix/tokens.npy --learning_rate 1e-3 : \
    -np 1 "$ZTRAIN" "${args[@]}" --data $fix/tokens.npy --learning_rate 2e-3
head -c 2000 /usr/share/common-licenses/GPL-3 > "$TMP/other.txt"
expect_exit 2 "rank 0: rank 1 and rank 0 resolved a different data" -- \
    "${mpi[@]}" -np 1 "$ZTRAIN" "${args[@]}" --data $fix/tokens.npy : \
    -np 1 "$ZTRAIN" "${args[@]}" --data "$TMP/other.txt"
expect_exit 2 "rank 1: $TMP/missing.npy" -- \
    "${mpi[@]}" -np 1 "$ZTRAIN" "${args[@]}" --data $fix/tokens.npy : \
    -np 1 "$ZTRAIN" "${args[@]}" --data "$TMP/missing.npy"
expect_exit 2 "ranks_per_node 3 does not divide the 2 processes" -- \
    "${mpi[@]}" -np 2 "$ZTRAIN" "${args[@]}" --data $fix/tokens.npy --use_fsdp \
    --fsdp_sharding_strategy HYBRID_SHARD --ranks_per_node 3

# launch: starts the ranks itself and trains through the engine
out=$("$ZTRAIN" launch --num_processes 2 "${args[@]}" --data $fix/tokens.npy --use_fsdp \
      --fsdp_sharding_strategy FULL_SHARD --torch_dtype bf16 --mixed_precision bf16 --output_dir "$TMP/l" 2>&1) ||
    fail "launch: $out"
printf '%s' "$out" | grep -q "plan: FSDP, FULL_SHARD (ZeRO-3), 2 ranks" || fail "launch did not print the plan: $out"
printf '%s' "$out" | grep -Fq "| FSDP aligned | bf16 | bf16 | fp32 | bf16 | bf16 | fp32 |" || fail "plan row: $out"
[ "$(printf '%s' "$out" | grep -c "^plan:")" -eq 1 ] || fail "only rank 0 should print"
[ -f "$TMP/l/model.safetensors" ] || fail "launch: no saved model"
# the config file picks the face and stage; a flag overrides the file
out=$("$ZTRAIN" launch --config_file examples/configs/deepspeed_zero3.yaml "${args[@]}" --data $fix/tokens.npy 2>&1) ||
    fail "launch with deepspeed_zero3.yaml: $out"
printf '%s' "$out" | grep -q "plan: DEEPSPEED, ZeRO-3, 2 ranks" || fail "deepspeed_zero3.yaml plan: $out"
out=$("$ZTRAIN" launch --config_file examples/configs/fsdp_full_shard_bf16.yaml "${args[@]}" --data $fix/tokens.npy \
      --fsdp_sharding_strategy SHARD_GRAD_OP 2>&1) || fail "launch with an override: $out"
printf '%s' "$out" | grep -q "plan: FSDP, SHARD_GRAD_OP (ZeRO-2), 2 ranks" || fail "flag did not override the file: $out"
sed 's/fsdp_sharding_strategy/fsdp_shardng_strategy/' examples/configs/fsdp_shard_grad_op.yaml > "$TMP/typo.yaml"
expect_exit 2 "$TMP/typo.yaml.*fsdp_shardng_strategy.*did you mean fsdp_sharding_strategy" -- \
    "$ZTRAIN" launch --config_file "$TMP/typo.yaml" "${args[@]}" --data $fix/tokens.npy
# a DeepSpeed JSON full of "auto": resolved from the run; a flag overrides a JSON value;
# DeepSpeed's batch check names all three numbers
out=$("$ZTRAIN" launch --num_processes 2 "${args[@]}" --data $fix/tokens.npy \
      --deepspeed_config_file examples/configs/ds_zero3.json --log_jsonl "$TMP/ds.jsonl" 2>&1) || fail "ds_zero3.json: $out"
printf '%s' "$out" | grep -q "plan: DEEPSPEED, ZeRO-3, 2 ranks" || fail "ds_zero3.json plan: $out"
printf '%s' "$out" | grep -Fq "| DeepSpeed | fp32 | bf16 | fp32 | bf16 |" || fail "ds_zero3.json precision: $out"
# two ranks at ZeRO-3 with overlap: every step logs time inside collectives, and some of it
# was spent moving data in progress calls
/usr/bin/python3 - "$TMP/ds.jsonl" <<'PY' || fail "comm_wait_s / comm_progress_s in $TMP/ds.jsonl"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
assert rows and all(r["comm_wait_s"] >= 0 and r["comm_progress_s"] >= 0 for r in rows), rows
assert sum(r["comm_wait_s"] + r["comm_progress_s"] for r in rows) > 0, rows
PY
printf '{"train_batch_size": 32, "train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 2,\n "zero_optimization": {"stage": 2}}\n' > "$TMP/bad_tbs.json"
expect_exit 2 "train_batch_size 32 != train_micro_batch_size_per_gpu 4 \\* gradient_accumulation_steps 2 \\* world size 2" -- \
    "$ZTRAIN" launch --num_processes 2 train --model $fix --data $fix/tokens.npy --threads 1 --block_size 16 \
    --deepspeed_config_file "$TMP/bad_tbs.json"
out=$("$ZTRAIN" launch --num_processes 2 train --model $fix --data $fix/tokens.npy --threads 1 --block_size 16 \
      --max_steps 1 --peak_gflops 1 --deepspeed_config_file "$TMP/bad_tbs.json" --per_device_train_batch_size 3 2>&1)
printf '%s' "$out" | grep -q "train_batch_size 32 != train_micro_batch_size_per_gpu 3" ||
    fail "the flag's batch should replace the JSON's and still be checked: $out"
printf '{"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 3, "zero_optimization": {"stage": 1}}\n' > "$TMP/ok.json"
out=$("$ZTRAIN" launch --num_processes 2 train --model $fix --data $fix/tokens.npy --threads 1 --block_size 16 \
      --max_steps 1 --peak_gflops 1 --deepspeed_config_file "$TMP/ok.json" --gradient_accumulation_steps 1 2>&1) ||
    fail "ok.json: $out"
printf '%s' "$out" | grep -q "global batch 2 x 1 x 2" || fail "JSON micro batch 2 with the flag's accumulation 1: $out"

# checkpoints: a 2-rank checkpoint resumes on 1 rank, resharded; a missing shard is refused by name
"${mpi[@]}" -np 2 "$ZTRAIN" "${args[@]}" --data $fix/tokens.npy --use_fsdp --save_steps 1 --output_dir "$TMP/ck" \
    > /dev/null 2>&1 || fail "training with --save_steps"
[ -f "$TMP/ck/checkpoint-1/trainer_state.json" ] && [ -f "$TMP/ck/checkpoint-1/zero/shard-1-of-2.safetensors" ] ||
    fail "checkpoint-1 is incomplete"
out=$("$ZTRAIN" "${args[@]}" --data $fix/tokens.npy --use_fsdp --per_device_train_batch_size 2 \
      --resume_from_checkpoint "$TMP/ck/checkpoint-1" 2>&1)
printf '%s' "$out" | grep -q "resumed from $TMP/ck/checkpoint-1 at step 1: resharded: saved under 2 ranks" ||
    fail "2 -> 1 ranks should reshard: $out"
rm "$TMP/ck/checkpoint-1/zero/shard-1-of-2.safetensors"
expect_exit 2 "rank 0: --resume_from_checkpoint: .*shard-1-of-2.safetensors: cannot open" -- \
    "${mpi[@]}" -np 2 "$ZTRAIN" "${args[@]}" --data $fix/tokens.npy --use_fsdp --resume_from_checkpoint "$TMP/ck/checkpoint-1"

cmd=$("$ZTRAIN" launch --num_processes 4 --dry_run train --model m --data d)
printf '%s' "$cmd" | grep -q "^mpirun -np 4 .*--oversubscribe .* train --threads 1 --model m --data d" ||
    fail "launch command: $cmd"

# a rank whose step fails mid-training stops the whole job with its error, instead of
# leaving the other rank waiting in a collective (test_failing_step plants the failure
# at step 2 on rank 1 through the trainer's test hooks)
out=$(timeout 120 "${mpi[@]}" -np 2 "$build/tests/test_failing_step" 2>&1)
rc=$?
[ "$rc" -ne 124 ] && [ "$rc" -ne 0 ] || fail "a failing rank should abort the job (exit $rc): $out"
printf '%s' "$out" | grep -q "rank 1: injected failure at step 2" || fail "the failing rank's error: $out"
! printf '%s' "$out" | grep -q "returned from a job" || fail "a rank returned instead of aborting: $out"
finish
