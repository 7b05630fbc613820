# Bad input of every kind: a clear error naming the file, key or flag, exit 2,
# and no damage to existing files.
. "$(dirname "$0")/lib.bash"
fix=tests/fixtures/gqa_tied
data=$fix/tokens.npy
train() { "$ZTRAIN" train --threads 1 --max_steps 1 --block_size 16 --per_device_train_batch_size 2 "$@"; }

expect_exit 2 "unknown flag --learning_rat .*did you mean --learning_rate" -- train --model $fix --data $data --learning_rat 1
expect_exit 2 "--max_steps: expected an integer" -- train --model $fix --data $data --max_steps ten
expect_exit 2 "--per_device_train_batch_size: 0 is out of range" -- train --model $fix --data $data --per_device_train_batch_size 0
expect_exit 2 "lr_scheduler_type: expected" -- train --model $fix --data $data --lr_scheduler_type warm
expect_exit 2 "mixed_precision: expected" -- train --model $fix --data $data --mixed_precision int8
expect_exit 2 "fsdp_backward_prefetch: expected BACKWARD_PRE, BACKWARD_POST or NO_PREFETCH, got 'BACKWARD_SOON'" -- train --model $fix --data $data --use_fsdp --fsdp_backward_prefetch BACKWARD_SOON
expect_exit 2 "fsdp_backward_prefetch and fsdp_forward_prefetch need FSDP" -- train --model $fix --data $data --use_deepspeed --zero_stage 3 --fsdp_forward_prefetch true
expect_exit 2 "loss scaling" -- train --model $fix --data $data --torch_dtype float16
expect_exit 2 "--model and --data are required" -- train --data $data
expect_exit 2 "unknown command" -- "$ZTRAIN" frobnicate
expect_exit 2 "$TMP/nomodel" -- train --model "$TMP/nomodel" --data $data
expect_exit 2 "$TMP/none.npy" -- train --model $fix --data "$TMP/none.npy"
expect_exit 2 "max_position_embeddings" -- train --model $fix --data $data --block_size 4096

# model directory faults
mk() { rm -rf "$TMP/m"; mkdir -p "$TMP/m"; cp $fix/config.json "$TMP/m/"; }
mk; head -c 5 $fix/model.safetensors > "$TMP/m/model.safetensors"
expect_exit 2 "$TMP/m/model.safetensors" -- train --model "$TMP/m" --data $data
mk; head -c 100000 /dev/urandom > "$TMP/m/model.safetensors"
expect_exit 2 "$TMP/m/model.safetensors" -- train --model "$TMP/m" --data $data
mk; head -c 100000 $fix/model.safetensors > "$TMP/m/model.safetensors"
expect_exit 2 "$TMP/m/model.safetensors" -- train --model "$TMP/m" --data $data
mk; cp $fix/model.safetensors "$TMP/m/"; sed -i 's/"hidden_size": 64/"hidden_size": 64, "attn_logit_softcapping": 50.0/' "$TMP/m/config.json"
expect_exit 2 "attn_logit_softcapping" -- train --model "$TMP/m" --data $data
mk; cp $fix/model.safetensors "$TMP/m/"; sed -i 's/"intermediate_size": 172/"intermediate_size": 170/' "$TMP/m/config.json"
expect_exit 2 "mlp.gate_proj.weight has shape" -- train --model "$TMP/m" --data $data
mk; cp $fix/model.safetensors "$TMP/m/"; sed -i 's/"vocab_size": 256/"vocab_size": 100/' "$TMP/m/config.json"
expect_exit 2 "embed_tokens.weight has shape|outside the model's vocabulary" -- train --model "$TMP/m" --data $data

# data faults
printf 'abc' > "$TMP/odd.bin"
expect_exit 2 "$TMP/odd.bin" -- train --model $fix --data "$TMP/odd.bin"
: > "$TMP/empty.txt"
expect_exit 2 "$TMP/empty.txt" -- train --model $fix --data "$TMP/empty.txt"
printf 'tiny' > "$TMP/short.txt"
expect_exit 2 "too short for --block_size" -- train --model $fix --data "$TMP/short.txt"

# a failing run never damages an existing output: train into a directory holding a
# model, with a bad flag value discovered after parsing; the old files stay intact
mkdir -p "$TMP/keep"; cp $fix/model.safetensors $fix/config.json "$TMP/keep/"
sum_before=$(cat "$TMP/keep/"* | md5sum)
expect_exit 2 "$TMP/none.npy" -- train --model $fix --data "$TMP/none.npy" --output_dir "$TMP/keep"
[ "$(cat "$TMP/keep/"* | md5sum)" = "$sum_before" ] || fail "existing output damaged"
ls "$TMP/keep" | grep -q tmp && fail "temporary file left behind"
finish
