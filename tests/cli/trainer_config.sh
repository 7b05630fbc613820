# Trainer's and TRL's configuration as they are typed (issue 45, point 6): TRL's
# aliases --max_length / --max_seq_length (--block_size) and --dataset_text_field
# (--text_field); --bf16 with --fp16 refused; --optim's AdamW names accepted and the
# others refused by name; the added schedules and --lr_scheduler_kwargs reach the
# trainer; an Accelerate MULTI_GPU YAML is refused, with the reason, by a build
# without CUDA (and runs on --device cuda where CUDA is built in).
. "$(dirname "$0")/lib.bash"
cfg=tests/fixtures/gqa_tied/config.json
"$ZTRAIN" init-model --model_config "$cfg" --output_dir "$TMP/init" --seed 3 >/dev/null || fail "init-model"
printf 'The quick brown fox jumps over the lazy dog. %.0s' $(seq 30) > "$TMP/text.txt"
run() { "$ZTRAIN" train --model "$TMP/init" --data "$TMP/text.txt" --per_device_train_batch_size 2 \
    --threads 1 --peak_gflops 100 --learning_rate 1e-3 --max_steps 3 "$@"; }
losses() { /usr/bin/python3 -c "import json,sys; print([json.loads(l)['loss'] for l in open(sys.argv[1])])" "$1"; }

# TRL's block size names: the same run as --block_size 16, and not the default 128's
run --block_size 16 --log_jsonl "$TMP/b.jsonl" > /dev/null || fail "--block_size 16"
run --block_size 64 --log_jsonl "$TMP/b64.jsonl" > /dev/null || fail "--block_size 64"
for alias in max_length max_seq_length; do
    run --$alias 16 --log_jsonl "$TMP/$alias.jsonl" > /dev/null || fail "--$alias 16"
    [ "$(losses "$TMP/$alias.jsonl")" = "$(losses "$TMP/b.jsonl")" ] || fail "--$alias 16 is not --block_size 16"
    [ "$(losses "$TMP/$alias.jsonl")" != "$(losses "$TMP/b64.jsonl")" ] || fail "--$alias changed nothing"
done
# --dataset_text_field is --text_field
tok=tests/fixtures/tokenizers/ztrain_trained
printf '{"body": "first record"}\n{"body": "second one"}\n' > "$TMP/d.jsonl"
"$ZTRAIN" tokenize --tokenizer "$tok" --input "$TMP/d.jsonl" --text_field body --output "$TMP/tf.npy" 2>/dev/null ||
    fail "tokenize --text_field body"
"$ZTRAIN" tokenize --tokenizer "$tok" --input "$TMP/d.jsonl" --dataset_text_field body --output "$TMP/dtf.npy" \
    2>/dev/null || fail "tokenize --dataset_text_field body"
cmp -s "$TMP/tf.npy" "$TMP/dtf.npy" || fail "--dataset_text_field body differs from --text_field body"
expect_exit 2 'line 1 has no "text"' -- "$ZTRAIN" tokenize --tokenizer "$tok" --input "$TMP/d.jsonl" --output "$TMP/x.npy"

# --bf16 and --fp16 together: refused as TrainingArguments refuses them, whatever the order
expect_exit 2 "--bf16 and --fp16 exclude each other" -- run --block_size 16 --bf16 --fp16
expect_exit 2 "--fp16 and --bf16 exclude each other" -- run --block_size 16 --fp16 true --bf16
run --block_size 16 --bf16 --fp16 false > /dev/null || fail "--bf16 --fp16 false: refused"

# --optim: torch's AdamW under its names; another optimizer is refused by its name
for o in adamw_torch adamw_torch_fused; do
    run --block_size 16 --optim $o --log_jsonl "$TMP/o_$o.jsonl" > /dev/null || fail "--optim $o"
    [ "$(losses "$TMP/o_$o.jsonl")" = "$(losses "$TMP/b.jsonl")" ] || fail "--optim $o changed the run"
done
expect_exit 2 "--optim adafactor: not supported" -- run --block_size 16 --optim adafactor
expect_exit 2 "--optim sgd: not supported" -- run --block_size 16 --optim sgd

