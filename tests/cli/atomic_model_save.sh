# Every model write is atomic (issue 44, point 1): a save over an existing model
# that fails at any shard, through a full disk (a tmpfs the test mounts and fills
# to the byte) or a file size limit (ulimit -f), leaves the previous model byte
# for byte and loadable, and no staged file behind.  merge-weights is failed at
# each of its 3 shards in turn; train's final save and init-model at one.
# In a directory holding both model.safetensors and an index, the one file is
# loaded, as transformers does, with a note (point 6).
# A save that succeeds over the old model then replaces it whole.
. "$(dirname "$0")/lib.bash"
export PMIX_MCA_gds=hash
fix=tests/fixtures/gqa_tied
args=(--data $fix/tokens.npy --block_size 16 --per_device_train_batch_size 1 --threads 1 --peak_gflops 1
      --progress false --max_shard_size 200KB)
mounts=()
trap 'for m in "${mounts[@]}"; do umount "$m" 2>/dev/null; done; rm -rf "$TMP"' EXIT
"$ZTRAIN" train --model $fix "${args[@]}" --max_steps 3 --save_steps 1 --output_dir "$TMP/run" > "$TMP/run.log" 2>&1 ||
    fail "training the checkpoints: $(tail -3 "$TMP/run.log")"
"$ZTRAIN" merge-weights "$TMP/run/checkpoint-2" "$TMP/ref" --max_shard_size 200KB > /dev/null 2>&1 || fail "merge step 2"
"$ZTRAIN" merge-weights "$TMP/run/checkpoint-3" "$TMP/new" --max_shard_size 200KB > /dev/null 2>&1 || fail "merge step 3"
[ "$(cd "$TMP/ref" && ls model-* | wc -l)" -eq 3 ] || fail "the reference should have 3 shards: $(ls "$TMP/ref")"
cmp -s "$TMP/ref/model-00001-of-00003.safetensors" "$TMP/new/model-00001-of-00003.safetensors" &&
    fail "steps 2 and 3 should differ in shard 1"

# same_model DIR REF: DIR holds REF's model files byte for byte, nothing staged
same_model() {
    local f
    for f in $(cd "$2" && ls config.json model*); do
        cmp -s "$1/$f" "$2/$f" || { echo "$f differs from the previous model's"; return 1; }
    done
    [ "$(cd "$1" && ls model* | tr '\n' ' ')" = "$(cd "$2" && ls model* | tr '\n' ' ')" ] ||
        { echo "model files $(cd "$1" && ls model* | tr '\n' ' ')"; return 1; }
    ! ls -a "$1" | grep -q 'zstage\|ztmp' || { echo "staged files left: $(ls -a "$1")"; return 1; }
}
eval_loss() {
    "$ZTRAIN" eval --model "$1" --data $fix/tokens.npy --block_size 16 --threads 1 2>&1 | grep -o 'loss [0-9.]*'
}
ref_loss=$(eval_loss "$TMP/ref")
[ -n "$ref_loss" ] || fail "eval of the reference gives no loss"
size() { stat -c %s "$1"; }
pages() { echo $(( ($1 + 4095) / 4096 * 4096 )); }

