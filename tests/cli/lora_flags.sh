# LoRA's flags (issue 46, point 1; docs/lora.md): with --use_peft, the plan line gives the
# rank, alpha, PEFT's scale (alpha/r, alpha/sqrt(r) with --use_rslora), the targets as PEFT
# resolves them (its default q_proj,v_proj; all-linear; names, spaced or comma-separated)
# and the trainable and total parameter counts that PEFT itself gives for the same model
# and settings (tests/fixtures/lora/counts.json, tools/make_lora_fixtures.py: Llama tied
# and untied, Qwen2 with biases, Mistral); the run then trains (one step here;
# tests/cli/lora_train.sh checks the training).  Refused by name, exit 2: a LoRA flag without
# --use_peft, a --lora_dropout of 1 (no input left), an unknown target (with the closest name), an
# empty target list, a --lora_bias other than none, a rank below 1.
. "$(dirname "$0")/lib.bash"
counts=tests/fixtures/lora/counts.json
# one line per case: model r alpha rslora targets-as-flag-values expected-targets scale trainable total
/usr/bin/python3 - "$counts" >"$TMP/cases" <<'PY'
import json, sys
for c in json.load(open(sys.argv[1]))["cases"]:
    t = c["target_modules"]
    flag = "-" if t is None else t if isinstance(t, str) else " ".join(t)
    order = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    want = ",".join(n for n in order if n in c["targets"])
    print("|".join(str(x) for x in (c["model"], c["r"], c["alpha"], int(c["use_rslora"]), flag, want,
                                    "%.9g" % c["scale"], c["trainable"], c["total"])))
PY
one=(--max_steps 1 --block_size 16 --per_device_train_batch_size 1 --threads 1 --peak_gflops 1)
[ "$(grep -c . "$TMP/cases")" -eq 5 ] || fail "counts.json: $(grep -c . "$TMP/cases") cases, want 5"
while IFS='|' read -r model r alpha rs flag want scale trainable total; do
    fix=tests/fixtures/$model
    extra=()
    [ "$rs" = 1 ] && extra+=(--use_rslora)
    # shellcheck disable=SC2206
    [ "$flag" != - ] && extra+=(--lora_target_modules $flag)
    "$ZTRAIN" train --model "$fix" --data "$fix/tokens.npy" --use_peft --lora_r "$r" --lora_alpha "$alpha" \
        "${extra[@]}" "${one[@]}" >"$TMP/out" 2>"$TMP/err"
    rc=$?
    [ "$rc" -eq 0 ] || fail "$model r=$r: exit $rc: $(cat "$TMP/err")"
    line=$(grep '^lora ' "$TMP/out")
    pct=$(awk -v n="$trainable" -v m="$total" 'BEGIN { printf "%.4f", 100 * n / m }')
    rsl=""
    [ "$rs" = 1 ] && rsl=", rsLoRA"
    expect="lora r=$r, alpha=$alpha (scale $scale$rsl), targets $want, trainable $trainable of $total parameters ($pct %)"
    [ "$line" = "$expect" ] || fail "$model: plan line '$line', PEFT's numbers give '$expect'"
done <"$TMP/cases"

fix=tests/fixtures/gqa_tied
run=("$ZTRAIN" train --model $fix --data $fix/tokens.npy)
expect_exit 2 "--lora_r: LoRA flags need --use_peft" -- "${run[@]}" --lora_r 4
expect_exit 2 "--lora_target_modules: LoRA flags need --use_peft" -- "${run[@]}" --lora_target_modules q_proj
expect_exit 2 "--lora_dropout 1: expected a probability from 0 to below 1" -- "${run[@]}" --use_peft \
    --lora_dropout 1
expect_exit 2 "unknown target 'q_prj' \(did you mean 'q_proj'\?\)" -- "${run[@]}" --use_peft \
    --lora_target_modules v_proj,q_prj
expect_exit 2 "unknown target 'lm_head'" -- "${run[@]}" --use_peft --lora_target_modules lm_head
expect_exit 2 "--lora_target_modules: expected all-linear or projection names, got none" -- "${run[@]}" --use_peft \
    --lora_target_modules
expect_exit 2 "--lora_bias 'all': only none is implemented" -- "${run[@]}" --use_peft --lora_bias all
expect_exit 2 "--lora_r: 0 is out of range" -- "${run[@]}" --use_peft --lora_r 0
# estimate-memory takes the flags that change LoRA's bytes and prints what the run allocates:
# on gqa_tied at r 4 on q and v, 1792 adapter parameters: 7168 bytes of gradients where full
# fine-tuning has 0.41 MiB
"$ZTRAIN" estimate-memory --model $fix --per_device_train_batch_size 2 --block_size 16 --use_peft --lora_r 4 \
    >"$TMP/est" 2>&1 || fail "estimate-memory --use_peft: $(tail -3 "$TMP/est")"
grep -q "^lora r=4, alpha=32 (scale 8), targets q_proj,v_proj, trainable 1792 of 109120 parameters" "$TMP/est" &&
    grep -Eq "^  gradients +0.01 MiB" "$TMP/est" || fail "estimate-memory --use_peft: $(cat "$TMP/est")"
"$ZTRAIN" estimate-memory --model $fix --per_device_train_batch_size 2 --block_size 16 >"$TMP/est" 2>&1
grep -Eq "^  gradients +0.41 MiB" "$TMP/est" || fail "estimate-memory: $(cat "$TMP/est")"
expect_exit 2 "unknown flag --lora_alpha" -- "$ZTRAIN" estimate-memory --model $fix --use_peft --lora_alpha 8
# the targets' list ends at the next flag: --data after it is still --data
"$ZTRAIN" train --model $fix --use_peft --lora_target_modules k_proj o_proj --data $fix/tokens.npy "${one[@]}" \
    >"$TMP/out" 2>&1
grep -q "^lora r=16, alpha=32 (scale 2), targets k_proj,o_proj, " "$TMP/out" || fail "targets before --data: $(cat "$TMP/out")"
finish
