# profile.sh — `train --profile FILE.json --profile_steps A-B` (core/prof.h): on the CPU
# and on the emulated device, in exact mode and in fast mode (fp32, and bf16 with its
# bf16 activations), the trace is valid JSON with the kernels of the mode, phases and
# collectives, events nest within their phases, only the asked steps are there, and
# the table's classes are the trace's kernels with their counts and rates (TFLOP/s or
# GB/s), its shares adding up to 100 %; at 2 ranks each rank writes its own trace;
# refusals: a special file or a directory as the trace, bad step ranges.
. "$(dirname "$0")/lib.bash"
root=$(cd "$(dirname "$0")/../.." && pwd)
fix=$root/tests/fixtures/gqa_tied
args=(train --model "$fix" --data "$fix/tokens.npy" --block_size 16 --per_device_train_batch_size 2 --max_steps 4
      --threads 1 --peak_gflops 1 --progress false)
check() { python3 "$root/tests/cli/profile_check.py" "$@" || fail "profile_check $*"; }

for dev in cpu emu; do
    "$ZTRAIN" "${args[@]}" --device "$dev" --profile "$TMP/$dev.json" --profile_steps 2-3 >"$TMP/$dev.out" 2>&1 ||
        fail "$dev: --profile run failed: $(tail -3 "$TMP/$dev.out")"
    grep -q "^profile: steps 2-3 (2 profiled" "$TMP/$dev.out" || fail "$dev: no table: $(cat "$TMP/$dev.out")"
    check "$TMP/$dev.json" "$TMP/$dev.out" 2 3 --collectives
done
# fast mode on the emulated device: its own entries (the fused lm-head cross-entropy,
# AdamW per unit, the verdict on the device; with bf16 compute the attention and SwiGLU
# over bf16 activations), none of exact mode's where they differ; the step is not
# captured while profiled (graphs: off (--profile)), so every entry is timed
for prec in fp32 bf16; do
    mode=fast extra=()
    [ $prec = bf16 ] && mode=fast-bf16 extra=(--torch_dtype bfloat16 --mixed_precision bf16)
    "$ZTRAIN" "${args[@]}" --device emu --kernels fast "${extra[@]}" --profile "$TMP/fast_$prec.json" \
        --profile_steps 2-3 >"$TMP/fast_$prec.out" 2>&1 || fail "emu fast $prec: --profile run failed: $(tail -3 "$TMP/fast_$prec.out")"
    grep -q "^plan: .*kernels fast" "$TMP/fast_$prec.out" || fail "emu fast $prec: not fast mode: $(cat "$TMP/fast_$prec.out")"
    grep -q "^graphs: off (--profile)" "$TMP/fast_$prec.out" || fail "emu fast $prec: no 'graphs: off (--profile)' line"
    check "$TMP/fast_$prec.json" "$TMP/fast_$prec.out" 2 3 --mode $mode
done
# each mode's check refuses the other's trace (the check can fail)
python3 "$root/tests/cli/profile_check.py" "$TMP/emu.json" "$TMP/emu.out" 2 3 --mode fast >/dev/null &&
    fail "profile_check --mode fast passed exact mode's trace"
python3 "$root/tests/cli/profile_check.py" "$TMP/fast_fp32.json" "$TMP/fast_fp32.out" 2 3 >/dev/null &&
    fail "profile_check (exact) passed fast mode's trace"
# a single step, and "A-" up to the last
"$ZTRAIN" "${args[@]}" --profile "$TMP/one.json" --profile_steps 4 >"$TMP/one.out" 2>&1 || fail "--profile_steps 4"
check "$TMP/one.json" "$TMP/one.out" 4 4
"$ZTRAIN" "${args[@]}" --profile "$TMP/tail.json" --profile_steps 3- >"$TMP/tail.out" 2>&1 || fail "--profile_steps 3-"
check "$TMP/tail.json" "$TMP/tail.out" 3 4

# two ranks (ZeRO-3: all-gathers and reduce-scatters): one trace per rank, pid = rank
"${mpi[@]}" -np 2 "$ZTRAIN" "${args[@]}" --use_fsdp --profile "$TMP/r.json" --profile_steps 2-2 >"$TMP/r.out" 2>&1 ||
    fail "2 ranks: $(tail -3 "$TMP/r.out")"
check "$TMP/r.json" "$TMP/r.out" 2 2 --collectives
python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert {e["pid"] for e in d["traceEvents"]} == {1}' \
    "$TMP/r.rank1.json" 2>/dev/null || fail "2 ranks: r.rank1.json missing or not rank 1's"
[ "$(grep -c '^profile: steps' "$TMP/r.out")" -eq 1 ] || fail "2 ranks: the table is printed once (rank 0)"

# refusals, before any step runs: exit 2 naming the flag or the file
mkfifo "$TMP/fifo"
expect_exit 2 "/dev/null: --profile: the trace file is a character device, not a regular file" -- \
    "$ZTRAIN" "${args[@]}" --profile /dev/null
expect_exit 2 "fifo: --profile: the trace file is a FIFO" -- "$ZTRAIN" "${args[@]}" --profile "$TMP/fifo"
expect_exit 2 "--profile: the trace file is a directory" -- "$ZTRAIN" "${args[@]}" --profile "$TMP"
expect_exit 2 "nodir/t.json: --profile: cannot create the trace there" -- \
    "$ZTRAIN" "${args[@]}" --profile "$TMP/nodir/t.json"
for bad in 0-2 3-2 x 2-x -1; do
    expect_exit 2 "--profile_steps '$bad': expected A-B, A or A-" -- \
        "$ZTRAIN" "${args[@]}" --profile "$TMP/x.json" --profile_steps "$bad"
done
expect_exit 2 "--profile_steps: needs --profile" -- "$ZTRAIN" "${args[@]}" --profile_steps 2-3
[ -e "$TMP/x.json" ] && fail "a refused run left $TMP/x.json"
finish
