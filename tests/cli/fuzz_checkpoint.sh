# The checkpoint readers under libFuzzer (issue 12, point 7): `make fuzz`'s build of
# tests/fuzz/fuzz_checkpoint.c with clang's ASan + UBSan (float-cast-overflow
# included, so a double cast out of an integer's range is a crash), and 10 s of
# fuzzing from the seed corpus (a real trainer_state.json in both layouts, index and manifest)
# must find nothing.
. "$(dirname "$0")/lib.bash"
# only the harness this test runs (make fuzz builds them all), on every core: the
# sanitized library build is most of this test's time
make -s -j"$(nproc)" SANITIZE=fuzz CC=clang build-fuzz/fuzz_checkpoint > "$TMP/build.log" 2>&1 ||
    { fail "make build-fuzz/fuzz_checkpoint: $(tail -5 "$TMP/build.log")"; finish; }
cp tests/fuzz/corpus/checkpoint/* "$TMP/" 2>/dev/null
mkdir -p "$TMP/corpus" && mv "$TMP"/*.seed "$TMP/corpus/"
build-fuzz/fuzz_checkpoint -max_total_time=10 -max_len=8192 -artifact_prefix="$TMP/" "$TMP/corpus" \
    > "$TMP/fuzz.log" 2>&1 || fail "the fuzzer found a crash: $(grep -E 'ERROR|runtime error|SUMMARY' "$TMP/fuzz.log" | head -5)"
grep -q "^Done [0-9]* runs" "$TMP/fuzz.log" || fail "the fuzzer did not run: $(tail -5 "$TMP/fuzz.log")"
finish
