#!/usr/bin/env bash
# plot.sh — `ztrain plot LOG.jsonl --output FILE.svg` on a real training log with
# evaluations: a well-formed SVG (Debian python3's XML parser) with the five panels,
# one polyline per series and one marker per evaluation; bad input exits 2 naming the
# file and line, .png is refused, and a failed plot leaves no file behind.
source "$(dirname "$0")/lib.bash"
head -c 20000 /usr/share/common-licenses/GPL-3 >"$TMP/train.txt"
tail -c 2049 /usr/share/common-licenses/GPL-3 >"$TMP/eval.txt"
"$ZTRAIN" init-model --model_config tests/fixtures/gqa_tied/config.json --output_dir "$TMP/init" >/dev/null ||
    fail "init-model"
"$ZTRAIN" train --model "$TMP/init" --data "$TMP/train.txt" --eval_data "$TMP/eval.txt" --eval_steps 3 \
    --block_size 32 --per_device_train_batch_size 4 --max_steps 9 --learning_rate 1e-3 --peak_gflops 1 \
    --log_jsonl "$TMP/log.jsonl" >/dev/null 2>&1 || fail "train"
"$ZTRAIN" plot "$TMP/log.jsonl" --output "$TMP/run.svg" >/dev/null || fail "plot failed"
/usr/bin/python3 - "$TMP/run.svg" <<'PY' || fail "the SVG is not what was drawn"
import sys
import xml.etree.ElementTree as ET
ns = "{http://www.w3.org/2000/svg}"
root = ET.parse(sys.argv[1]).getroot()          # raises on malformed XML
assert root.tag == ns + "svg", root.tag
texts = [t.text or "" for t in root.iter(ns + "text")]
for title in ("loss", "learning rate", "gradient norm", "tokens/s per device", "lost-update fraction"):
    assert any(t.startswith(title) for t in texts), "panel missing: " + title
assert any("9 training steps, 3 evaluations" in t for t in texts), texts[0]
lines = list(root.iter(ns + "polyline"))
assert len(lines) == 6, "expected 6 series (train, eval, lr, grad norm, tokens/s, lost), got %d" % len(lines)
counts = sorted(len(l.get("points").split()) for l in lines)
assert counts == [3, 9, 9, 9, 9, 9], counts
assert len(list(root.iter(ns + "circle"))) == 3, "one marker per evaluation"
PY

printf '{"step": 1, "loss": 2.5}\nnot json\n' >"$TMP/bad.jsonl"
expect_exit 2 'bad.jsonl:2: not a JSON object' -- "$ZTRAIN" plot "$TMP/bad.jsonl" --output "$TMP/bad.svg"
printf '{"step": 1, "loss": "x"}\n' >"$TMP/str.jsonl"
expect_exit 2 'str.jsonl:1: "loss" is not a finite number' -- "$ZTRAIN" plot "$TMP/str.jsonl" --output "$TMP/bad.svg"
printf '{"loss": 2.5}\n' >"$TMP/nostep.jsonl"
expect_exit 2 'nostep.jsonl:1: a training record without "step"' -- "$ZTRAIN" plot "$TMP/nostep.jsonl" --output "$TMP/bad.svg"
: >"$TMP/empty.jsonl"
expect_exit 2 'no training steps' -- "$ZTRAIN" plot "$TMP/empty.jsonl" --output "$TMP/bad.svg"
expect_exit 2 'missing.jsonl' -- "$ZTRAIN" plot "$TMP/missing.jsonl" --output "$TMP/bad.svg"
[ -e "$TMP/bad.svg" ] && fail "a failed plot left $TMP/bad.svg behind"
expect_exit 2 'PNG is not supported' -- "$ZTRAIN" plot "$TMP/log.jsonl" --output "$TMP/run.png"
expect_exit 2 'expected a .svg file' -- "$ZTRAIN" plot "$TMP/log.jsonl" --output "$TMP/run.pdf"
expect_exit 2 'output FILE.svg is required' -- "$ZTRAIN" plot "$TMP/log.jsonl"
expect_exit 2 'expected the log first' -- "$ZTRAIN" plot --output "$TMP/x.svg"
# an existing chart is replaced only by a complete one
cp "$TMP/run.svg" "$TMP/keep.svg"
expect_exit 2 '' -- "$ZTRAIN" plot "$TMP/bad.jsonl" --output "$TMP/keep.svg"
cmp -s "$TMP/run.svg" "$TMP/keep.svg" || fail "a failed plot damaged an existing file"
finish
