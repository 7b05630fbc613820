# config show / validate / convert and estimate-memory (contract §6, issue 6):
# every example config resolves and trains two steps; converting to the other
# backend and back gives the same plan; impossible conversions are refused with
# the reason; estimate-memory agrees with what the engine allocates.
. "$(dirname "$0")/lib.bash"
fix=tests/fixtures/gqa_tied
model=tests/fixtures/untied_odd
flag_for() { case "$1" in *.json) echo --deepspeed_config_file ;; *) echo --config_file ;; esac; }

# the plan's signature: stage, world, group and the dtype columns (not the face's name)
sig() {
    "$ZTRAIN" config show "$@" --model $model --torch_dtype bf16 --num_processes 2 2>/dev/null |
        awk -F'|' '/^plan:/ { split($0, a, ", "); w = a[3]; g = a[4] }
                   /^\| [A-Za-z]/ && !/^\| mode/ { row = $3 $4 $5 $6 $7 $8 }
                   /^ZeRO stage/ { st = $0 }
                   END { print st " / " w " / " g " / " row }'
}

for cfg in examples/configs/*.yaml examples/configs/*.json; do
    f=$(flag_for "$cfg")
    out=$("$ZTRAIN" config validate $f "$cfg" --model $model 2>&1) || fail "validate $cfg: $out"
    printf '%s' "$out" | grep -q "^valid: " || fail "validate $cfg printed: $out"
    # a two-step run on a tiny model, on the config's 2 ranks
    out=$("$ZTRAIN" launch --num_processes 2 --threads_per_process 1 train $f "$cfg" --model $fix \
          --data $fix/tokens.npy --block_size 16 --per_device_train_batch_size 1 --max_steps 2 \
          --peak_gflops 1 --torch_dtype bf16 2>&1) || fail "two steps with $cfg: $out"
    printf '%s' "$out" | grep -q "trained 2 steps" || fail "$cfg did not train: $out"
done

# there and back: the same plan
for cfg in examples/configs/fsdp_full_shard_bf16.yaml examples/configs/fsdp_shard_grad_op.yaml \
           examples/configs/deepspeed_zero2.yaml examples/configs/deepspeed_zero3.yaml \
           examples/configs/ds_zero2.json examples/configs/ds_zero3.json; do
    f=$(flag_for "$cfg")
    case "$cfg" in *fsdp*) to=deepspeed; back=fsdp ;; *) to=fsdp; back=deepspeed ;; esac
    "$ZTRAIN" config convert $f "$cfg" --model $model --num_processes 2 --to $to --output "$TMP/there.yaml" 2>/dev/null ||
        { fail "convert $cfg --to $to"; continue; }
    "$ZTRAIN" config convert --config_file "$TMP/there.yaml" --to $back --output "$TMP/back.yaml" 2>/dev/null ||
        { fail "convert back $cfg"; continue; }
    a=$(sig $f "$cfg"); b=$(sig --config_file "$TMP/there.yaml"); c=$(sig --config_file "$TMP/back.yaml")
    [ -n "$a" ] && [ "$a" = "$b" ] && [ "$a" = "$c" ] || fail "round trip of $cfg: '$a' / '$b' / '$c'"
done

# refusals, with the reason and without leaving a file
expect_exit 2 "ZeRO-1 shards only the optimizer state" -- \
    "$ZTRAIN" config convert --config_file examples/configs/deepspeed_zero1.yaml --to fsdp --output "$TMP/no.yaml"
[ -e "$TMP/no.yaml" ] && fail "a refused conversion wrote a file"
expect_exit 2 "hybrid sharding has no counterpart" -- \
    "$ZTRAIN" config convert --config_file examples/configs/fsdp_hybrid.yaml --to deepspeed
expect_exit 2 "memory-constrained mode .* has no DeepSpeed" -- \
    "$ZTRAIN" config convert --config_file examples/configs/fsdp_memory_constrained.yaml --torch_dtype bf16 --to deepspeed
expect_exit 2 "--to: expected deepspeed or fsdp" -- \
    "$ZTRAIN" config convert --config_file examples/configs/deepspeed_zero2.yaml --to megatron
expect_exit 2 "expected show, validate or convert" -- "$ZTRAIN" config frob
sed 's/zero_stage: 2/zero_stage: 7/' examples/configs/deepspeed_zero2.yaml > "$TMP/bad.yaml"
expect_exit 2 "$TMP/bad.yaml.*zero_stage" -- "$ZTRAIN" config validate --config_file "$TMP/bad.yaml"

# show: face, strategy <-> stage, precision row, memory
out=$("$ZTRAIN" config show --config_file examples/configs/fsdp_full_shard_bf16.yaml --model $model --torch_dtype bf16)
for want in "plan: FSDP, FULL_SHARD (ZeRO-3), 2 ranks" "ZeRO stage 3 <-> FSDP FULL_SHARD" \
            "| FSDP aligned | bf16 | bf16 | fp32 | bf16 | bf16 | fp32 |" "optimizer state" "activations"; do
    printf '%s' "$out" | grep -Fq "$want" || fail "config show lacks '$want': $out"
done

# estimate-memory against the engine's own accounting of a real run (within 5%)
est=$("$ZTRAIN" estimate-memory --model $fix --num_processes 2 --use_fsdp --torch_dtype bf16 \
      --mixed_precision bf16 --block_size 16 --per_device_train_batch_size 2)
run=$("$ZTRAIN" launch --num_processes 2 train --model $fix --data $fix/tokens.npy --use_fsdp --torch_dtype bf16 \
      --mixed_precision bf16 --block_size 16 --per_device_train_batch_size 2 --max_steps 1 --peak_gflops 1 2>&1)
pick_est() { printf '%s\n' "$est" | awk -v k="$1" '$0 ~ "^  "k { print $(NF-1) }'; }
pick_run() { printf '%s\n' "$run" | grep "^memory per rank" | sed "s/.*$1 \([0-9.]*\) MiB.*/\1/"; }
for pair in "master params:master params" "gradients:grads" "optimizer state:optimizer" \
            "gathered params:gathered params" "activations:activations"; do
    e=$(pick_est "${pair%%:*}"); r=$(pick_run "${pair##*:}")
    awk -v e="$e" -v r="$r" 'BEGIN { exit !(r > 0 && (e - r) / r < 0.05 && (r - e) / r < 0.05) }' ||
        fail "estimate-memory ${pair%%:*} $e MiB vs engine $r MiB"