# full_disk NAME K COMMAND...: DIR=$TMP/NAME/out holds the step-2 model on a
# tmpfs with room for the new config.json, the new shards before K and half of
# shard K; COMMAND (writing into DIR) must fail naming shard K, DIR unchanged
full_disk() {
    local name=$1 k=$2 m="$TMP/$1"
    shift 2
    mkdir -p "$m"
    mount -t tmpfs -o size=8m tmpfs "$m" || { fail "cannot mount a tmpfs (the test needs root)"; return; }
    mounts+=("$m")
    cp -r "$TMP/ref" "$m/out"
    local want=$(pages $(size "$TMP/new/config.json"))
    local j p
    for j in $(seq 1 $((k - 1))); do
        p=$(pages $(size "$TMP/new/model-0000$j-of-00003.safetensors"))
        want=$((want + p))
    done
    want=$((want + $(size "$TMP/new/model-0000$k-of-00003.safetensors") / 2))
    local avail=$(df --output=avail -B1 "$m" | tail -1)
    head -c $((avail - want)) /dev/zero > "$m/filler" 2>/dev/null
    local out rc
    out=$("$@" 2>&1); rc=$?
    [ "$rc" -eq 1 ] || fail "$name: exit $rc (want 1): $out"
    printf '%s' "$out" | grep -q "model-0000$k-of-00003.safetensors.*No space left on device" ||
        fail "$name: the error does not name shard $k and the full disk: $out"
    local why
    why=$(same_model "$m/out" "$TMP/ref") || fail "$name: $why"
    [ "$(eval_loss "$m/out")" = "$ref_loss" ] || fail "$name: the model left does not load as the previous one"
    umount "$m"
}
for k in 1 2 3; do
    full_disk merge_full$k $k "$ZTRAIN" merge-weights "$TMP/run/checkpoint-3" "$TMP/merge_full$k/out" --max_shard_size 200KB
done
full_disk train_full 2 "$ZTRAIN" train --model "$TMP/run/checkpoint-2" "${args[@]}" --max_steps 1 --save_strategy no \
    --output_dir "$TMP/train_full/out"

# a file size limit: it stops the first shard larger than it, whichever that is
hit=""
for k in 1 2 3; do
    s=$(size "$TMP/new/model-0000$k-of-00003.safetensors")
    cp -r "$TMP/ref" "$TMP/lim$k"
    out=$( (ulimit -f $(( (s - 1) / 1024 )); exec "$ZTRAIN" merge-weights "$TMP/run/checkpoint-3" "$TMP/lim$k" \
           --max_shard_size 200KB) 2>&1); rc=$?
    [ "$rc" -eq 1 ] || fail "ulimit -f below shard $k: exit $rc (want 1): $out"
    j=$(printf '%s' "$out" | grep -o 'model-0000[0-9]-of-00003.safetensors.*File too large' | head -1 | cut -c11)
    [ -n "$j" ] || fail "ulimit -f below shard $k: the error names no shard: $out"
    hit="$hit$j"
    why=$(same_model "$TMP/lim$k" "$TMP/ref") || fail "ulimit -f below shard $k: $why"
done
echo "  ulimit -f stopped shards: $hit"
# init-model over a model, limited below its first shard
cp -r "$TMP/ref" "$TMP/init"
out=$( (ulimit -f 100; exec "$ZTRAIN" init-model --model_config $fix/config.json --output_dir "$TMP/init" \
       --max_shard_size 200KB) 2>&1) && fail "init-model under ulimit -f should fail: $out"
why=$(same_model "$TMP/init" "$TMP/ref") || fail "init-model under ulimit -f: $why"

# Both formats in one directory (point 6): model.safetensors wins, as in
# transformers' from_pretrained (which looks for it before the index), with a note
"$ZTRAIN" merge-weights "$TMP/run/checkpoint-3" "$TMP/one" > /dev/null 2>&1 || fail "merge into one file"
cp -r "$TMP/ref" "$TMP/both"
cp "$TMP/one/model.safetensors" "$TMP/both/"
out=$("$ZTRAIN" eval --model "$TMP/both" --data $fix/tokens.npy --block_size 16 --threads 1 2>&1)
[ "$(printf '%s' "$out" | grep -o 'loss [0-9.]*')" = "$(eval_loss "$TMP/one")" ] ||
    fail "both formats: model.safetensors should be loaded: $out"
printf '%s' "$out" | grep -q "both model.safetensors and model.safetensors.index.json: loading model.safetensors" ||
    fail "both formats: no note says which was loaded: $out"

# and a save that succeeds replaces the model whole
"$ZTRAIN" merge-weights "$TMP/run/checkpoint-3" "$TMP/lim1" --max_shard_size 200KB > /dev/null 2>&1 || fail "merge over"
why=$(same_model "$TMP/lim1" "$TMP/new") || fail "a successful merge over the old model: $why"
finish
