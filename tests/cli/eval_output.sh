# eval prints the mean loss at full precision (%.17g: the double itself) and, with
# --output_json FILE, writes {"eval_loss", "perplexity", "eval_tokens"} atomically.
. "$(dirname "$0")/lib.bash"
fix=tests/fixtures/gqa_tied
py=/usr/bin/python3
"$ZTRAIN" eval --model $fix --data $fix/tokens.npy --block_size 16 --per_device_eval_batch_size 2 --threads 1 \
    --output_json "$TMP/e.json" >"$TMP/out" 2>"$TMP/err" || fail "eval: $(cat "$TMP/err")"
read -r _ _ loss _ tokens _ ppl <<<"$(cat "$TMP/out")"
ppl=${ppl#(perplexity }
ppl=${ppl%)}
$py - "$loss" "$tokens" "$ppl" "$TMP/e.json" <<'PY' || fail "eval output $(cat "$TMP/out") / $(cat "$TMP/e.json")"
import json, math, sys
loss, tokens, ppl, path = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
# 17 significant digits: the printed text is the double, read back bit for bit
assert len(loss.replace(".", "").lstrip("0")) >= 16, loss
assert repr(float(loss)) == repr(float("%.17g" % float(loss))), loss
d = json.load(open(path))
assert set(d) == {"eval_loss", "perplexity", "eval_tokens"}, d
assert d["eval_loss"] == float(loss) and d["eval_tokens"] == tokens and tokens == 1023, (d, loss, tokens)  # every token of the 1024 but the first
assert d["perplexity"] == float(ppl) and abs(d["perplexity"] - math.exp(d["eval_loss"])) <= 1e-12 * d["perplexity"], d
assert 4.0 < d["eval_loss"] < 7.0, d
PY
# the same number a second time, to the bit (the text, not a rounding of it)
again=$("$ZTRAIN" eval --model $fix --data $fix/tokens.npy --block_size 16 --per_device_eval_batch_size 2 --threads 1)
[ "$again" = "$(cat "$TMP/out")" ] || fail "eval is not reproducible: $again vs $(cat "$TMP/out")"
# a file in a missing directory is refused, naming the flag; nothing is left behind
expect_exit 2 "--output_json: .*$TMP/none/e.json" -- \
    "$ZTRAIN" eval --model $fix --data $fix/tokens.npy --block_size 16 --output_json "$TMP/none/e.json"
# an existing file is replaced whole
printf 'old' >"$TMP/e2.json"
"$ZTRAIN" eval --model $fix --data $fix/tokens.npy --block_size 16 --max_batches 1 --output_json "$TMP/e2.json" >/dev/null ||
    fail "eval over an existing file"
$py -c "import json; json.load(open('$TMP/e2.json'))" || fail "the replaced file is not JSON: $(cat "$TMP/e2.json")"
ls "$TMP" | grep -q ztmp && fail "a temporary file was left: $(ls "$TMP")"
finish
