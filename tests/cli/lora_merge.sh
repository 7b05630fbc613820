# ztrain merge-adapter BASE ADAPTER OUT (issue 46; docs/lora.md): the adapters PEFT saved
# (tests/fixtures/lora/cli/qwen2/adapter: q, v and down at r 2, rsLoRA) merged into the
# fp32 base give PEFT's merge_and_unload() (tests/fixtures/lora/merge/qwen2.safetensors,
# tools/make_lora_model_fixture.py) within 1e-6 of each tensor's largest magnitude; every
# other tensor is the base's bit for bit, in the base's dtype; config.json is the base's
# model; ztrain reads the merged directory back as a model.  Bad arguments are refused
# with exit 2, naming them, and nothing is written.  A bf16 base gives a bf16 model, within
# one bf16 ulp of PEFT's merge in bf16.
. "$(dirname "$0")/lib.bash"
base=tests/fixtures/qwen2_bias
adapter=tests/fixtures/lora/cli/qwen2/adapter
"$ZTRAIN" merge-adapter $base $adapter "$TMP/out" >"$TMP/log" 2>&1 || fail "merge-adapter: $(tail -3 "$TMP/log")"
/usr/bin/python3 - "$TMP/out/model.safetensors" $base/model.safetensors tests/fixtures/lora/merge/qwen2.safetensors \
    >"$TMP/cmp" 2>&1 <<'PY' || fail "the merged weights: $(tail -3 "$TMP/cmp")"
import json, struct, sys
def read(path):
    with open(path, "rb") as f:
        head = json.loads(f.read(struct.unpack("<Q", f.read(8))[0]))
        raw = f.read()
    head.pop("__metadata__", None)
    return {k: (v["dtype"], v["shape"], raw[v["data_offsets"][0]:v["data_offsets"][1]]) for k, v in head.items()}
