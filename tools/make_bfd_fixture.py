#!/usr/bin/env python3
"""Dev-time: the bins of TRL's best-fit-decreasing packing, to which ztrain's
--packing (src/train/batches.c, zt_batcher_set_packing) must be equal.

TRL 1.16.0's trl.data_utils.pack_dataset(dataset, seq_length, strategy) (with
datasets 5.2.0) packs a list of examples, with strategy "bfd" (an example longer
than seq_length truncated) and "bfd_split" (cut into pieces of seq_length, the last
shorter); token k of example i is i * 1000 + k, so the first token of each packed
segment names its example and where in it the segment starts.  The lengths are
seeded random (1 .. 1.3 * seq_length: with ties, and some longer than seq_length),
fewer than 1000 examples (pack_dataset packs each batch of datasets' map, 1000
examples by default, on its own).

Writes tests/fixtures/packed/bfd.json:
  {"seq_length", "lengths": [len_i], "bfd" and "bfd_split": the bins in TRL's row
   order, each a list of [example, first token, length] in the order TRL placed
   them, "trl", "datasets"}

    OMP_NUM_THREADS=1 /work/devvenv/bin/python tools/make_bfd_fixture.py
"""
import json
import os
import random

import datasets
import trl
from trl.data_utils import pack_dataset

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "fixtures", "packed", "bfd.json")
SEQ = 64
N = 300


def bins_of(ds, strategy):
    bins = []
    for row in pack_dataset(ds, SEQ, strategy=strategy):
        segs, at = [], 0
        for n in row["seq_lengths"]:
            i, k = divmod(row["input_ids"][at], 1000)
            assert row["input_ids"][at:at + n] == [i * 1000 + k + j for j in range(n)]
            segs.append([i, k, n])
            at += n
        assert at == len(row["input_ids"]) <= SEQ
        bins.append(segs)
    return bins


def main():
    rng = random.Random(45)
    lengths = [rng.randint(1, SEQ * 13 // 10) for _ in range(N)]
    ds = datasets.Dataset.from_dict({"input_ids": [[i * 1000 + k for k in range(n)] for i, n in enumerate(lengths)]})
    out = {"seq_length": SEQ, "lengths": lengths}
    for strategy in ("bfd", "bfd_split"):
        out[strategy] = bins_of(ds, strategy)
        print("%s: %d examples into %d bins of %d" % (strategy, N, len(out[strategy]), SEQ))
    assert sorted(s[0] for b in out["bfd"] for s in b) == list(range(N))
    out.update({"trl": trl.__version__, "datasets": datasets.__version__})
    with open(OUT, "w") as f:
        json.dump(out, f)
        f.write("\n")


if __name__ == "__main__":
    main()
