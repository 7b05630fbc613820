# train --adapter DIR (issue 46; docs/lora.md): a PEFT adapter directory read in place of
# PEFT's initialisation.  Its config gives r, alpha, the targets and rsLoRA (the plan line
# shows them); a flag that disagrees is refused naming both values; config keys that change
# LoRA's math and are not built are refused by name, inert ones are ignored; a tensor
# missing, extra, misshapen or of another dtype is refused naming the file and the tensor;
# hostile files (truncated, not JSON) are refused, never a crash; ranks given different
# adapters are refused before they train.  F32, BF16 and F16
# tensors load exactly: at learning rate 0 the adapters written back are the ones read,
# widened to F32 bit for bit; and ztrain's own round trip (write, then --adapter, then
# write) gives identical tensors.
. "$(dirname "$0")/lib.bash"
fix=tests/fixtures/gqa_tied
peft=tests/fixtures/lora/cli/llama/adapter
run=("$ZTRAIN" train --model $fix --data $fix/tokens.npy --block_size 16 --max_steps 1 --threads 1 --peak_gflops 1
     --per_device_train_batch_size 2 --shuffle false --use_peft)
# edit SRC DST PYTHON: a copy of adapter dir SRC as DST, then PYTHON run on it with
# cfg (adapter_config.json as a dict), head (the safetensors header), data (its bytes);
# both written back (offsets recomputed in the header's order)
edit() {
    mkdir -p "$2" && cp "$1"/* "$2"/ && /usr/bin/python3 - "$2" "$3" <<'PY'
import json, struct, sys
d, code = sys.argv[1], sys.argv[2]
cfg = json.load(open(d + "/adapter_config.json"))
with open(d + "/adapter_model.safetensors", "rb") as f:
    head = json.loads(f.read(struct.unpack("<Q", f.read(8))[0]))
    raw = f.read()
meta = head.pop("__metadata__", None)
data = {k: raw[v["data_offsets"][0]:v["data_offsets"][1]] for k, v in head.items()}
def to16(k, dt):  # F32 tensor k as BF16 or F16 (rounded; the test compares against the rounded values)
    xs = struct.unpack("<%df" % (len(data[k]) // 4), data[k])
    if dt == "F16":
        data[k] = struct.pack("<%de" % len(xs), *xs)
    else:
        data[k] = b"".join(struct.pack("<I", (struct.unpack("<I", struct.pack("<f", x))[0] + 0x8000) >> 16)[:2]
                           for x in xs)
    head[k]["dtype"] = dt
exec(code)
json.dump(cfg, open(d + "/adapter_config.json", "w"))
out, off = {}, 0
for k in head:
    head[k]["data_offsets"] = [off, off + len(data[k])]
    off += len(data[k])
if meta is not None:
    head["__metadata__"] = meta
h = json.dumps(head).encode()
open(d + "/adapter_model.safetensors", "wb").write(struct.pack("<Q", len(h)) + h + b"".join(data[k] for k in head if k != "__metadata__"))
PY
}
A0=base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight
# the config's values are the run's
"${run[@]}" --adapter $peft >"$TMP/log" 2>&1 || fail "--adapter $peft: $(tail -3 "$TMP/log")"
grep -q "^lora r=4, alpha=6 (scale 1.5), targets q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj, " "$TMP/log" ||
    fail "the plan line under --adapter: $(grep '^lora' "$TMP/log")"
"${run[@]}" --adapter $peft --lora_r 4 --lora_alpha 6 --lora_target_modules all-linear >"$TMP/log" 2>&1 ||
    fail "flags that agree with the adapter: $(tail -3 "$TMP/log")"
expect_exit 2 "--lora_r 8 disagrees with --adapter $peft: its adapter_config.json has r 4" -- "${run[@]}" --adapter \
    $peft --lora_r 8
expect_exit 2 "--lora_alpha 16 disagrees with --adapter $peft: its adapter_config.json has lora_alpha 6" -- \
    "${run[@]}" --adapter $peft --lora_alpha 16
expect_exit 2 "--use_rslora true disagrees with --adapter $peft: its adapter_config.json has use_rslora false" -- \
    "${run[@]}" --adapter $peft --use_rslora
expect_exit 2 "--lora_target_modules q_proj,v_proj disagrees with --adapter $peft: its adapter_config.json has \
target_modules q_proj,k_proj" -- "${run[@]}" --adapter $peft --lora_target_modules q_proj v_proj
# a YAML key that disagrees is refused as a flag is, naming its file, line and key
printf 'distributed_type: NO\nuse_peft: true\nlora_r: 8\n' >"$TMP/r8.yaml"
expect_exit 2 "$TMP/r8.yaml:3: lora_r 8 disagrees with --adapter $peft: its adapter_config.json has r 4" -- \
    "${run[@]}" --adapter $peft --config_file "$TMP/r8.yaml"
expect_exit 2 "--adapter: LoRA flags need --use_peft" -- "${run[@]:0:${#run[@]}-1}" --adapter $peft
expect_exit 2 "$TMP/none/adapter_config.json" -- "${run[@]}" --adapter "$TMP/none"
# keys that change the math, refused by name; inert and unknown keys ignored
for edit in 'cfg["use_dora"] = True' 'cfg["lora_dropout"] = 1' 'cfg["rank_pattern"] = {"q_proj": 8}' \
    'cfg["alpha_pattern"] = {"q_proj": 8}' 'cfg["layers_to_transform"] = [0]' 'cfg["modules_to_save"] = ["lm_head"]' \
    'cfg["bias"] = "all"' 'cfg["peft_type"] = "IA3"' 'cfg["r"] = 0' 'cfg["r"] = 2.5' 'cfg["lora_alpha"] = "8"' \
    'cfg["target_modules"] = ["q_proj", "lm_head"]' 'cfg["use_rslora"] = 1'; do
    key=$(printf '%s' "$edit" | sed 's/cfg\["\([a-z_]*\)"\].*/\1/')
    rm -rf "$TMP/bad" && edit $peft "$TMP/bad" "$edit"
    expect_exit 2 "$TMP/bad/adapter_config.json: $key" -- "${run[@]}" --adapter "$TMP/bad"
done
rm -rf "$TMP/inert" && edit $peft "$TMP/inert" 'cfg["some_future_key"] = {"x": 1}; cfg["inference_mode"] = False
cfg["init_lora_weights"] = "gaussian"; cfg["loftq_config"] = {"loftq_bits": 4}; cfg["task_type"] = None'
"${run[@]}" --adapter "$TMP/inert" >"$TMP/log" 2>&1 || fail "inert keys refused: $(tail -2 "$TMP/log")"
# the tensors: missing, extra, misshapen, of another dtype; hostile files
st="$TMP/bad/adapter_model.safetensors"
bad_tensors=('del head[A0], data[A0]' "tensor $A0 is missing"
    'head["extra.lora_A.weight"] = dict(head[A0]); data["extra.lora_A.weight"] = data[A0]' "tensor extra.lora_A.weight is not an adapter"
    'head[A0]["shape"] = head[A0]["shape"][::-1]' "tensor $A0: expected shape \[4, 64\], got \[64, 4\]"
    'head[A0]["dtype"] = "I32"' "tensor $A0 has dtype I32; expected F32, BF16 or F16")
for ((i = 0; i < ${#bad_tensors[@]}; i += 2)); do
    rm -rf "$TMP/bad" && edit $peft "$TMP/bad" "A0 = '$A0'; ${bad_tensors[i]}"
    expect_exit 2 "$st: ${bad_tensors[i + 1]}" -- "${run[@]}" --adapter "$TMP/bad"
done
head -c 3000 $peft/adapter_model.safetensors >"$st"
expect_exit 2 "$st" -- "${run[@]}" --adapter "$TMP/bad"
printf '{"r": 4, "lora_alpha": ' >"$TMP/bad/adapter_config.json"
expect_exit 2 "$TMP/bad/adapter_config.json" -- "${run[@]}" --adapter "$TMP/bad"
printf '[1, 2]' >"$TMP/bad/adapter_config.json"
expect_exit 2 "$TMP/bad/adapter_config.json: expected a JSON object" -- "${run[@]}" --adapter "$TMP/bad"
# exact loads: at learning rate 0 the adapters written are the ones read, widened to F32
same() { /usr/bin/python3 - "$1" "$2" <<'PY'
import json, struct, sys
def read(path):
    with open(path + "/adapter_model.safetensors", "rb") as f:
        head = json.loads(f.read(struct.unpack("<Q", f.read(8))[0]))
        raw = f.read()
    head.pop("__metadata__", None)
    out = {}
    for k, v in head.items():
        b = raw[v["data_offsets"][0]:v["data_offsets"][1]]
        if v["dtype"] == "F32":
            out[k] = struct.unpack("<%df" % (len(b) // 4), b)
        elif v["dtype"] == "F16":
            out[k] = struct.unpack("<%de" % (len(b) // 2), b)
        else:
            out[k] = tuple(struct.unpack("<f", b"\0\0" + b[i:i + 2])[0] for i in range(0, len(b), 2))
    return out
a, b = read(sys.argv[1]), read(sys.argv[2])
assert sorted(a) == sorted(b), (sorted(a)[:2], sorted(b)[:2])
bad = [k for k in a if a[k] != b[k]]
assert not bad, bad[:3]
PY
}
rm -rf "$TMP/half" && edit $peft "$TMP/half" 'for i, k in enumerate(sorted(head)): to16(k, "BF16" if i % 2 else "F16")'
for src in $peft "$TMP/half"; do
    rm -rf "$TMP/out"
    "${run[@]}" --adapter $src --learning_rate 0 --output_dir "$TMP/out" >"$TMP/log" 2>&1 ||
        fail "--adapter $src at learning rate 0: $(tail -3 "$TMP/log")"
    same $src "$TMP/out" >"$TMP/cmp" 2>&1 || fail "$src read and written back differ: $(tail -2 "$TMP/cmp")"
done
# ranks that read different adapters stop before any collective moves them
one=("${run[@]:1}" --per_device_train_batch_size 1)
expect_exit 2 "rank 0: rank 1 and rank 0 resolved a different model config \(and LoRA's adapters\)" -- \
    "${mpi[@]}" -np 1 "$ZTRAIN" "${one[@]}" --adapter $peft : -np 1 "$ZTRAIN" "${one[@]}" --adapter "$TMP/half"
# ztrain's own round trip: a trained run's adapters, read and written back unchanged
rm -rf "$TMP/trained" "$TMP/back"
"${run[@]}" --max_steps 2 --learning_rate 1e-3 --lora_r 2 --lora_target_modules q_proj o_proj down_proj \
    --output_dir "$TMP/trained" >"$TMP/log" 2>&1 || fail "a LoRA run: $(tail -3 "$TMP/log")"
"${run[@]}" --adapter "$TMP/trained" --learning_rate 0 --output_dir "$TMP/back" >"$TMP/log" 2>&1 ||
    fail "--adapter on ztrain's own adapters: $(tail -3 "$TMP/log")"
grep -q "^lora r=2, alpha=32 (scale 16), targets q_proj,o_proj,down_proj, " "$TMP/log" ||
    fail "the plan line from ztrain's adapter_config.json: $(grep '^lora' "$TMP/log")"
same "$TMP/trained" "$TMP/back" >"$TMP/cmp" 2>&1 || fail "ztrain's round trip: $(tail -2 "$TMP/cmp")"
finish
