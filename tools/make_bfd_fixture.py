#!/usr/bin/env python3
"""Dev-time: the bins of TRL's best-fit-decreasing packing, to which ztrain's
--packing (src/train/batches.c, zt_batcher_set_packing) must be equal.

TRL 1.16.0's trl.data_utils.pack_dataset(dataset, seq_length, strategy="bfd") (with
datasets 5.2.0) packs a list of examples; example i is made of the token i repeated
len_i times, so the first token of each packed segment names its example.  The
lengths are seeded random (1 .. 1.3 * seq_length: with ties, and some longer than
seq_length, which TRL truncates), fewer than 1000 examples (pack_dataset packs each
batch of datasets' map, 1000 examples by default, on its own).

Writes tests/fixtures/packed/bfd.json:
  {"seq_length", "lengths": [len_i], "bins": [[example ids in the order TRL placed
   them], ...] in TRL's row order, "trl", "datasets"}

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


def main():
    rng = random.Random(45)
    lengths = [rng.randint(1, SEQ * 13 // 10) for _ in range(N)]
    ds = datasets.Dataset.from_dict({"input_ids": [[i] * n for i, n in enumerate(lengths)]})
    packed = pack_dataset(ds, SEQ, strategy="bfd")
    bins = []
    for row in packed:
        ids, at = [], 0
        for n in row["seq_lengths"]:
            ids.append(row["input_ids"][at])
            assert row["input_ids"][at:at + n] == [ids[-1]] * n
            at += n
        assert at == len(row["input_ids"]) <= SEQ
        bins.append(ids)
    assert sorted(i for b in bins for i in b) == list(range(N))
    with open(OUT, "w") as f:
        json.dump({"seq_length": SEQ, "lengths": lengths, "bins": bins, "trl": trl.__version__,
                   "datasets": datasets.__version__}, f)
        f.write("\n")
    print("%d examples into %d bins of %d" % (N, len(bins), SEQ))


if __name__ == "__main__":
    main()
