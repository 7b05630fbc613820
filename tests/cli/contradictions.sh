# Contradictions are refused or reconciled as Accelerate does (issue 17 point 5):
# distributed_type NO on several ranks and a YAML num_processes that differs from
# the world MPI started are refused with both numbers (unless
# --ignore_num_processes); Accelerate's DeepSpeed template -- mixed_precision in
# the YAML beside a JSON whose bf16 is "auto" -- runs in the YAML's precision, and
# an explicit JSON value that disagrees is refused naming both files.
. "$(dirname "$0")/lib.bash"
fix=tests/fixtures/gqa_tied
args=(train --model $fix --data $fix/tokens.npy --block_size 16 --per_device_train_batch_size 1 --max_steps 1
      --threads 1 --peak_gflops 1)

printf "distributed_type: 'NO'\nmixed_precision: 'no'\nnum_processes: 1\n" > "$TMP/no.yaml"
expect_exit 2 "$TMP/no.yaml: distributed_type NO is one process, but MPI started 2 ranks" -- \
    timeout 120 "${mpi[@]}" -np 2 "$ZTRAIN" "${args[@]}" --config_file "$TMP/no.yaml"
"$ZTRAIN" "${args[@]}" --config_file "$TMP/no.yaml" > /dev/null || fail "distributed_type NO on one process"

printf 'distributed_type: MULTI_CPU\nnum_processes: 4\n' > "$TMP/four.yaml"
expect_exit 2 "$TMP/four.yaml: num_processes is 4, but MPI started 3 ranks; start 4 .*--ignore_num_processes to run on 3" -- \
    timeout 120 "${mpi[@]}" -np 3 "$ZTRAIN" "${args[@]}" --config_file "$TMP/four.yaml"
out=$(timeout 120 "${mpi[@]}" -np 3 "$ZTRAIN" "${args[@]}" --config_file "$TMP/four.yaml" --ignore_num_processes 2>&1) ||
    fail "--ignore_num_processes: $out"
printf '%s' "$out" | grep -q "3 ranks" || fail "--ignore_num_processes did not run on 3 ranks: $out"

# Accelerate's examples/config_yaml_templates/deepspeed.yaml: mixed_precision
# beside a deepspeed_config_file whose bf16.enabled is "auto"
cat > "$TMP/ds.json" <<'JSON'
{"bf16": {"enabled": "auto"}, "zero_optimization": {"stage": 2},
 "train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto"}
JSON
printf 'distributed_type: DEEPSPEED\ndeepspeed_config:\n  deepspeed_config_file: %s\nmixed_precision: bf16\nnum_processes: 1\n' \
    "$TMP/ds.json" > "$TMP/tmpl.yaml"
out=$("$ZTRAIN" "${args[@]}" --config_file "$TMP/tmpl.yaml" 2>&1) || fail "the DeepSpeed template: $out"
printf '%s' "$out" | grep -Eq "^\| DeepSpeed \| fp32 \| bf16 \| fp32 \| bf16 " || fail "the template did not run bf16 (fp32 master, bf16 compute): $out"
# an explicit JSON value that contradicts the YAML
sed 's/"auto"}, "zero/false}, "zero/' "$TMP/ds.json" > "$TMP/ds_off.json"
printf 'distributed_type: DEEPSPEED\ndeepspeed_config:\n  deepspeed_config_file: %s\nmixed_precision: bf16\nnum_processes: 1\n' \
    "$TMP/ds_off.json" > "$TMP/contra.yaml"
expect_exit 2 "$TMP/contra.yaml: mixed_precision is bf16, but $TMP/ds_off.json's bf16/fp16 sections say no" -- \
    "$ZTRAIN" "${args[@]}" --config_file "$TMP/contra.yaml"
finish
