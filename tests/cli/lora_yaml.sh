# LoRA's YAML keys (issue 46, point 1; docs/lora.md, "YAML keys"): the Accelerate YAML
# (--config_file) takes TRL's names (use_peft, lora_r, lora_alpha, lora_dropout,
# lora_target_modules as a list or a string, use_rslora, lora_bias) or LoraConfig's under
# peft_config: (r, lora_alpha, target_modules, ...; the mapping means use_peft), into the
# flags' settings: the same plan line and the same losses as the flags' run; a flag beside
# the file wins, as flags win over the YAML everywhere; every bad value is refused with
# exit 2 naming FILE:LINE and the key, in the flag's words where the flag has them.
. "$(dirname "$0")/lib.bash"
fix=tests/fixtures/gqa_tied
run=("$ZTRAIN" train --model $fix --data $fix/tokens.npy --block_size 16 --max_steps 2 --learning_rate 1e-3
     --threads 1 --peak_gflops 1 --shuffle false --per_device_train_batch_size 2)
losses() { grep -o '"loss": [^,]*' "$1" | awk '{print $2}' | tr '\n' ' '; }
# one run: its plan line, then its losses
plan_losses() {
    local name=$1
    shift
    "${run[@]}" "$@" --log_jsonl "$TMP/$name.jsonl" >"$TMP/$name.out" 2>&1 || fail "$name: $(tail -3 "$TMP/$name.out")"
    printf '%s | %s' "$(grep '^lora ' "$TMP/$name.out")" "$(losses "$TMP/$name.jsonl")"
}
yaml() { printf 'distributed_type: NO\n%s\n' "$2" >"$TMP/$1.yaml"; }

# TRL's names, a list of targets and rsLoRA, against the same flags
yaml trl 'use_peft: true
lora_r: 4
lora_alpha: 8
lora_dropout: 0.1
lora_target_modules: [q_proj, v_proj, gate_proj]
use_rslora: true
lora_bias: none'
flags=$(plan_losses flags --use_peft --lora_r 4 --lora_alpha 8 --lora_target_modules q_proj v_proj gate_proj --use_rslora \
    --lora_dropout 0.1)
case $flags in "lora r=4, alpha=8 (scale 4, rsLoRA), targets q_proj,v_proj,gate_proj, trainable"*) ;;
*) fail "the flags' plan line: $flags" ;; esac
[ "$(plan_losses trl --config_file "$TMP/trl.yaml")" = "$flags" ] ||
    fail "TRL's keys: $(plan_losses trl --config_file "$TMP/trl.yaml"), the flags: $flags"

# LoraConfig's names under peft_config:, target_modules as PEFT's string
yaml peft 'peft_config:
  r: 4
  lora_alpha: 8
  target_modules: all-linear
  task_type: CAUSAL_LM'
flags=$(plan_losses flags_all --use_peft --lora_r 4 --lora_alpha 8 --lora_target_modules all-linear)
case $flags in "lora r=4, alpha=8 (scale 2), targets q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj,"*) ;;
*) fail "the flags' all-linear plan line: $flags" ;; esac
[ "$(plan_losses peft --config_file "$TMP/peft.yaml")" = "$flags" ] || fail "peft_config: differs from the flags"
# a flag beside the file wins: the file's r 4 under --lora_r 2 is the flags' r 2 run
flags=$(plan_losses flags_r2 --use_peft --lora_r 2 --lora_alpha 8 --lora_target_modules all-linear)
[ "$(plan_losses peft_r2 --config_file "$TMP/peft.yaml" --lora_r 2)" = "$flags" ] ||
    fail "--lora_r 2 beside peft_config.r 4: $(grep '^lora ' "$TMP/peft_r2.out")"
# and --use_peft false beside use_peft: true turns LoRA off, so the file's LoRA keys are refused
expect_exit 2 "trl.yaml:3: lora_r: LoRA keys need use_peft: true" -- "${run[@]}" --config_file "$TMP/trl.yaml" \
    --use_peft false

# estimate-memory reads the same keys
"$ZTRAIN" estimate-memory --model $fix --config_file "$TMP/peft.yaml" >"$TMP/est" 2>&1 ||
    fail "estimate-memory --config_file: $(tail -3 "$TMP/est")"
grep -q "^lora r=4, alpha=8 (scale 2), targets q_proj,k_proj" "$TMP/est" || fail "estimate-memory: $(grep '^lora' "$TMP/est")"

# each bad value, refused naming the file, the line and the key
bad() {
    yaml bad "$1"
    expect_exit 2 "$2" -- "${run[@]}" --config_file "$TMP/bad.yaml"
}
y="bad.yaml"
bad 'use_peft: true
lora_r: 0' "$y:3: lora_r: must be between 1 and 1048576, got 0"
bad 'use_peft: true
lora_r: 2.5' "$y:3: lora_r: expected an integer"
bad 'use_peft: true
lora_alpha: 0' "$y:3: lora_alpha 0: must be greater than 0"
bad 'use_peft: true
lora_alpha: -1' "$y:3: lora_alpha: must be a finite number of at least 0"
bad 'use_peft: true
lora_dropout: 1' "$y:3: lora_dropout 1: expected a probability from 0 to below 1"
bad 'peft_config:
  lora_dropout: 1.5' "$y:3: peft_config.lora_dropout 1.5: expected a probability from 0 to below 1"
bad 'use_peft: true
lora_target_modules: [v_proj, q_prj]' "$y:3: lora_target_modules: unknown target 'q_prj' \(did you mean 'q_proj'\?\)"
bad 'peft_config:
  target_modules: lm_head' "$y:3: peft_config.target_modules: unknown target 'lm_head'"
bad 'use_peft: true
lora_target_modules: []' "$y:3: lora_target_modules: expected all-linear or a list of projection names, got"
bad 'use_peft: true
lora_target_modules: [q_proj, 3]' "$y:3: lora_target_modules: expected a list of projection names, but an item is"
bad 'use_peft: true
lora_bias: all' "$y:3: lora_bias 'all': only none is implemented"
bad 'use_peft: true
lora_bias: some' "$y:3: lora_bias: .*none"
bad 'use_peft: yes' "$y:2: use_peft: "
bad 'lora_r: 4' "$y:2: lora_r: LoRA keys need use_peft: true"
bad 'use_peft: false
peft_config:
  target_modules: all-linear' "$y:2: use_peft: false, but peft_config \(line 3\) describes adapters"
bad 'lora_r: 4
peft_config:
  r: 8' "$y:4: peft_config.r: the same setting as lora_r \(line 2\)"
bad 'peft_config:
  rank: 8' "$y:3: peft_config.rank: unknown key \(did you mean r\?\)"
bad 'peft_config:
  task_type: SEQ_CLS' "$y:3: peft_config.task_type: "
finish
