"""st_f32.py — a safetensors file's F32 tensors as flat tuples, for the shell tests'
Python checks (import with sys.path holding tests/cli).  Only what those checks need:
the 8-byte header length, the JSON header, the data; every tensor read as F32."""
import json
import struct


def f32_tensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        head = json.loads(f.read(n))
        data = f.read()
    head.pop("__metadata__", None)
    return {k: struct.unpack("<%df" % ((v["data_offsets"][1] - v["data_offsets"][0]) // 4),
                             data[v["data_offsets"][0]:v["data_offsets"][1]]) for k, v in head.items()}
