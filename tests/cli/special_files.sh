# Special files as inputs (issue 17 point 3): a FIFO, a device, a socket, a
# directory or a symlink loop given as any input is refused at once with exit 2
# naming it; nothing blocks (each run has a 20 s timeout, which would exit 124).
. "$(dirname "$0")/lib.bash"
fix=tests/fixtures/gqa_tied
data=$fix/tokens.npy
train() { timeout 20 "$ZTRAIN" train --threads 1 --max_steps 1 --block_size 16 --per_device_train_batch_size 2 "$@"; }

mkfifo "$TMP/fifo.npy" "$TMP/fifo.yaml" "$TMP/fifo.json"
ln -s /dev/zero "$TMP/zero.npy"
ln -s loop_b.npy "$TMP/loop_a.npy"; ln -s loop_a.npy "$TMP/loop_b.npy"
mkdir "$TMP/dir.npy"
/usr/bin/python3 -c 'import socket,sys; socket.socket(socket.AF_UNIX).bind(sys.argv[1])' "$TMP/sock.npy"

# --data
expect_exit 2 "$TMP/fifo.npy: the token file is a FIFO" -- train --model $fix --data "$TMP/fifo.npy"
expect_exit 2 "$TMP/zero.npy: the token file is a character device" -- train --model $fix --data "$TMP/zero.npy"
expect_exit 2 "$TMP/sock.npy: cannot open.*No such device or address|$TMP/sock.npy: the token file is a socket" -- train --model $fix --data "$TMP/sock.npy"
expect_exit 2 "$TMP/loop_a.npy: cannot open.*Too many levels of symbolic links" -- train --model $fix --data "$TMP/loop_a.npy"
expect_exit 2 "$TMP/dir.npy: the token file is a directory" -- train --model $fix --data "$TMP/dir.npy"

# the Accelerate YAML and the DeepSpeed JSON
expect_exit 2 "$TMP/fifo.yaml: the Accelerate config is a FIFO" -- train --model $fix --data $data --config_file "$TMP/fifo.yaml"
expect_exit 2 "$TMP/fifo.json: the input is a FIFO" -- train --model $fix --data $data --use_deepspeed --deepspeed_config_file "$TMP/fifo.json"
expect_exit 2 "$TMP/loop_a.npy: cannot open.*symbolic links" -- train --model $fix --data $data --config_file "$TMP/loop_a.npy"

# the model directory: config.json, model.safetensors, the shard index
mk() { rm -rf "$TMP/m"; mkdir -p "$TMP/m"; cp $fix/config.json $fix/model.safetensors "$TMP/m/"; }
mk; rm "$TMP/m/config.json"; mkfifo "$TMP/m/config.json"
expect_exit 2 "$TMP/m/config.json: the input is a FIFO" -- train --model "$TMP/m" --data $data
mk; rm "$TMP/m/model.safetensors"; mkfifo "$TMP/m/model.safetensors"
expect_exit 2 "$TMP/m/model.safetensors: the input is a FIFO" -- train --model "$TMP/m" --data $data
mk; rm "$TMP/m/model.safetensors"; ln -s /dev/zero "$TMP/m/model.safetensors"
expect_exit 2 "$TMP/m/model.safetensors: the input is a character device" -- train --model "$TMP/m" --data $data
mk; rm "$TMP/m/model.safetensors"; mkfifo "$TMP/m/model.safetensors.index.json"
expect_exit 2 "$TMP/m/model.safetensors.index.json: the input is a FIFO" -- train --model "$TMP/m" --data $data
mk; ln -s self "$TMP/m/self"; rm "$TMP/m/config.json"; ln -s self "$TMP/m/config.json"
expect_exit 2 "$TMP/m/config.json: cannot open.*symbolic links" -- train --model "$TMP/m" --data $data
# eval reads the same files
expect_exit 2 "$TMP/fifo.npy: the token file is a FIFO" -- timeout 20 "$ZTRAIN" eval --model $fix --data "$TMP/fifo.npy" --block_size 16
finish
