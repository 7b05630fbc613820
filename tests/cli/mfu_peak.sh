# MFU is never above 1 (src/train/peak.h): the peak is calibrated once per CPU model,
# oneDNN ISA, thread count and dtype and cached in $XDG_CACHE_HOME/ztrain/peak.json;
# `ztrain env --recalibrate` measures it anew; every JSONL record carries the peak its
# mfu used; a step that beats the peak raises it (a warning, and the cache with it).
# Forced here with a cache whose peak is far too low, and a --peak_gflops far too low.
# A malformed or unwritable cache is a warning and a fresh calibration, never a failure.
# Nothing here assumes an idle machine: a calibration is either cached, or (the machine
# busy) warned about and not cached, and each outcome is checked as the contract says
# it; the cache the reading checks need is written by the test (with the keys `env`
# prints), not by a calibration, which on a loaded machine would not cache.
. "$(dirname "$0")/lib.bash"
fix=tests/fixtures/gqa_tied
export XDG_CACHE_HOME="$TMP/xdg"
cache="$XDG_CACHE_HOME/ztrain/peak.json"
py=/usr/bin/python3

train() { # LOG [flags]: a 3-step run on one thread; stderr in $TMP/err
    local log=$1
    shift
    "$ZTRAIN" train --model $fix --data $fix/tokens.npy --block_size 16 --per_device_train_batch_size 2 \
        --max_steps 3 --threads 1 --log_jsonl "$log" "$@" >"$TMP/out" 2>"$TMP/err"
}
# every record: mfu <= 1, a positive peak_gflops, and mfu = achieved / peak_gflops <= 1
check_log() { # LOG WHAT
    $py - "$1" <<'EOF' || fail "$2: $(cat "$1")"
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
assert len(recs) == 3, len(recs)
for r in recs:
    assert "peak_gflops" in r and r["peak_gflops"] > 0, r
    assert 0 < r["mfu"] <= 1.0, r
EOF
}
entry() { # DTYPE: the cache's gflops for this machine at 1 thread, or nothing
    $py - "$cache" "$1" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
print(" ".join("%r %s" % (e["gflops"], e["how"]) for e in d["peaks"] if e["threads"] == 1 and e["dtype"] == sys.argv[2]))
EOF
}

# cached_or_busy DTYPE ERRFILE WHAT: after a calibration, the dtype's peak is in the
# cache, or the machine was busy and the run warned so (in ERRFILE) and cached nothing
# new for it (WAS: the cache's entry before, "" for none)
cached_or_busy() {
    local dt=$1 errf=$2 what=$3 was=${4:-}
    if grep -q "warning: the machine was busy while the $dt peak was calibrated" "$errf"; then
        [ "$(entry "$dt" 2>/dev/null)" = "$was" ] || fail "$what: a $dt peak calibrated on a busy machine was cached: $(entry "$dt")"
    else
        [ -n "$(entry "$dt")" ] || fail "$what: no $dt cache entry: $(cat "$cache" 2>&1)"
    fi
}
# seed DTYPE-GFLOPS...: a cache of this machine's keys (env's cpu and oneDNN isa lines)
# at 1 thread, each entry as given, written by the test: what a quiet calibration writes
seed() {
    "$ZTRAIN" env --threads 1 --measure false >"$TMP/keys" || fail "env --measure false"
    $py - "$cache" "$TMP/keys" "$@" <<'EOF'
import json, os, re, sys
keys = open(sys.argv[2]).read()
cpu = re.search(r'^cpu: +(.*)$', keys, re.M).group(1)
isa = re.search(r'^onednn: .*\(isa: (.*)\)$', keys, re.M).group(1)
peaks = [{"cpu": cpu, "isa": isa, "threads": 1, "dtype": a.split('=')[0], "gflops": float(a.split('=')[1]),
          "how": "calibrated"} for a in sys.argv[3:]]
os.makedirs(os.path.dirname(sys.argv[1]), exist_ok=True)
open(sys.argv[1], "w").write(json.dumps({"version": 1, "peaks": peaks}))
EOF
}

# calibrate: both dtypes land in the cache (or, the machine busy, are warned about)
"$ZTRAIN" env --threads 1 --recalibrate >"$TMP/env1" 2>"$TMP/env1.err" || fail "env --recalibrate: $(cat "$TMP/env1.err")"
grep -q "^peak fp32 matmul: .* (calibrated: best of 5 rounds" "$TMP/env1" || fail "env did not calibrate: $(cat "$TMP/env1")"
cached_or_busy fp32 "$TMP/env1.err" "env --recalibrate"
cached_or_busy bf16 "$TMP/env1.err" "env --recalibrate"
# then read from the cache: a peak no step reaches (so nothing raises it)
seed fp32=5000 bf16=5000
"$ZTRAIN" env --threads 1 >"$TMP/env2" || fail "env"
grep -q "^peak fp32 matmul: .* (cached in $cache" "$TMP/env2" || fail "env did not read the cache: $(cat "$TMP/env2")"
train "$TMP/cached.jsonl" || fail "train with the cache: $(cat "$TMP/err")"
grep -q "^mfu peak: .*cached in $cache" "$TMP/out" || fail "train did not use the cached peak: $(cat "$TMP/out")"
check_log "$TMP/cached.jsonl" "with the calibrated peak"

