#!/usr/bin/env python3
"""tests/cli/smollm2_parity.py — ztrain's numbers on SmolLM2-135M-Instruct against
transformers' (tests/fixtures/smollm2, written by tools/make_smollm2_fixtures.py):

  smollm2_parity.py FIXTURES EVAL_JSON TRAIN_JSONL MODEL_SAFETENSORS GENERATED_TEXT

eval loss and the 3 steps' losses and grad norms within 1e-5 relative, the sampled
weights after the 3 steps within 1e-5 absolute (the reference trained in float64; its
fp32 run is within 2.2e-6 of it), and the 64 greedy tokens' text equal.  Prints each
figure; exits 1 naming the first that is off."""
import json, struct, sys

import numpy as np

TOL = 1e-5


def tensors(path):
    raw = open(path, 'rb').read()
    n = struct.unpack('<Q', raw[:8])[0]
    head = json.loads(raw[8:8 + n])
    head.pop('__metadata__', None)
    out = {}
    for k, v in head.items():
        assert v['dtype'] == 'F32', '%s: %s is %s, not F32' % (path, k, v['dtype'])
        a, b = v['data_offsets']
        out[k] = np.frombuffer(raw[8 + n + a:8 + n + b], dtype='<f4')
    return out


def main(fix, eval_json, train_jsonl, model, generated):
    ref = json.load(open(fix + '/reference.json'))
    bad = []

    def rel(name, got, want):
        r = abs(got - want) / abs(want)
        print('%s: ztrain %.9g, transformers %.9g, relative %.2g' % (name, got, want, r))
        if not r <= TOL:
            bad.append(name)

    rel('eval loss', json.load(open(eval_json))['eval_loss'], ref['eval_loss'])
    steps = [json.loads(line) for line in open(train_jsonl) if '"step"' in line]
    if len(steps) != 3:
        bad.append('train log has %d steps, want 3' % len(steps))
    for s, rec in enumerate(steps[:3]):
        rel('step %d loss' % (s + 1), rec['loss'], ref['losses'][s])
        rel('step %d grad norm' % (s + 1), rec['grad_norm'], ref['grad_norms'][s])
    w = tensors(model)
    index = np.load(fix + '/sample_index.npy')
    before, after = np.load(fix + '/sample_before.npy'), np.load(fix + '/sample_after.npy')
    if sorted(w) != ref['sample_names']:
        bad.append('tensor names: %s' % sorted(set(w) ^ set(ref['sample_names'])))
    else:
        got = np.stack([w[n][index[i]] for i, n in enumerate(ref['sample_names'])]).astype(np.float64)
        diff = np.abs(got - after)
        worst = np.unravel_index(np.argmax(diff), diff.shape)
        print('weights after 3 steps (%d tensors x %d samples): max |ztrain - transformers| %.2g (%s), '
              'median update %.2g' % (diff.shape[0], diff.shape[1], diff.max(), ref['sample_names'][worst[0]],
                                      np.median(np.abs(after - before))))
        if not diff.max() <= TOL:
            bad.append('weights')
    text = open(generated, encoding='utf-8').read()
    if text.rstrip('\n') != ref['generated_text'].rstrip('\n'):
        i = next((k for k in range(min(len(text), len(ref['generated_text'])))
                  if text[k] != ref['generated_text'][k]), None)
        print('greedy continuation differs at character %s:\n  ztrain:       %r\n  transformers: %r'
              % (i, text, ref['generated_text']))
        bad.append('generation')
    else:
        print('greedy continuation: the same 64 tokens\' text')
    if bad:
        print('FAIL: ' + ', '.join(bad))
        return 1
    return 0


if __name__ == '__main__':
    sys.exit(main(*sys.argv[1:]))
