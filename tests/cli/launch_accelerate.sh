# launch_accelerate.sh — `ztrain launch` as `accelerate launch` behaves: without
# --config_file it reads Accelerate's default config ($HF_HOME/accelerate/
# default_config.yaml; HF_HOME defaults to $XDG_CACHE_HOME/huggingface, then
# ~/.cache/huggingface) and says so; --num_processes overrides the YAML's
# num_processes (and the run then trains on that many ranks); a DeepSpeed JSON
# given as --config_file is named as such; DeepSpeed's activation_checkpointing
# section turns gradient checkpointing on, its keys accepted where they change
# nothing and refused where they ask for what is not implemented.
. "$(dirname "$0")/lib.bash"
fix=tests/fixtures/gqa_tied
yaml() { # FILE NUM_PROCESSES
    mkdir -p "$(dirname "$1")"
    printf 'compute_environment: LOCAL_MACHINE\ndebug: false\ndistributed_type: MULTI_CPU\nmachine_rank: 0\n' >"$1"
    printf 'mixed_precision: "no"\nnum_machines: 1\nnum_processes: %s\nuse_cpu: true\ntpu_env: []\n' "$2" >>"$1"
}
yaml "$TMP/hf/accelerate/default_config.yaml" 4
yaml "$TMP/xdg/huggingface/accelerate/default_config.yaml" 3
yaml "$TMP/mine.yaml" 4

# the default config, from HF_HOME, then from XDG_CACHE_HOME
cmd=$(HF_HOME=$TMP/hf "$ZTRAIN" launch --dry_run train --model m --data d 2>"$TMP/err") || fail "launch: $(cat "$TMP/err")"
printf '%s' "$cmd" | grep -q "^mpirun -np 4 .* train --config_file $TMP/hf/accelerate/default_config.yaml " ||
    fail "the default config is not used: $cmd"
grep -q "using Accelerate's default config $TMP/hf/accelerate/default_config.yaml (no --config_file given)" "$TMP/err" ||
    fail "launch does not say it read the default config: $(cat "$TMP/err")"
cmd=$(env -u HF_HOME XDG_CACHE_HOME=$TMP/xdg "$ZTRAIN" launch --dry_run train --model m --data d 2>/dev/null)
printf '%s' "$cmd" | grep -q "^mpirun -np 3 .*--config_file $TMP/xdg/huggingface/accelerate/default_config.yaml " ||
    fail "XDG_CACHE_HOME/huggingface: $cmd"
# no default file: nothing read, nothing said; a file given: the default is not read
cmd=$(HF_HOME=$TMP/none "$ZTRAIN" launch --dry_run train --model m --data d 2>"$TMP/err")
printf '%s' "$cmd" | grep -q "config_file" && fail "a config file from nowhere: $cmd"
[ -s "$TMP/err" ] && fail "launch without a default config said: $(cat "$TMP/err")"
cmd=$(HF_HOME=$TMP/hf "$ZTRAIN" launch --config_file "$TMP/xdg/huggingface/accelerate/default_config.yaml" --dry_run train 2>"$TMP/err")
printf '%s' "$cmd" | grep -q "^mpirun -np 3 " || fail "--config_file does not win over the default: $cmd"
grep -q "default config" "$TMP/err" && fail "the default read although --config_file was given"

# --num_processes overrides the YAML's, as with accelerate launch
cmd=$(HF_HOME=$TMP/none "$ZTRAIN" launch --num_processes 2 --config_file "$TMP/mine.yaml" --dry_run train --model m 2>"$TMP/err")
printf '%s' "$cmd" | grep -q "^mpirun -np 2 .* train --config_file $TMP/mine.yaml --threads [0-9]* --ignore_num_processes --model m$" ||
    fail "--num_processes 2 over num_processes 4: $cmd"
grep -q "\-\-num_processes 2 overrides num_processes 4 of $TMP/mine.yaml" "$TMP/err" || fail "no note of the override: $(cat "$TMP/err")"
HF_HOME=$TMP/none "$ZTRAIN" launch --num_processes 2 --threads_per_process 1 --config_file "$TMP/mine.yaml" train --model $fix \
    --data $fix/tokens.npy --block_size 16 --per_device_train_batch_size 1 --max_steps 1 --peak_gflops 1000 \
    --progress false >"$TMP/out" 2>&1 || fail "a run with --num_processes over the YAML's: $(tail -3 "$TMP/out")"
grep -q "2 ranks" "$TMP/out" || fail "the run is not on 2 ranks: $(cat "$TMP/out")"

# a DeepSpeed JSON where the Accelerate YAML goes
ds=examples/configs/ds_zero2.json
expect_exit 2 "$ds: this is a DeepSpeed JSON .*use --deepspeed_config_file $ds" -- "$ZTRAIN" launch --config_file $ds --dry_run train
expect_exit 2 "$ds: this is a DeepSpeed JSON .*use --deepspeed_config_file $ds" -- "$ZTRAIN" train --config_file $ds --model $fix --data d
expect_exit 2 "this is a DeepSpeed JSON" -- "$ZTRAIN" config show --config_file $ds

# activation_checkpointing: gradient checkpointing, the flag still wins
act() { printf '{"train_micro_batch_size_per_gpu": "auto", "zero_optimization": {"stage": 2}, "activation_checkpointing": {%s}}\n' "$1" >"$TMP/act.json"; }
mem() { "$ZTRAIN" estimate-memory --model $fix --deepspeed_config_file "$TMP/act.json" "$@"; }
act '"partition_activations": true, "cpu_checkpointing": false, "contiguous_memory_optimization": true, "number_checkpoints": 4, "synchronize_checkpoint_boundary": true, "profile": false'
mem | grep -q "gradient checkpointing" || fail "activation_checkpointing does not turn checkpointing on: $(mem 2>&1)"
out=$(mem --gradient_checkpointing false) || fail "estimate-memory --gradient_checkpointing false"
printf "%s" "$out" | grep -q "gradient checkpointing" && fail "--gradient_checkpointing false does not win"
act ''
mem | grep -q "gradient checkpointing" || fail "an empty activation_checkpointing section: $(mem 2>&1)"
printf '{"train_micro_batch_size_per_gpu": "auto", "zero_optimization": {"stage": 2}}\n' >"$TMP/act.json"
out=$(mem) || fail "estimate-memory without the section"
printf "%s" "$out" | grep -q "gradient checkpointing" && fail "checkpointing without the section"
act '"cpu_checkpointing": true'
expect_exit 2 "activation_checkpointing.cpu_checkpointing: must be false .*not implemented" -- mem
act '"profile": true'
expect_exit 2 "activation_checkpointing.profile: must be false" -- mem
act '"number_checkpoints": 0'
expect_exit 2 "activation_checkpointing.number_checkpoints" -- mem
act '"partition_activation": true'
expect_exit 2 "activation_checkpointing.*partition_activation.*partition_activations" -- mem
finish
