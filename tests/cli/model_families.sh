# Llama 3.1's rope_scaling (tests/fixtures/llama3_rope) and Qwen2's q/k/v biases
# (tests/fixtures/qwen2_bias) through the command line: each trains on one rank and
# sharded (ZeRO-3 over 2 ranks, the biases carved into the layer units' flat buffers)
# to the same losses, and on the emulated device to the CPU's bits; the trained model, its checkpoint and the merged checkpoint keep
# rope_scaling / the Qwen2 class in config.json and the biases under their Hugging Face
# names; they evaluate (generation against transformers: tests/test_generate.c).  Other RoPE types and Qwen2's sliding window are
# refused by name.  (Parity with transformers: tests/test_parity.c, test_generate.c.)
. "$(dirname "$0")/lib.bash"
args=(--block_size 32 --max_steps 2 --threads 1 --peak_gflops 1000 --learning_rate 1e-3)
loss() { grep -o '"loss": [^,]*' "$1" | awk '{print $2}' | tr '\n' ' '; }
for fam in llama3_rope qwen2_bias; do
    fix=tests/fixtures/$fam
    "$ZTRAIN" train --model $fix --data $fix/tokens.npy "${args[@]}" --per_device_train_batch_size 2 \
        --save_steps 1 --output_dir "$TMP/$fam" --log_jsonl "$TMP/$fam.jsonl" >"$TMP/log" 2>&1 ||
        { fail "$fam: train: $(tail -3 "$TMP/log")"; continue; }
    "$ZTRAIN" launch --num_processes 2 train --model $fix --data $fix/tokens.npy "${args[@]}" \
        --per_device_train_batch_size 1 --use_fsdp --fsdp_sharding_strategy FULL_SHARD \
        --log_jsonl "$TMP/$fam.z3.jsonl" >"$TMP/log" 2>&1 || fail "$fam: ZeRO-3 on 2 ranks: $(tail -3 "$TMP/log")"
    # the emulated device (CPU kernels behind opaque buffers: the bias and RoPE-table
    # entries of its table) gives the CPU's losses bit for bit
    "$ZTRAIN" train --model $fix --data $fix/tokens.npy "${args[@]}" --per_device_train_batch_size 2 \
        --device emu --log_jsonl "$TMP/$fam.emu.jsonl" >"$TMP/log" 2>&1 || fail "$fam: --device emu: $(tail -3 "$TMP/log")"
    [ "$(loss "$TMP/$fam.emu.jsonl")" = "$(loss "$TMP/$fam.jsonl")" ] ||
        fail "$fam: --device emu losses $(loss "$TMP/$fam.emu.jsonl") are not the CPU's $(loss "$TMP/$fam.jsonl")"
    one=$(loss "$TMP/$fam.jsonl") two=$(loss "$TMP/$fam.z3.jsonl")
    # the same global batch: equal up to the order of the gradient sums
    awk -v a="$one" -v b="$two" 'BEGIN { n = split(a, x); m = split(b, y); if (n != 2 || m != 2) exit 1;
        for (i = 1; i <= n; i++) { d = x[i] - y[i]; if (d < 0) d = -d; if (d > 1e-5 * x[i]) exit 1 } }' ||
        fail "$fam: losses on 1 rank ($one) and ZeRO-3 on 2 ranks ($two) differ"
    "$ZTRAIN" merge-weights "$TMP/$fam/checkpoint-1" "$TMP/$fam.merged" >/dev/null 2>&1 || fail "$fam: merge-weights"
    for d in "$TMP/$fam" "$TMP/$fam/checkpoint-1" "$TMP/$fam.merged"; do
        [ -f "$d/config.json" ] || { fail "$d: no config.json"; continue; }
        if [ $fam = llama3_rope ]; then
            # every key of the fixture's config.json comes back with its value and
            # its JSON type: 8.0 stays a float (transformers checks the llama3
            # factors' types), 64 an integer, the keys ztrain does not use as they were
            python3 - $fix/config.json "$d/config.json" <<'PY' || fail "$d/config.json does not keep the fixture's keys: $(cat "$d/config.json")"
import json, sys
src, out = (json.load(open(p)) for p in sys.argv[1:])
def same(a, b):  # equal values of the same JSON types (True is not 1, 8 is not 8.0)
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(map(same, a, b))
    return a == b
bad = [k for k in src if k not in out or not same(src[k], out[k])]
if bad:
    sys.exit("differ: " + ", ".join("%s %r -> %r" % (k, src[k], out.get(k, "(missing)")) for k in bad))
PY
            grep -q '"LlamaForCausalLM"' "$d/config.json" || fail "$d/config.json: not LlamaForCausalLM"
        else
            grep -q '"Qwen2ForCausalLM"' "$d/config.json" && grep -Eq '"model_type":[[:space:]]*"qwen2"' "$d/config.json" ||
                fail "$d/config.json lost the Qwen2 class: $(cat "$d/config.json")"
            head -c 4096 "$d/model.safetensors" | grep -aq '"model.layers.1.self_attn.v_proj.bias"' ||
                fail "$d/model.safetensors has no v_proj.bias"
        fi
    done
    "$ZTRAIN" eval --model "$TMP/$fam" --data $fix/tokens.npy --block_size 32 --threads 1 >"$TMP/ev" 2>&1 ||
        fail "$fam: eval of the trained model: $(cat "$TMP/ev")"
    "$ZTRAIN" eval --model "$TMP/$fam.merged" --data $fix/tokens.npy --block_size 32 --threads 1 >"$TMP/ev2" 2>&1 ||
        fail "$fam: eval of the merged checkpoint: $(cat "$TMP/ev2")"
done

# refused by name, with what is allowed
fix=tests/fixtures/llama3_rope
sed 's/"rope_type": "llama3"/"rope_type": "yarn"/' $fix/config.json >"$TMP/yarn.json"
expect_exit 2 'yarn.json: key "rope_scaling.rope_type" \(got "yarn"\) is not supported \(allowed: "default", "llama3"\)' -- \
    "$ZTRAIN" init-model --model_config "$TMP/yarn.json" --output_dir "$TMP/x"
sed 's/"use_sliding_window": false/"use_sliding_window": true/' tests/fixtures/qwen2_bias/config.json >"$TMP/swa.json"
expect_exit 2 'swa.json: key "use_sliding_window": only false is supported' -- \
    "$ZTRAIN" init-model --model_config "$TMP/swa.json" --output_dir "$TMP/x"
# init-model of a Qwen2 config: biases start at 0 (HF's _init_weights), and it trains
"$ZTRAIN" init-model --model_config tests/fixtures/qwen2_bias/config.json --output_dir "$TMP/init" >/dev/null 2>&1 ||
    fail "init-model of a Qwen2 config"
head -c 4096 "$TMP/init/model.safetensors" | grep -aq '"model.layers.0.self_attn.q_proj.bias"' || fail "init-model: no q_proj.bias"
finish
