# Offload's delayed parameter update (--offload_delayed_update, the YAML's
# ztrain_offload_delayed_update; docs/zero.md, Offload), on the emulated device.
# With θ_j the parameters after j updates, step s computes with θ_max(0,s-2).
# Held here (tests/test_offload.c holds the parameters to the definition itself):
#  - steps 1 and 2 use the initial parameters: their losses are those of a run
#    whose updates change nothing (learning rate 0), and step 3's is not;
#  - checkpoints hold every update applied: checkpoint-2 of a 4-step run holds the
#    model of a 2-step run (θ_2), and saving does not change the run's numbers;
#  - a resumed run starts the lag anew from θ_2, so its step 4 (at θ_2) has the
#    loss of the uninterrupted run's step 4 (at θ_2 too), its step 3 not; 2 ranks;
#  - the plan line and config show say it; the YAML key sets it;
#  - refused, exit 2 naming the flag: without optimizer offload, on the CPU.
. "$(dirname "$0")/lib.bash"
root=$(cd "$(dirname "$0")/../.." && pwd)
fix=$root/tests/fixtures/gqa_tied
common=(train --model "$fix" --data "$fix/tokens.npy" --block_size 16 --per_device_train_batch_size 2
        --learning_rate 1e-3 --lr_scheduler_type constant --weight_decay 0.1 --threads 1 --peak_gflops 1
        --progress false --seed 7)
printf '{"zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu"}, "offload_param": {"device": "cpu"}, '\
'"stage3_param_persistence_threshold": 0}, "train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto"}\n' \
    > "$TMP/off.json"
printf '{"zero_optimization": {"stage": 2}}\n' > "$TMP/no.json"
# run NAME NP ARGS...: train into $TMP/NAME (output dir, .jsonl, .log)
run() {
    local name=$1 np=$2
    shift 2
    local cmd=("$ZTRAIN")
    [ "$np" -gt 1 ] && cmd=("${mpi[@]}" -np "$np" "$ZTRAIN")
    "${cmd[@]}" "${common[@]}" --device emu --use_deepspeed --output_dir "$TMP/$name" --log_jsonl "$TMP/$name.jsonl" \
        "$@" >"$TMP/$name.log" 2>&1 || { fail "$name: $(tail -3 "$TMP/$name.log")"; return 1; }
}
loss() { grep "\"step\": $2," "$TMP/$1.jsonl" | grep -o '"loss": [^,]*'; } # NAME STEP

# ---- steps 1 and 2 at the initial parameters ------------------------------------------------
run dpu 1 --deepspeed_config_file "$TMP/off.json" --max_steps 4 --save_steps 2 --offload_delayed_update
run still 1 --deepspeed_config_file "$TMP/off.json" --max_steps 3 --learning_rate 0
run plain 1 --deepspeed_config_file "$TMP/off.json" --max_steps 3
for s in 1 2; do
    [ -n "$(loss dpu $s)" ] && [ "$(loss dpu $s)" = "$(loss still $s)" ] ||
        fail "step $s: $(loss dpu $s) with the delayed update, $(loss still $s) at the initial parameters"
done
[ "$(loss dpu 3)" != "$(loss still 3)" ] || fail "step 3 still at the initial parameters: $(loss dpu 3)"
[ "$(loss dpu 2)" != "$(loss plain 2)" ] || fail "step 2 is the undelayed run's: $(loss dpu 2)"
grep -q "^offload: delayed parameter update: the host's AdamW of step k runs beside step k+1" "$TMP/dpu.log" ||
    fail "no delayed update in the plan: $(grep '^offload' "$TMP/dpu.log")"
grep -q "delayed" "$TMP/plain.log" && fail "the plan of a run without it speaks of a delayed update"

# ---- checkpoints: every update applied, the run unchanged by saving ----------------------
run two 1 --deepspeed_config_file "$TMP/off.json" --max_steps 2 --offload_delayed_update
# (a ZeRO-3 checkpoint holds shards: merged, they are the model)
"$ZTRAIN" merge-weights "$TMP/dpu/checkpoint-2" "$TMP/merged" >/dev/null 2>&1 || fail "merge-weights checkpoint-2"
d=$(same_checkpoint "$TMP/merged/model.safetensors" "$TMP/two/model.safetensors") ||
    fail "checkpoint-2 does not hold the model of two delayed updates: $d"
run nosave 1 --deepspeed_config_file "$TMP/off.json" --max_steps 4 --offload_delayed_update
for s in 1 2 3 4; do
    [ "$(loss dpu $s)" = "$(loss nosave $s)" ] || fail "step $s: saving changed the loss ($(loss dpu $s) vs $(loss nosave $s))"
done
cmp -s "$TMP/dpu/model.safetensors" "$TMP/nosave/model.safetensors" || fail "saving changed the final model"

# ---- resumed: the lag starts anew from the checkpoint (2 ranks) ---------------------------
run dpu2 2 --deepspeed_config_file "$TMP/off.json" --max_steps 4 --save_steps 2 --offload_delayed_update
run res2 2 --deepspeed_config_file "$TMP/off.json" --max_steps 4 --offload_delayed_update \
    --resume_from_checkpoint "$TMP/dpu2/checkpoint-2"
[ -n "$(loss res2 4)" ] && [ "$(loss res2 4)" = "$(loss dpu2 4)" ] ||
    fail "resumed step 4: $(loss res2 4), uninterrupted $(loss dpu2 4) (both at θ_2)"
[ "$(loss res2 3)" != "$(loss dpu2 3)" ] || fail "resumed step 3 computed at θ_1, not at the checkpoint's θ_2"

# ---- the YAML key and config show ----------------------------------------------------------
printf 'distributed_type: DEEPSPEED\nztrain_offload_delayed_update: true\ndeepspeed_config:\n  zero_stage: 2\n'\
'  offload_optimizer_device: cpu\n' > "$TMP/dpu.yaml"
out=$("$ZTRAIN" config show --model "$fix" --config_file "$TMP/dpu.yaml" --device emu 2>&1) || fail "config show: $out"
printf '%s' "$out" | grep -q "^offload: delayed parameter update" || fail "config show: $out"
shards() { sed -n 's/^  host (offload) .*gradient and compute-dtype shards \([0-9.]*\) MiB, in pinned host memory$/\1/p' <<< "$1"; }
with=$(shards "$out")
out=$("$ZTRAIN" config show --model "$fix" --config_file "$TMP/dpu.yaml" --device emu --offload_delayed_update false 2>&1)
printf '%s' "$out" | grep -q "delayed" && fail "--offload_delayed_update false does not override the YAML: $out"
# where each buffer lives, in bytes: the delayed update's second sets are host memory too
without=$(shards "$out")
[ -n "$with" ] && [ -n "$without" ] && awk -v a="$with" -v b="$without" 'BEGIN { exit !(a > b && b > 0) }' ||
    fail "config show's host shards: $with MiB with the delayed update, $without without: $out"

# ---- refusals -------------------------------------------------------------------------------
expect_exit 2 "offload_delayed_update.*needs optimizer offload to cpu" -- \
    "$ZTRAIN" "${common[@]}" --max_steps 1 --device emu --use_deepspeed --deepspeed_config_file "$TMP/no.json" \
    --offload_delayed_update
expect_exit 2 "offload_delayed_update.*needs a device" -- \
    "$ZTRAIN" "${common[@]}" --max_steps 1 --use_deepspeed --deepspeed_config_file "$TMP/off.json" \
    --offload_delayed_update
finish
