# DeepSpeed's and FSDP's limits from a user's config (docs/zero.md): the DeepSpeed JSON's
# bucket sizes, persistence threshold and max live parameters, and
# --fsdp_limit_all_gathers, reach the plan (printed), act in a 2-rank run (collective
# bytes, memory), and change no number: the losses and the saved weights are identical
# to the run without them.  (Exact counts per knob: tests/test_zero.c test_knob_*.)
. "$(dirname "$0")/lib.bash"
fix=tests/fixtures/untied_odd
json() { # FILE ZERO_OPTIMIZATION_EXTRA
    printf '{"train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto",
 "zero_optimization": {"stage": 3%s}}\n' "$2" >"$1"
}
json "$TMP/plain.json" ", \"stage3_param_persistence_threshold\": 0"
json "$TMP/knobs.json" ', "reduce_bucket_size": 2000, "stage3_param_persistence_threshold": 50000, "stage3_max_live_parameters": 200000, "stage3_prefetch_bucket_size": 300000'
run() { # NAME FLAGS...
    local name=$1
    shift
    "${mpi[@]}" -np 2 "$ZTRAIN" train --model $fix --data $fix/tokens.npy --block_size 16 --per_device_train_batch_size 1 \
        --gradient_accumulation_steps 2 --max_steps 3 --threads 1 --peak_gflops 1000 --progress false \
        --output_dir "$TMP/$name" --log_jsonl "$TMP/$name.jsonl" "$@" >"$TMP/$name.out" 2>&1 ||
        fail "$name: $(tail -3 "$TMP/$name.out")"
}
field() { grep -o "\"$2\": [^,}]*" "$1" | cut -d' ' -f2 | tr '\n' ' '; }
run plain --deepspeed_config_file "$TMP/plain.json"
run knobs --deepspeed_config_file "$TMP/knobs.json"
grep -q "^limits: reduce bucket 2000, all-gather bucket 0, prefetch 6 units ahead within 300000, max live 200000, persistent below 50000 parameters" \
    "$TMP/knobs.out" || fail "the plan does not show the limits: $(grep -E '^(plan|overlap|limits)' "$TMP/knobs.out")"
grep -q "^limits: reduce bucket 500000000, all-gather bucket 0, prefetch 6 units ahead within 50000000, max live 1000000000, persistent below 0 parameters" "$TMP/plain.out" || fail "DeepSpeed's defaults not in the plan: $(grep "^limits" "$TMP/plain.out")"
[ -n "$(field "$TMP/plain.jsonl" loss)" ] && [ "$(field "$TMP/plain.jsonl" loss)" = "$(field "$TMP/knobs.jsonl" loss)" ] &&
    [ "$(field "$TMP/plain.jsonl" grad_norm)" = "$(field "$TMP/knobs.jsonl" grad_norm)" ] ||
    fail "losses differ: $(field "$TMP/plain.jsonl" loss) / $(field "$TMP/knobs.jsonl" loss)"
cmp -s "$TMP/plain/model.safetensors" "$TMP/knobs/model.safetensors" || fail "the saved weights differ"
# the root unit (below 50000 parameters) stays gathered: fewer all-gather bytes per step,
# the same reduce-scatter bytes, smaller communication buffers
a=$(field "$TMP/plain.jsonl" allgather | awk '{print $3}') b=$(field "$TMP/knobs.jsonl" allgather | awk '{print $3}')
[ -n "$a" ] && [ "$b" -lt "$a" ] || fail "all-gather bytes per step: $a without, $b with the persistence threshold"
[ "$(field "$TMP/plain.jsonl" reduce_scatter)" = "$(field "$TMP/knobs.jsonl" reduce_scatter)" ] || fail "reduce-scatter bytes differ"
a=$(field "$TMP/plain.jsonl" comm | awk '{print $3}') b=$(field "$TMP/knobs.jsonl" comm | awk '{print $3}')
[ -n "$a" ] && [ "$b" -lt "$a" ] || fail "communication buffers: $a without, $b with reduce_bucket_size 2000"

# FSDP without limit_all_gathers: the prefetch runs further ahead in more gathered memory
run lim --use_fsdp --fsdp_forward_prefetch
run nolim --use_fsdp --fsdp_forward_prefetch --fsdp_limit_all_gathers false
[ "$(field "$TMP/lim.jsonl" loss)" = "$(field "$TMP/nolim.jsonl" loss)" ] || fail "limit_all_gathers changed the losses"
cmp -s "$TMP/lim/model.safetensors" "$TMP/nolim/model.safetensors" || fail "limit_all_gathers changed the weights"
a=$(field "$TMP/lim.jsonl" gathered | awk '{print $3}') b=$(field "$TMP/nolim.jsonl" gathered | awk '{print $3}')
[ -n "$a" ] && [ "$b" -gt "$a" ] || fail "gathered memory: $a with the limit, $b without"
expect_exit 2 "fsdp_limit_all_gathers needs FSDP" -- "$ZTRAIN" config validate --use_deepspeed --zero_stage 3 --fsdp_limit_all_gathers false
finish
