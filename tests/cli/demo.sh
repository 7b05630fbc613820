# demo.sh — the README's first command, scripts/demo.sh, runs as the README says, cut to
# 4 training steps (its extra arguments go to `ztrain train`): it sets up, builds,
# converts SmolLM2-135M-Instruct from its GGUF file, shows the held-out loss and a
# continuation before and after fine-tuning on 2 ranks (FSDP FULL_SHARD, fp32 master),
# draws the run and ends with its time.  The held-out loss must fall, and the model be
# saved as a Hugging Face directory.  (scripts/demo.sh runs the build/ztrain it builds.)
. "$(dirname "$0")/lib.bash"
root=$(cd "$(dirname "$0")/../.." && pwd)
# as a user runs it: not under make test-san's MAKEFLAGS (SANITIZE=1 would move the
# build the script makes and runs)
env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL -u MAKEOVERRIDES -u SANITIZE ZT_DEMO_OUT="$TMP/demo" \
    bash "$root/scripts/demo.sh" --max_steps 4 > "$TMP/out" 2>&1 ||
    fail "scripts/demo.sh failed: $(tail -5 "$TMP/out")"
for what in "before fine-tuning" "after fine-tuning"; do
    grep -q "^== $what: held-out loss" "$TMP/out" || fail "no '$what' section: $(tail -5 "$TMP/out")"
done
grep -q "^plan: FSDP, FULL_SHARD (ZeRO-3), 2 ranks" "$TMP/out" || fail "no 2-rank FSDP plan line: $(grep '^plan' "$TMP/out")"
grep -q "^| FSDP aligned | bf16 | bf16 | fp32 |" "$TMP/out" || fail "not the aligned mode (fp32 master): $(grep '^|' "$TMP/out")"
grep -q "^trained 4 steps" "$TMP/out" || fail "not 4 steps: $(grep '^trained' "$TMP/out")"
losses=$(grep -o '^eval loss [0-9.]*' "$TMP/out" | awk '{print $3}' | tr '\n' ' ')
set -- $losses
[ $# -eq 2 ] || fail "want two held-out losses, got '$losses'"
[ $# -eq 2 ] && { awk -v a="$1" -v b="$2" 'BEGIN { exit !(b < a) }' || fail "the held-out loss did not fall: $losses"; }
for f in config.json model.safetensors tokenizer.json tokenizer_config.json; do
    [ -s "$TMP/demo/model/$f" ] || fail "the fine-tuned model has no $f"
done
[ -s "$TMP/demo/train.svg" ] || fail "no chart"
grep -Eq "^demo took [0-9]+ s \([0-9]+ s of it setting up and building\)$" "$TMP/out" ||
    fail "no closing time line: $(tail -2 "$TMP/out")"
finish
