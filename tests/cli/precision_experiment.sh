# The seed's experiment, small version (examples/precision/run.py --small --check):
# (i) FSDP memory-constrained barely improves and loses most updates (and ztrain
# warns), (iii) FSDP aligned and (iv) DeepSpeed converge and agree bit for bit,
# (ii) the lr x ranks "fix" moves but differs from (iii), (v) Kahan follows (iii).
. "$(dirname "$0")/lib.bash"
out=$(python3 examples/precision/run.py --small --check --out "$TMP/precision" --ztrain "$ZTRAIN" 2>&1) ||
    fail "precision experiment: $out"
[ -s "$TMP/precision/precision.svg" ] || fail "no plot"
grep -q "<polyline" "$TMP/precision/precision.svg" || fail "plot has no curves"
[ "$(grep -c '^| (' "$TMP/precision/table.md")" -eq 5 ] || fail "table should have 5 modes"
for m in i ii iii iv v; do [ -s "$TMP/precision/$m.jsonl" ] || fail "no JSONL for ($m)"; done
finish