# the added schedules reach the trainer with their kwargs (the values themselves are
# checked against transformers in test_optim); lr per step from the JSONL
lrs() { /usr/bin/python3 -c "import json,sys; print(' '.join('%.9g' % json.loads(l)['lr'] for l in open(sys.argv[1])))" "$1"; }
run --block_size 16 --max_steps 4 --lr_scheduler_type cosine_with_min_lr --lr_scheduler_kwargs '{"min_lr_rate": 0.5}' \
    --log_jsonl "$TMP/cm.jsonl" > /dev/null || fail "cosine_with_min_lr"
# u = 0..3 of S = 4: 0.5 + 0.5 * 0.5 * (1 + cos(pi u / 4)), times 1e-3
[ "$(lrs "$TMP/cm.jsonl")" = "0.001 0.000926776695 0.00075 0.000573223305" ] ||
    fail "cosine_with_min_lr lrs: $(lrs "$TMP/cm.jsonl")"
run --block_size 16 --max_steps 4 --lr_scheduler_type warmup_stable_decay --warmup_steps 1 \
    --lr_scheduler_kwargs '{"num_decay_steps": 2, "decay_type": "linear"}' --log_jsonl "$TMP/wsd.jsonl" > /dev/null ||
    fail "warmup_stable_decay"
[ "$(lrs "$TMP/wsd.jsonl")" = "0 0.001 0.001 0.0005" ] || fail "warmup_stable_decay lrs: $(lrs "$TMP/wsd.jsonl")"
run --block_size 16 --max_steps 3 --lr_scheduler_type inverse_sqrt --lr_scheduler_kwargs '{"timescale": 4}' \
    --log_jsonl "$TMP/is.jsonl" > /dev/null || fail "inverse_sqrt"
[ "$(lrs "$TMP/is.jsonl")" = "0.001 0.000894427191 0.000816496581" ] || fail "inverse_sqrt lrs: $(lrs "$TMP/is.jsonl")"
# a checkpoint records the kwargs: a resume under others is refused naming them
run --block_size 16 --max_steps 4 --lr_scheduler_type cosine --lr_scheduler_kwargs '{"num_cycles": 1}' \
    --save_steps 2 --output_dir "$TMP/kw" > /dev/null 2>&1 || fail "cosine num_cycles 1 with checkpoints"
expect_exit 2 'lr_scheduler_kwargs was \{"num_cycles": 1\} when saved, this run has \{"num_cycles": 2\}' -- \
    run --block_size 16 --max_steps 4 --lr_scheduler_type cosine --lr_scheduler_kwargs '{"num_cycles": 2}' \
    --output_dir "$TMP/kw" --resume_from_checkpoint "$TMP/kw/checkpoint-2"
run --block_size 16 --max_steps 4 --lr_scheduler_type cosine --lr_scheduler_kwargs '{"num_cycles": 1.0}' \
    --output_dir "$TMP/kw" --resume_from_checkpoint "$TMP/kw/checkpoint-2" > /dev/null 2>&1 ||
    fail "resume under the same kwargs refused"
expect_exit 2 "needs --lr_scheduler_kwargs" -- run --block_size 16 --lr_scheduler_type cosine_with_min_lr
expect_exit 2 "num_cycles is not an argument of lr_scheduler_type linear" -- run --block_size 16 \
    --lr_scheduler_kwargs '{"num_cycles": 2}'

# Accelerate's MULTI_GPU: DDP on --device cuda
printf 'compute_environment: LOCAL_MACHINE\ndistributed_type: MULTI_GPU\nnum_processes: 1\nmixed_precision: bf16\n' \
    > "$TMP/multi_gpu.yaml"
if ! "$ZTRAIN" env --measure false 2>/dev/null | grep -q 'built without CUDA'; then
    "$ZTRAIN" config show --model "$TMP/init" --config_file "$TMP/multi_gpu.yaml" | grep -q "cuda" ||
        fail "MULTI_GPU on a CUDA build: not planned on --device cuda"
else
    expect_exit 2 "MULTI_GPU runs on --device cuda, and this ztrain was built without CUDA" -- \
        run --block_size 16 --config_file "$TMP/multi_gpu.yaml"
fi
finish
