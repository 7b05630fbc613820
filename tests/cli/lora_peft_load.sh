# The adapters PEFT loads (issue 46; docs/lora.md): ztrain reruns the fixed LoRA run of
# tools/make_lora_peft_load_fixture.py (its flags in the fixture's metadata), whose
# --output_dir PEFT loaded there with PeftModel.from_pretrained and no warning; the rerun
# writes the same adapters (within 1e-5 of each tensor's largest magnitude: another
# build rounds its products otherwise; the sanitizer build's -O1 without -march=native
# lands 1.5e-6 away on a lora_B, whose values stay small), and ztrain's logits with them (merge-adapter,
# then generate --logits_out, every position of the fixed prompt) are PEFT's within 1e-5
# of the largest logit's magnitude.
. "$(dirname "$0")/lib.bash"
fixture=tests/fixtures/lora/peft_load.safetensors
meta() { /usr/bin/python3 - "$fixture" "$1" <<'PY'
import json, struct, sys
with open(sys.argv[1], "rb") as f:
    print(json.loads(f.read(struct.unpack("<Q", f.read(8))[0]))["__metadata__"][sys.argv[2]])
PY
}
read -ra train_args <<<"$(meta train_args)"
prompt=$(meta prompt)
"$ZTRAIN" train "${train_args[@]}" --output_dir "$TMP/adapter" >"$TMP/log" 2>&1 ||
    fail "the LoRA run: $(tail -3 "$TMP/log")"
model=$(printf '%s\n' "${train_args[@]}" | grep -A1 -x -- --model | tail -1)
"$ZTRAIN" merge-adapter "$model" "$TMP/adapter" "$TMP/merged" >"$TMP/log" 2>&1 ||
    fail "merge-adapter: $(tail -3 "$TMP/log")"
"$ZTRAIN" generate --model "$TMP/merged" --prompt "$prompt" --max_new_tokens 1 --temperature 0 --threads 1 \
    --logits_out "$TMP/logits.safetensors" >"$TMP/log" 2>&1 || fail "generate --logits_out: $(tail -3 "$TMP/log")"
/usr/bin/python3 - "$fixture" "$TMP/adapter/adapter_model.safetensors" "$TMP/logits.safetensors" >"$TMP/cmp" 2>&1 <<'PY' ||
import json, struct, sys
def read(path):
    with open(path, "rb") as f:
        head = json.loads(f.read(struct.unpack("<Q", f.read(8))[0]))
        raw = f.read()
    head.pop("__metadata__", None)
    return {k: (v["shape"], struct.unpack("<%df" % ((v["data_offsets"][1] - v["data_offsets"][0]) // 4),
                                         raw[v["data_offsets"][0]:v["data_offsets"][1]])) for k, v in head.items()}
want, adapters, got = read(sys.argv[1]), read(sys.argv[2]), read(sys.argv[3])
assert sorted(adapters) == sorted(k for k in want if k not in ("logits", "ids")), sorted(adapters)[:2]
for k, (shape, vals) in adapters.items():
    big = max(abs(x) for x in want[k][1])
    worst = max(abs(a - b) for a, b in zip(vals, want[k][1])) / big
    assert worst <= 1e-5, ("the rerun wrote other adapters", k, worst)
n, V = want["logits"][0]
assert got["ids"][1][:n] == want["ids"][1], (got["ids"][1], want["ids"][1])
w, g = want["logits"][1], got["logits"][1][:n * V]
big = max(abs(x) for x in w)
worst = max(abs(a - b) for a, b in zip(g, w)) / big
assert worst <= 1e-5, ("logits", worst)
print("logits: %.2g of the largest (%.3g)" % (worst, big))
PY
    fail "against PEFT: $(tail -3 "$TMP/cmp")"
finish
