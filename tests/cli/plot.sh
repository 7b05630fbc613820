#!/usr/bin/env bash
# plot.sh — `ztrain plot LOG.jsonl --output FILE.svg|FILE.png` on a real training log
# with evaluations: a well-formed SVG (Debian python3's XML parser) with the five
# panels, one polyline per series and one marker per evaluation; a PNG that decodes
# (signature, IHDR, CRCs, zlib, scanline filters: Debian python3's standard library)
# to 960 x 800 pixels showing the chart's frames, text and series colours; bad input
# exits 2 naming the file and line, and a failed plot leaves no file behind.
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

# the same chart as PNG, decoded here without any imaging library
"$ZTRAIN" plot "$TMP/log.jsonl" --output "$TMP/run.png" >/dev/null || fail "plot --output .png failed"
/usr/bin/python3 - "$TMP/run.png" <<'PY' || fail "the PNG is not the chart"
import struct, sys, zlib
data = open(sys.argv[1], "rb").read()
assert data[:8] == b"\x89PNG\r\n\x1a\n", "no PNG signature"
pos, chunks = 8, []
while pos < len(data):
    n, kind = struct.unpack(">I4s", data[pos:pos + 8])
    body = data[pos + 8:pos + 8 + n]
    assert len(body) == n, "truncated chunk"
    crc, = struct.unpack(">I", data[pos + 8 + n:pos + 12 + n])
    assert zlib.crc32(kind + body) == crc, "bad CRC in %r" % kind
    chunks.append((kind, body))
    pos += 12 + n
assert chunks[0][0] == b"IHDR" and chunks[-1][0] == b"IEND", [c[0] for c in chunks]
w, h, depth, ctype, comp, filt, lace = struct.unpack(">IIBBBBB", chunks[0][1])
assert (w, h) == (960, 800), (w, h)
assert depth == 8 and ctype in (2, 6) and lace == 0, (depth, ctype, lace)
bpp = 4 if ctype == 6 else 3
raw = zlib.decompress(b"".join(b for k, b in chunks if k == b"IDAT"))
stride = w * bpp
assert len(raw) == h * (stride + 1), len(raw)
rows, prev = [], bytearray(stride)
for y in range(h):           # undo the five PNG filters
    f, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
    for i in range(stride):
        a = line[i - bpp] if i >= bpp else 0
        b, c = prev[i], prev[i - bpp] if i >= bpp else 0
        if f == 1: line[i] = (line[i] + a) & 255
        elif f == 2: line[i] = (line[i] + b) & 255
        elif f == 3: line[i] = (line[i] + (a + b) // 2) & 255
        elif f == 4:
            p = a + b - c
            pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
            line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        else: assert f == 0, "filter %d" % f
    rows.append(bytes(line)); prev = line
px = [tuple(r[i:i + 3]) for r in rows for i in range(0, stride, bpp)]
white = sum(p == (255, 255, 255) for p in px)
assert white > 0.5 * len(px), "the background is not white (%d of %d)" % (white, len(px))
dark = sum(max(p) < 100 for p in px)
assert dark > 2000, "too few dark pixels for frames and text: %d" % dark
near = lambda p, q: max(abs(x - y) for x, y in zip(p, q)) <= 12
for name, rgb in (("train loss", (0x1f, 0x77, 0xb4)), ("eval loss", (0xd6, 0x27, 0x28)), ("lr", (0x2c, 0xa0, 0x2c)),
                  ("grad norm", (0x94, 0x67, 0xbd)), ("tokens/s", (0xff, 0x7f, 0x0e))):
    k = sum(near(p, rgb) for p in px)
    assert k > 50, "the %s series is not drawn (%d pixels of its colour)" % (name, k)
PY
[ -n "$(find "$TMP" -maxdepth 1 -name '*ztmp*')" ] && fail "temporary files left behind"

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
expect_exit 2 'bad.jsonl:2: not a JSON object' -- "$ZTRAIN" plot "$TMP/bad.jsonl" --output "$TMP/bad.png"
[ -e "$TMP/bad.png" ] && fail "a failed plot left $TMP/bad.png behind"
expect_exit 2 'expected a .svg or .png file' -- "$ZTRAIN" plot "$TMP/log.jsonl" --output "$TMP/run.pdf"
expect_exit 2 'output FILE.svg \(or FILE.png\) is required' -- "$ZTRAIN" plot "$TMP/log.jsonl"
expect_exit 2 'expected the log first' -- "$ZTRAIN" plot --output "$TMP/x.svg"
# an existing chart is replaced only by a complete one
cp "$TMP/run.svg" "$TMP/keep.svg"
expect_exit 2 '' -- "$ZTRAIN" plot "$TMP/bad.jsonl" --output "$TMP/keep.svg"
cmp -s "$TMP/run.svg" "$TMP/keep.svg" || fail "a failed plot damaged an existing file"
# ztrain's own log writes a value it could not form as null (issue 44, point
# 11): the step is drawn as a gap, the line broken there, not refused
python3 - "$TMP/log.jsonl" "$TMP/nulls.jsonl" <<'PY'
import json, sys
out = open(sys.argv[2], "w")
for i, l in enumerate(open(sys.argv[1])):
    r = json.loads(l)
    if "loss" in r and r.get("step") == 5:
        r["loss"], r["grad_norm"] = None, None
    out.write(json.dumps(r) + "\n")
PY
"$ZTRAIN" plot "$TMP/nulls.jsonl" --output "$TMP/nulls.svg" > /dev/null 2>&1 || fail "plot refused a log with null values"
python3 - "$TMP/nulls.svg" <<'PY' || fail "a null value is not drawn as a gap"
import sys, xml.etree.ElementTree as ET
ns = "{http://www.w3.org/2000/svg}"
counts = sorted(len(l.get("points").split()) for l in ET.parse(sys.argv[1]).getroot().iter(ns + "polyline"))
# loss and grad norm: 4 points, the gap, 4 points; eval, lr, tokens/s and lost whole
assert counts == [3, 4, 4, 4, 4, 9, 9, 9], counts
PY
finish
