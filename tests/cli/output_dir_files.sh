# Every output path is checked before the first step (issue 44, point 2): a
# FIFO, a directory or a socket where the final save will write a file of the
# model (config.json, the weights, a shard, the tokenizer's files) is refused
# with exit 2 naming it, before training starts (no "step" line, no model
# written beside it), and nothing blocks (20 s timeout: exit 124).
. "$(dirname "$0")/lib.bash"
fix=tests/fixtures/gqa_tied
train() {
    timeout 20 "$ZTRAIN" train --model $fix --data $fix/tokens.npy --threads 1 --block_size 16 \
        --per_device_train_batch_size 1 --peak_gflops 1 --progress false --max_steps 200 --logging_steps 1 "$@"
}
i=0
for name in config.json tokenizer.json model.safetensors model.safetensors.index.json \
            model-00002-of-00003.safetensors generation_config.json; do
    for kind in fifo dir socket; do
        i=$((i + 1))
        od="$TMP/od$i"
        mkdir -p "$od"
        case $kind in
            fifo) mkfifo "$od/$name" ;;
            dir) mkdir "$od/$name" ;;
            socket) /usr/bin/python3 -c 'import socket,sys; socket.socket(socket.AF_UNIX).bind(sys.argv[1])' "$od/$name" ;;
        esac
        out=$(train --output_dir "$od" 2>&1)
        rc=$?
        [ "$rc" -eq 2 ] || { fail "$name as a $kind: exit $rc (want 2): $(printf '%s' "$out" | tail -2)"; continue; }
        printf '%s' "$out" | grep -q "$od/$name: .*not a regular file" || fail "$name as a $kind: not named: $out"
        printf '%s' "$out" | grep -q '"step"\|^step\|trained' && fail "$name as a $kind: trained before refusing: $out"
        ls "$od" | grep -q '^model.*safetensors$' && [ "$name" != model.safetensors ] &&
            [ "$name" != model-00002-of-00003.safetensors ] && fail "$name as a $kind: a model was written: $(ls "$od")"
    done
done
# and a regular file, or a symlink to one, in the same place is replaced as before
od="$TMP/ok"
mkdir -p "$od"
echo '{}' > "$od/tokenizer.json.target"
ln -s tokenizer.json.target "$od/tokenizer.json"
echo old > "$od/config.json"
train --output_dir "$od" --max_steps 1 > /dev/null 2>&1 || fail "regular files in --output_dir should be replaced"
grep -q '"hidden_size"' "$od/config.json" || fail "config.json was not replaced"
finish