got, base, want = read(sys.argv[1]), read(sys.argv[2]), read(sys.argv[3])
assert sorted(got) == sorted(base), (sorted(got)[:3], sorted(base)[:3])
for k, (dt, shape, b) in got.items():
    assert (dt, shape) == base[k][:2], (k, dt, shape, base[k][:2])
    if k not in want:
        assert b == base[k][2], k + " changed, which no adapter targets"
        continue
    g = struct.unpack("<%df" % (len(b) // 4), b)
    w = struct.unpack("<%df" % (len(b) // 4), want[k][2])
    big = max(abs(x) for x in w)
    worst = max(abs(x - y) for x, y in zip(g, w)) / big
    assert worst <= 1e-6, (k, worst)
    assert b != base[k][2], k + " is the base's: the adapter was not merged"
PY
# a bf16 base (the fixture rounded to nearest even, as torch's .to(bfloat16)): the merged
# model is bf16, every tensor within one bf16 ulp of PEFT's merge in bf16 (which rounds
# the delta to bf16 before its bf16 add, ztrain once after an fp32 add; measured: equal)
mkdir -p "$TMP/b16" && /usr/bin/python3 - $base "$TMP/b16" <<'PY' || fail "making the bf16 base"
import json, struct, sys
src, dst = sys.argv[1:]
cfg = json.load(open(src + "/config.json"))
cfg["torch_dtype"] = "bfloat16"
json.dump(cfg, open(dst + "/config.json", "w"))
with open(src + "/model.safetensors", "rb") as f:
    head = json.loads(f.read(struct.unpack("<Q", f.read(8))[0]))
    raw = f.read()
meta = head.pop("__metadata__", None)
out, off = [], 0
for k, v in sorted(head.items(), key=lambda kv: kv[1]["data_offsets"][0]):
    b = raw[v["data_offsets"][0]:v["data_offsets"][1]]
    us = struct.unpack("<%dI" % (len(b) // 4), b)
    h = struct.pack("<%dH" % len(us), *(((u + 0x7FFF + ((u >> 16) & 1)) >> 16) & 0xFFFF for u in us))
    v.update(dtype="BF16", data_offsets=[off, off + len(h)])
    off += len(h)
    out.append(h)
if meta is not None:
    head["__metadata__"] = meta
hb = json.dumps(head).encode()
open(dst + "/model.safetensors", "wb").write(struct.pack("<Q", len(hb)) + hb + b"".join(out))
PY
"$ZTRAIN" merge-adapter "$TMP/b16" $adapter "$TMP/out16" >"$TMP/log" 2>&1 || fail "merge-adapter, bf16: $(tail -3 "$TMP/log")"
/usr/bin/python3 - "$TMP/out16/model.safetensors" "$TMP/b16/model.safetensors" \
    tests/fixtures/lora/merge/qwen2_bf16.safetensors >"$TMP/cmp" 2>&1 <<'PY' || fail "the bf16 merge: $(tail -3 "$TMP/cmp")"
import json, struct, sys
def read(path):
    with open(path, "rb") as f:
        head = json.loads(f.read(struct.unpack("<Q", f.read(8))[0]))
        raw = f.read()
    head.pop("__metadata__", None)
    return {k: (v["dtype"], raw[v["data_offsets"][0]:v["data_offsets"][1]]) for k, v in head.items()}
got, base, want = read(sys.argv[1]), read(sys.argv[2]), read(sys.argv[3])
assert sorted(got) == sorted(base)
for k, (dt, b) in got.items():
    assert dt == "BF16", (k, dt)
    if k not in want:
        assert b == base[k][1], k + " changed, which no adapter targets"
        continue
    assert want[k][0] == "BF16" and b != base[k][1], k
    g, w = (struct.unpack("<%dh" % (len(x) // 2), x) for x in (b, want[k][1]))
    assert all(abs(x - y) <= 1 for x, y in zip(g, w)), (k, "more than one bf16 ulp from PEFT's merge")
PY
"$ZTRAIN" eval --model "$TMP/out" --data $base/tokens.npy --block_size 16 --threads 1 >"$TMP/log" 2>&1 ||
    fail "ztrain eval on the merged model: $(tail -3 "$TMP/log")"
/usr/bin/python3 -c 'import json, sys; a, b = (json.load(open(p)) for p in sys.argv[1:]); \
    assert all(a[k] == b[k] for k in ("hidden_size", "num_hidden_layers", "vocab_size", "model_type")), (a, b)' \
    "$TMP/out/config.json" $base/config.json || fail "the merged config.json is not the base's model"
"$ZTRAIN" --help | grep -q "^  merge-adapter " || fail "ztrain --help does not list merge-adapter"
"$ZTRAIN" merge-adapter --help | grep -q "^usage: ztrain merge-adapter BASE_MODEL_DIR ADAPTER_DIR OUTPUT_DIR" ||
    fail "merge-adapter --help"
usage="usage: ztrain merge-adapter BASE_MODEL_DIR ADAPTER_DIR OUTPUT_DIR"
expect_exit 2 "$usage" -- "$ZTRAIN" merge-adapter $base $adapter
expect_exit 2 "$usage" -- "$ZTRAIN" merge-adapter $base $adapter --max_shard_size 1GB
expect_exit 2 "$TMP/none" -- "$ZTRAIN" merge-adapter "$TMP/none" $adapter "$TMP/o1"
expect_exit 2 "$TMP/none/adapter_config.json" -- "$ZTRAIN" merge-adapter $base "$TMP/none" "$TMP/o2"
expect_exit 2 "OUTPUT_DIR $base is the base model's directory" -- "$ZTRAIN" merge-adapter $base $adapter $base
expect_exit 2 "adapter_model.safetensors: tensor base_model.model.model.layers.0.mlp.down_proj.lora_A.weight: expected shape \\[2, 172\\], got \\[2, 64\\]" -- \
    "$ZTRAIN" merge-adapter tests/fixtures/gqa_tied $adapter "$TMP/o3"
expect_exit 2 "max_shard_size" -- "$ZTRAIN" merge-adapter $base $adapter "$TMP/o4" --max_shard_size lots
[ ! -e "$TMP/o1" ] && [ ! -e "$TMP/o2" ] && [ ! -e "$TMP/o3" ] && [ ! -e "$TMP/o4" ] ||
    fail "a refused merge left an output directory: $(ls -d "$TMP"/o* 2>/dev/null)"
finish
