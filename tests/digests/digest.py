#!/usr/bin/python3
# tests/digests/digest.py DIR JSONL — print two SHA-256 digests of one training run:
#   weights: every tensor of DIR/model.safetensors, in name order, as
#            name, dtype, shape and the raw little-endian bytes (the header's
#            metadata and the order of tensors in the file do not count: they
#            carry no numbers);
#   losses:  per JSONL line, the fields that are numbers of the run (step, loss,
#            grad_norm, lr, loss_scale, skipped) as written; timings, memory
#            and communication counters are left out.
# Used by tests/cli/digests.sh; needs only the Python standard library.
import hashlib, json, struct, sys

def weights_digest(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack_from("<Q", data, 0)
    header = json.loads(data[8:8 + n])
    body = data[8 + n:]
    h = hashlib.sha256()
    for name in sorted(k for k in header if k != "__metadata__"):
        t = header[name]
        lo, hi = t["data_offsets"]
        h.update(f"{name}|{t['dtype']}|{t['shape']}|".encode())
        h.update(body[lo:hi])
    return h.hexdigest()

FIELDS = ("step", "loss", "grad_norm", "lr", "loss_scale", "skipped")

def losses_digest(path):
    h = hashlib.sha256()
    with open(path) as f:
        for line in f:
            # parse_float=str keeps each number exactly as ztrain printed it
            row = json.loads(line, parse_float=str, parse_int=str)
            h.update((" ".join(f"{k}={row.get(k)}" for k in FIELDS) + "\n").encode())
    return h.hexdigest()

if __name__ == "__main__":
    print(weights_digest(sys.argv[1] + "/model.safetensors"), losses_digest(sys.argv[2]))
