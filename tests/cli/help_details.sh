# help_details.sh — what --help and the messages promise: every flag of every
# command shows its default (or is required by the usage line); one spelling of
# each dtype (fp32/float32, bf16/bfloat16, fp16/float16) wherever a dtype is read;
# `checkpoint show --help` answers; eval's --block_size is optional; estimate-memory
# lists (and takes) only the flags that change memory; counts read "1 unit",
# "1 new token"; --model DIR/config.json names the mistake.
. "$(dirname "$0")/lib.bash"
fix=tests/fixtures/gqa_tied
cmds=$("$ZTRAIN" --help | awk '/^commands:/ {on = 1; next} on && /^  [a-z]/ {print $1}')
for c in $cmds "checkpoint show" "config show"; do
    # shellcheck disable=SC2086
    "$ZTRAIN" $c --help >"$TMP/h" 2>&1 || fail "ztrain $c --help exited $?"
    usage=$(grep -m1 '^usage' "$TMP/h")
    while read -r flag rest; do
        name=${flag#--}
        printf '%s' "$rest" | grep -qi "default" && continue
        # an alias (Trainer's spelling): its target's line shows the default
        printf '%s' "$rest" | grep -q "^Trainer's name: " && continue
        # required: shown outside [...] in the usage line
        printf '%s' "$usage" | sed 's/\[[^]]*\]//g' | grep -q -- "--$name\b" && continue
        fail "ztrain $c --help: $flag shows no default: $rest"
    done < <(grep -E '^  --[a-z_]+ ' "$TMP/h")
done
"$ZTRAIN" checkpoint show --help | grep -q "usage: ztrain checkpoint show" || fail "checkpoint show --help"
"$ZTRAIN" eval --help | grep -q "^usage: ztrain eval --model DIR --data FILE \[--block_size T\]" || fail "eval usage: $("$ZTRAIN" eval --help | head -1)"
# estimate-memory: memory flags only, the others refused as unknown
"$ZTRAIN" estimate-memory --help >"$TMP/h"
for f in learning_rate weight_decay adam_beta1 lr_scheduler_type warmup_steps max_steps max_grad_norm; do
    grep -q -- "--$f " "$TMP/h" && fail "estimate-memory --help lists --$f, which changes no memory"
done
for f in torch_dtype mixed_precision zero_stage block_size per_device_train_batch_size gradient_checkpointing kernels; do
    grep -q -- "--$f " "$TMP/h" || fail "estimate-memory --help does not list --$f"
done
expect_exit 2 "unknown flag --learning_rate" -- "$ZTRAIN" estimate-memory --model $fix --learning_rate 1e-3

# dtypes: both spellings, the same result
for pair in "fp32 float32" "bf16 bfloat16" "fp16 float16"; do
    set -- $pair
    "$ZTRAIN" init-model --model_config $fix/config.json --output_dir "$TMP/i_$1" --torch_dtype "$1" >/dev/null &&
        "$ZTRAIN" init-model --model_config $fix/config.json --output_dir "$TMP/i_$2" --torch_dtype "$2" >/dev/null ||
        fail "init-model --torch_dtype $1 / $2"
    cmp -s "$TMP/i_$1/model.safetensors" "$TMP/i_$2/model.safetensors" || fail "init-model: $1 and $2 differ"
done
ev() { "$ZTRAIN" eval --model $fix --data $fix/tokens.npy --block_size 16 --threads 1 "$@"; }
[ "$(ev --mixed_precision bf16)" = "$(ev --mixed_precision bfloat16)" ] || fail "eval --mixed_precision bf16 / bfloat16"
gen() { "$ZTRAIN" generate --model $fix --prompt "ab" --max_new_tokens 1 --threads 1 "$@" 2>&1; }
g1=$(gen --torch_dtype bf16) && g2=$(gen --torch_dtype bfloat16) || fail "generate --torch_dtype bf16 / bfloat16: $g1 $g2"
printf '%s' "$g1" | grep -q "1 new token in" || fail "not '1 new token': $g1"
printf '%s' "$g1" | grep -q "2 prompt tokens in" || fail "not '2 prompt tokens': $g1"
train=("$ZTRAIN" train --model $fix --data $fix/tokens.npy --threads 1 --block_size 16 --per_device_train_batch_size 2
       --peak_gflops 1000 --progress false --max_steps 1)
final() { "${train[@]}" "$@" 2>&1 | grep -o 'final loss .*'; }
a=$(final --torch_dtype bf16 --mixed_precision bf16 --reduce_dtype bf16)
b=$(final --torch_dtype bfloat16 --mixed_precision bfloat16 --reduce_dtype bfloat16)
[ -n "$a" ] && [ "$a" = "$b" ] || fail "train: bf16 and bfloat16 differ: '$a' / '$b'"
a=$(final --torch_dtype fp32 --reduce_dtype fp32)
b=$(final --torch_dtype float32 --reduce_dtype float32)
[ -n "$a" ] && [ "$a" = "$b" ] || fail "train: fp32 and float32 differ: '$a' / '$b'"
# one unit: the whole model unwrapped; one step
out=$("${train[@]}" --use_fsdp --fsdp_auto_wrap_policy NO_WRAP 2>&1) || fail "train NO_WRAP: $out"
printf '%s' "$out" | grep -q "; 1 unit$" || fail "not '1 unit': $(printf '%s' "$out" | grep '^model:')"
printf '%s' "$out" | grep -q "trained 1 step in" || fail "not 'trained 1 step': $out"
# --model pointing at config.json
expect_exit 2 "^ztrain: error: --model $fix/config.json: a model is the directory .*give --model $fix\$" -- \
    "$ZTRAIN" eval --model $fix/config.json --data $fix/tokens.npy
expect_exit 2 "^ztrain: error: --model $fix/config.json: a model is the directory .*give --model $fix\$" -- \
    "$ZTRAIN" generate --model $fix/config.json --prompt x
expect_exit 2 "give --model $fix\$" -- "${train[@]/$fix/$fix/config.json}"
finish
