#!/usr/bin/env python3
"""tests/cli/same_checkpoints.py — do two runs leave the same checkpoints and the same
final model?  For the cli tests that hold a run against its synchronous twin
(run_ahead.sh, lazy_read.sh, fp16_fast.sh):

  same_checkpoints.py OUT_A OUT_B [--state KEY,KEY...] NAME...

NAME is a checkpoint directory under each OUT, whose .safetensors files (anywhere below
it: a sharded checkpoint's too) must hold the same tensors, dtype, shape and bytes, and
whose trainer_state.json must agree on each KEY of ztrain's state (by default step,
optimizer_steps, data_position and loss_scaler; Trainer's stateful_callbacks.ztrain); or '.', the final model: the .safetensors files directly
in OUT.  The files' __metadata__ is left out: it names the run, which differs.  Exits 1
naming the first difference."""
import json, os, struct, sys


def tensors(path):
    raw = open(path, 'rb').read()
    n = struct.unpack('<Q', raw[:8])[0]
    head = json.loads(raw[8:8 + n])
    head.pop('__metadata__', None)
    return {k: (v['dtype'], v['shape'], raw[8 + n + v['data_offsets'][0]:8 + n + v['data_offsets'][1]])
            for k, v in head.items()}


def main(argv):
    a, b, rest = argv[0], argv[1], argv[2:]
    keys = ('step', 'optimizer_steps', 'data_position', 'loss_scaler')
    if rest[:1] == ['--state']:
        keys, rest = tuple(rest[1].split(',')), rest[2:]
    if not rest:
        sys.exit('same_checkpoints.py: no checkpoint named')
    for ck in rest:
        da, db = os.path.join(a, ck), os.path.join(b, ck)
        files = sorted(os.path.relpath(os.path.join(r, f), da) for r, _, fs in os.walk(da) for f in fs
                       if f.endswith('.safetensors') and (ck != '.' or r == da))
        if not files:
            sys.exit(f'same_checkpoints.py: no .safetensors in {da}')
        for f in files:
            if not os.path.exists(os.path.join(db, f)):
                sys.exit(f'same_checkpoints.py: {os.path.join(db, f)} is missing')
            ta, tb = tensors(os.path.join(da, f)), tensors(os.path.join(db, f))
            if ta != tb:
                diff = sorted(k for k in set(ta) | set(tb) if ta.get(k) != tb.get(k))
                sys.exit(f'same_checkpoints.py: {ck}/{f}: {len(diff)} tensors differ, first {diff[0]}')
        if ck != '.':
            sa, sb = (json.load(open(os.path.join(d, 'trainer_state.json')))['stateful_callbacks']['ztrain']
                      for d in (da, db))
            for k in keys:
                if sa[k] != sb[k]:
                    sys.exit(f'same_checkpoints.py: {ck}: trainer_state {k}: {sa[k]!r} against {sb[k]!r}')


if __name__ == '__main__':
    main(sys.argv[1:])