# a calibration on a machine busy throughout (as many spinning processes as cores,
# beside as many threads): no round had the cores, so the peak is used but not
# cached, and both env and train say so
busy=()
trap 'kill "${busy[@]}" 2>/dev/null; rm -rf "$TMP"' EXIT
for _ in $(seq "$(nproc)"); do (while :; do :; done) & busy+=($!); done
XDG_CACHE_HOME="$TMP/busy" "$ZTRAIN" env --threads "$(nproc)" --recalibrate >"$TMP/busy.out" 2>"$TMP/busy.err"
rc=$?
XDG_CACHE_HOME="$TMP/busy" "$ZTRAIN" train --model $fix --data $fix/tokens.npy --block_size 16 \
    --per_device_train_batch_size 2 --max_steps 1 --threads "$(nproc)" >"$TMP/busy_train.out" 2>"$TMP/busy_train.err"
rc_train=$?
kill "${busy[@]}"
wait "${busy[@]}" 2>/dev/null
[ $rc -eq 0 ] || fail "env --recalibrate on a busy machine: $(cat "$TMP/busy.err")"
[ "$(grep -c "^peak .* matmul: .*; the machine was busy, not cached)$" "$TMP/busy.out")" -eq 2 ] ||
    fail "env on a busy machine did not say the peaks are not cached: $(cat "$TMP/busy.out")"
[ "$(grep -c "warning: the machine was busy while the .* peak was calibrated (at best this process had [0-9]* % of its" "$TMP/busy.err")" -eq 2 ] ||
    fail "no warning for each peak calibrated on a busy machine: $(cat "$TMP/busy.err")"
[ $rc_train -eq 0 ] || fail "train on a busy machine: $(cat "$TMP/busy_train.err")"
grep -q "^mfu peak: .*; the machine was busy, not cached)$" "$TMP/busy_train.out" ||
    fail "train's peak line on a busy machine: $(cat "$TMP/busy_train.out")"
[ ! -e "$TMP/busy/ztrain/peak.json" ] || fail "a peak calibrated on a busy machine was cached: $(cat "$TMP/busy/ztrain/peak.json")"

# a cached peak far below what a step achieves (a calibration under load): raised,
# warned about once, MFU never above 1, and the cache raised too
$py - "$cache" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
for e in d["peaks"]:
    e["gflops"] = 1e-4
open(sys.argv[1], "w").write(json.dumps(d))
EOF
train "$TMP/low.jsonl" || fail "train with a too-low cached peak: $(cat "$TMP/err")"
check_log "$TMP/low.jsonl" "with a too-low cached peak"
[ "$(grep -c "above the cached peak of 0.0001 GFLOP/s" "$TMP/err")" -eq 1 ] ||
    fail "expected one warning about the raised peak: $(cat "$TMP/err")"
read -r g how <<<"$(entry fp32)"
$py -c "import sys; sys.exit(not float('$g') > 1e-3)" && [ "$how" = achieved ] ||
    fail "the cache was not raised: fp32 entry '$g' '$how'"
[ "$(entry bf16 | cut -d' ' -f1)" = "0.0001" ] || fail "the bf16 entry changed: $(entry bf16)"

# --peak_gflops far too low: raised in memory, the cache left alone
before=$(cat "$cache")
train "$TMP/given.jsonl" --peak_gflops 0.000001 || fail "train --peak_gflops: $(cat "$TMP/err")"
check_log "$TMP/given.jsonl" "with a too-low --peak_gflops"
grep -q "above the given peak .*--peak_gflops is too low" "$TMP/err" || fail "no warning for --peak_gflops: $(cat "$TMP/err")"
[ "$(cat "$cache")" = "$before" ] || fail "--peak_gflops changed the cache"

# malformed caches: a warning naming the file, a calibration, a valid file again
for bad in 'not json {' '{"version": 1, "peaks": [{"cpu": "x"}]}' '{"version": 1, "peaks": [{"cpu": "x", "isa": "y", "threads": 1, "dtype": "fp32", "gflops": -5}]}' '[]' ''; do
    printf '%s' "$bad" >"$cache"
    train "$TMP/bad.jsonl" || fail "train with the cache '$bad': $(cat "$TMP/err")"
    grep -q "warning: the peak cache $cache is malformed" "$TMP/err" || fail "no warning for the cache '$bad': $(cat "$TMP/err")"
    grep -q "^mfu peak: .*best of 5 rounds" "$TMP/out" || fail "no calibration after the cache '$bad'"
    check_log "$TMP/bad.jsonl" "after the cache '$bad'"
    if grep -q "warning: the machine was busy while the fp32 peak was calibrated" "$TMP/err"; then
        [ "$(cat "$cache")" = "$bad" ] || fail "the cache '$bad' was replaced by a busy calibration: $(cat "$cache")"
    else
        [ -n "$(entry fp32)" ] || fail "the cache '$bad' was not replaced: $(cat "$cache")"
    fi
done

# an unwritable cache directory: a warning, and the run goes on
XDG_CACHE_HOME="$fix/tokens.npy" train "$TMP/nodir.jsonl" || fail "train with an unwritable cache: $(cat "$TMP/err")"
# (a busy calibration writes nothing, so only a quiet one meets the directory)
grep -q "warning: cannot write the peak cache\|warning: the machine was busy while the fp32 peak" "$TMP/err" ||
    fail "no warning for an unwritable cache: $(cat "$TMP/err")"
check_log "$TMP/nodir.jsonl" "with an unwritable cache"
expect_exit 2 "recalibrate" -- "$ZTRAIN" env --recalibrate --measure false
finish