done
printf '%s' "$est" | grep -q "^| FSDP aligned / DeepSpeed bf16 |" || fail "estimate-memory has no stage x mode table"
expect_exit 2 "give --model DIR or --model_config" -- "$ZTRAIN" estimate-memory --num_processes 2
finish

# overlap settings: the YAML's fsdp_config, a flag over it, and DeepSpeed's keys
overlap_line() { "$ZTRAIN" config show "$@" --model $model --num_processes 2 2>&1 | grep "^overlap:"; }
cat > "$TMP/prefetch.yaml" <<'YAML'
distributed_type: FSDP
num_processes: 2
fsdp_config:
  fsdp_sharding_strategy: FULL_SHARD
  fsdp_backward_prefetch: BACKWARD_POST
  fsdp_forward_prefetch: true
YAML
want="overlap: reduce-scatter during the next unit's backward; prefetch forward on, backward BACKWARD_POST"
[ "$(overlap_line --config_file "$TMP/prefetch.yaml")" = "$want" ] ||
    fail "prefetch from the YAML: $(overlap_line --config_file "$TMP/prefetch.yaml")"
got=$(overlap_line --config_file "$TMP/prefetch.yaml" --fsdp_backward_prefetch NO_PREFETCH)
[ "$got" = "overlap: reduce-scatter during the next unit's backward; prefetch forward on, backward NO_PREFETCH" ] ||
    fail "a flag over the YAML's prefetch: $got"
sed -e 's/"overlap_comm": true/"overlap_comm": false/' -e 's/"stage3_prefetch_bucket_size": "auto"/"stage3_prefetch_bucket_size": 0/' \
    examples/configs/ds_zero3.json > "$TMP/no_overlap.json"
got=$(overlap_line --deepspeed_config_file "$TMP/no_overlap.json")
[ "$got" = "overlap: reduce-scatter inside each unit's backward; prefetch forward off, backward NO_PREFETCH" ] ||
    fail "DeepSpeed overlap_comm false, no prefetch: $got"
got=$(overlap_line --deepspeed_config_file examples/configs/ds_zero3.json)
[ "$got" = "overlap: reduce-scatter during the next unit's backward; prefetch forward on, backward BACKWARD_PRE" ] ||
    fail "DeepSpeed stage 3 defaults: $got"
# convert keeps the overlap where the other side can say it: ZeRO-3 prefetches both ways
"$ZTRAIN" config convert --config_file examples/configs/deepspeed_zero3.yaml --to fsdp --model $model \
    --num_processes 2 --output "$TMP/from_ds3.yaml" 2>/dev/null || fail "convert deepspeed_zero3.yaml"
grep -q "fsdp_forward_prefetch: true" "$TMP/from_ds3.yaml" || fail "ZeRO-3's forward prefetch lost: $(cat "$TMP/from_ds3.yaml")"
got=$(overlap_line --config_file "$TMP/from_ds3.yaml")
[ "$got" = "overlap: reduce-scatter during the next unit's backward; prefetch forward on, backward BACKWARD_PRE" ] ||
    fail "converted ZeRO-3 overlap: $got"
