#!/usr/bin/env python3
"""tests/cli/same_checkpoints.py — the tests' one notion of "the same checkpoint", for
the cli tests that hold a run against its twin or a saved model against another
(through lib.bash's same_checkpoint: run_ahead.sh, lazy_read.sh, fp16_fast.sh,
graphs.sh, graphs_ranks.sh, mode_parts.sh, offload.sh, checkpoints.sh,
merge_weights.sh, offload_dpu.sh, selection.sh):

  same_checkpoints.py OUT_A OUT_B NAME...    NAME: a directory under each OUT, or '.'
  same_checkpoints.py DIR_A DIR_B            two checkpoint directories
  same_checkpoints.py FILE_A FILE_B          two files (a checkpoint's model against a
                                             final model or a merge, say)

Two checkpoints are the same when they hold the same files and each file says the
same, all but what names the run, which each run draws or is given for itself:
  - a .safetensors file: the same tensors (dtype, shape, bytes) in the same header
    order; its __metadata__ (the run's id) left out;
  - a JSON file: the same document once the keys run_id and command_line are left
    out, wherever they sit (trainer_state.json, zero/index.json);
  - manifest.json: the same list of files (its hashes and sizes cover the run's id
    and command line; the files themselves are compared here);
  - any other file: the same bytes.
NAME '.' is a run's final model: the .safetensors files directly in OUT.  Exits 1
naming the first difference."""
import json, os, struct, sys

RUN_KEYS = ('run_id', 'command_line')


def tensors(path):
    raw = open(path, 'rb').read()
    n = struct.unpack('<Q', raw[:8])[0]
    head = json.loads(raw[8:8 + n])
    head.pop('__metadata__', None)
    return [(k, v['dtype'], v['shape'], raw[8 + n + v['data_offsets'][0]:8 + n + v['data_offsets'][1]])
            for k, v in head.items()]


def without_run(doc):
    if isinstance(doc, dict):
        return {k: without_run(v) for k, v in doc.items() if k not in RUN_KEYS}
    if isinstance(doc, list):
        return [without_run(v) for v in doc]
    return doc


def content(path):
    name = os.path.basename(path)
    if name.endswith('.safetensors'):
        return tensors(path)
    if name == 'manifest.json':
        return sorted(json.load(open(path))['files'])
    if name.endswith('.json'):
        return without_run(json.load(open(path)))
    return open(path, 'rb').read()


def differs(da, db, final_model):
    def files(d):
        return sorted(os.path.relpath(os.path.join(r, f), d) for r, _, fs in os.walk(d) for f in fs
                      if not final_model or (r == d and f.endswith('.safetensors')))
    fa, fb = files(da), files(db)
    if not fa:
        return f'no files in {da}'
    if fa != fb:
        return f'{da} and {db} hold different files: {sorted(set(fa) ^ set(fb))}'
    for f in fa:
        ca, cb = content(os.path.join(da, f)), content(os.path.join(db, f))
        if ca != cb:
            if isinstance(ca, list) and ca and isinstance(ca[0], tuple):
                first = next((x[0] for x, y in zip(ca, cb) if x != y), 'the tensor list')
                return f'{f}: tensors differ, first {first}'
            return f'{f} differs'
    return None


def main(argv):
    if len(argv) < 2:
        sys.exit(__doc__)
    a, b, names = argv[0], argv[1], argv[2:]
    if not names and os.path.isfile(a):
        if not os.path.isfile(b) or content(a) != content(b):
            sys.exit(f'same_checkpoints.py: {a} and {b} differ')
        return
    pairs = [(os.path.join(a, n), os.path.join(b, n), n == '.') for n in names] or [(a, b, False)]
    for da, db, final_model in pairs:
        why = differs(da, db, final_model)
        if why:
            sys.exit(f'same_checkpoints.py: {why}')


if __name__ == '__main__':
    main(sys.argv[1:])
