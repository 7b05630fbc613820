# Trainer's vocabulary on `train` (contract §4, §8): --num_train_epochs (max_steps
# wins), --warmup_ratio, the new schedules, --logging_steps' plain lines (and no
# carriage returns from --progress in a log file), --eval_strategy and
# --save_strategy, the aliases --bf16/--fp16/--deepspeed, and suggestions for
# Trainer's names.
. "$(dirname "$0")/lib.bash"
cfg=tests/fixtures/gqa_tied/config.json
"$ZTRAIN" init-model --model_config "$cfg" --output_dir "$TMP/init" --seed 3 >/dev/null || fail "init-model"
# 2,700 bytes as byte tokens: (2700-1)/32 = 84 windows; batch 2 on one rank: 42 steps an epoch
printf 'The quick brown fox jumps over the lazy dog. %.0s' $(seq 60) > "$TMP/text.txt"
run() { "$ZTRAIN" train --model "$TMP/init" --data "$TMP/text.txt" --block_size 32 --per_device_train_batch_size 2 \
    --threads 1 --learning_rate 1e-3 "$@"; }
steps() { wc -l < "$1" | tr -d ' '; }

# epochs: ceil(1.5 * 84 / 2) = 63 steps; with --max_steps too, max_steps wins
run --num_train_epochs 1.5 --log_jsonl "$TMP/e.jsonl" > "$TMP/e.out" || fail "train --num_train_epochs"
[ "$(steps "$TMP/e.jsonl")" = 63 ] || fail "--num_train_epochs 1.5: $(steps "$TMP/e.jsonl") steps, want 63"
run --num_train_epochs 2 --max_steps 5 --log_jsonl "$TMP/m.jsonl" > /dev/null || fail "epochs and max_steps"
[ "$(steps "$TMP/m.jsonl")" = 5 ] || fail "--max_steps 5 with --num_train_epochs: $(steps "$TMP/m.jsonl") steps"
expect_exit 2 "--num_train_epochs" -- run --num_train_epochs 0

# warmup_ratio 0.1 of 20 steps: w = 2, so lr 0, lr/2, lr, then the linear decay (S-u)/(S-w)
run --max_steps 20 --warmup_ratio 0.1 --log_jsonl "$TMP/w.jsonl" > /dev/null || fail "train --warmup_ratio"
/usr/bin/python3 - "$TMP/w.jsonl" <<'PY' || fail "--warmup_ratio: wrong learning rates"
import json, sys
lr = [json.loads(l)["lr"] for l in open(sys.argv[1])]
want = [0.0, 0.5e-3, 1e-3, 1e-3 * 17 / 18]
assert all(abs(a - b) < 1e-12 for a, b in zip(lr, want)), lr[:4]
PY
# --warmup_steps wins over the ratio, as in Trainer
run --max_steps 20 --warmup_ratio 0.5 --warmup_steps 1 --log_jsonl "$TMP/w1.jsonl" > /dev/null || fail "warmup both"
/usr/bin/python3 -c "import json,sys; l=[json.loads(x)['lr'] for x in open(sys.argv[1])]; assert l[1]==1e-3, l[:3]" \
    "$TMP/w1.jsonl" || fail "--warmup_steps 1 did not win over --warmup_ratio"

# the new schedules reach the trainer: polynomial ends at lr_end 1e-7, restarts at 0
run --max_steps 10 --lr_scheduler_type polynomial --log_jsonl "$TMP/p.jsonl" > /dev/null || fail "polynomial"
/usr/bin/python3 - "$TMP/p.jsonl" <<'PY' || fail "polynomial: wrong learning rates"
import json, sys
lr = [json.loads(l)["lr"] for l in open(sys.argv[1])]
# transformers: ((lr - 1e-7) * (1 - u/S) + 1e-7) for update u of S = 10, no warm-up
want = [(1e-3 - 1e-7) * (1 - u / 10) + 1e-7 for u in range(10)]
assert all(abs(a - b) < 1e-12 for a, b in zip(lr, want)), (lr, want)
PY
run --max_steps 4 --lr_scheduler_type cosine_with_restarts --log_jsonl "$TMP/c.jsonl" > /dev/null || fail "restarts"
run --max_steps 4 --lr_scheduler_type constant_with_warmup --warmup_steps 2 > /dev/null || fail "constant_with_warmup"
expect_exit 2 "lr_scheduler_type.*cosine_with_restarts" -- run --lr_scheduler_type cosine_restarts
expect_exit 2 "polynomial.*learning_rate" -- run --lr_scheduler_type polynomial --learning_rate 1e-7

# logging: stdout to a file gets a plain line every logging_steps and after the last
run --max_steps 7 --logging_steps 3 > "$TMP/log.out" 2> "$TMP/log.err" || fail "train --logging_steps"
[ "$(grep -Ec '^step [0-9]+/7: loss [0-9.]+, grad_norm [0-9.e+-]+, learning_rate [0-9.e+-]+, epoch [0-9.]+$' \
    "$TMP/log.out")" = 3 ] || fail "--logging_steps 3 of 7: want lines at steps 3, 6, 7: $(grep '^step' "$TMP/log.out")"
grep -q '^step 6/7: ' "$TMP/log.out" || fail "no log line at step 6"
# a fraction of max_steps, as Trainer: 0.5 of 7 -> every 4 steps
run --max_steps 7 --logging_steps 0.5 | grep -c '^step [47]/7:' | grep -qx 2 || fail "--logging_steps 0.5"
# --progress with stderr in a file: no carriage returns, the plain lines instead
run --max_steps 3 --logging_steps 1 --progress > "$TMP/p.out" 2> "$TMP/p.err" || fail "train --progress"
if grep -q $'\r' "$TMP/p.err" "$TMP/p.out"; then fail "--progress wrote carriage returns into a log file"; fi
[ "$(grep -c '^step [0-9]/3: ' "$TMP/p.out")" = 3 ] || fail "--progress to a file: want 3 plain lines"
# on a terminal (script(1) gives the run one) the bar is drawn, the latest eval on it
script -qec "$(printf '%q ' "$ZTRAIN" train --model "$TMP/init" --data "$TMP/text.txt" --block_size 32 \
    --per_device_train_batch_size 2 --threads 1 --max_steps 4 --eval_data "$TMP/text.txt" --eval_steps 2)" /dev/null \
    > "$TMP/tty.out" 2>&1 || fail "train on a terminal"
grep -q $'\r\\[#*\\.*\\] 3/4 loss [0-9.]* eval [0-9.]*' "$TMP/tty.out" ||
    fail "no progress bar with the eval on a terminal: $(tr '\r' '\n' < "$TMP/tty.out" | tail -3)"
grep -q '^step 4/4: ' "$TMP/tty.out" && fail "plain log lines under a progress bar"

# eval_strategy epoch: an evaluation after steps 42 and 84 (two epochs); save_strategy
# epoch: checkpoint-42 (the final save writes OUTPUT_DIR itself)
run --num_train_epochs 2 --eval_data "$TMP/text.txt" --per_device_eval_batch_size 16 --eval_strategy epoch \
    --save_strategy epoch --output_dir "$TMP/ep" --log_jsonl "$TMP/ep.jsonl" > /dev/null || fail "epoch strategies"
[ "$(grep '"eval_loss"' "$TMP/ep.jsonl" | grep -Eo '"step": [0-9]+' | tr -d '"step: ' | tr '\n' ' ')" = "42 84 " ] ||
    fail "--eval_strategy epoch: evaluations at $(grep '"eval_loss"' "$TMP/ep.jsonl" | grep -Eo '"step": [0-9]+')"
# one checkpoint at each epoch's end; the second is also the last step, which is
# always checkpointed when checkpoints are saved (as Trainer does)
[ -d "$TMP/ep/checkpoint-42" ] || fail "--save_strategy epoch: no checkpoint-42"
[ "$(ls -d "$TMP/ep"/checkpoint-* | xargs -n1 basename | tr '\n' ' ')" = "checkpoint-42 checkpoint-84 " ] ||
    fail "--save_strategy epoch: $(ls -d "$TMP/ep"/checkpoint-*)"
# eval_strategy steps without eval_steps: every logging_steps, as Trainer
run --max_steps 6 --eval_data "$TMP/text.txt" --eval_strategy steps --logging_steps 3 \
    --log_jsonl "$TMP/es.jsonl" > /dev/null || fail "eval_strategy steps"
[ "$(grep -c '"eval_loss"' "$TMP/es.jsonl")" = 2 ] || fail "--eval_strategy steps: want evaluations at 3 and 6"
# save_strategy steps: Trainer's save_steps 500 unless given
run --max_steps 4 --save_strategy steps --save_steps 2 --output_dir "$TMP/ss" > /dev/null || fail "save_strategy steps"
[ -d "$TMP/ss/checkpoint-2" ] || fail "--save_strategy steps --save_steps 2: no checkpoint-2"
run --max_steps 4 --save_strategy no --output_dir "$TMP/sn" > /dev/null || fail "save_strategy no"
ls -d "$TMP/sn"/checkpoint-* >/dev/null 2>&1 && fail "--save_strategy no wrote a checkpoint"
expect_exit 2 "--eval_strategy epoch needs --eval_data" -- run --eval_strategy epoch
expect_exit 2 "--eval_strategy no contradicts --eval_data" -- run --eval_strategy no --eval_data "$TMP/text.txt"
expect_exit 2 "--eval_steps 2 applies to --eval_strategy steps" -- run --eval_strategy epoch --eval_steps 2 \
    --eval_data "$TMP/text.txt"
expect_exit 2 "--save_steps 3 applies to --save_strategy steps" -- run --save_strategy no --save_steps 3 \
    --output_dir "$TMP/sx"
expect_exit 2 "--save_strategy epoch .*--output_dir" -- run --save_strategy epoch
expect_exit 2 "--eval_strategy: expected no, steps or epoch, got 'sometimes'" -- run --eval_strategy sometimes

# aliases: --bf16 and --fp16 are --mixed_precision's; --deepspeed FILE is --deepspeed_config_file's
run --max_steps 1 --bf16 | grep -q '^| mixed precision aligned | fp32 | bf16 |' || fail "--bf16"
run --max_steps 1 --fp16 | grep -q 'fp16' || fail "--fp16"
run --max_steps 1 --bf16 false | grep -q '^| mixed precision' && fail "--bf16 false still mixed"
run --max_steps 1 --deepspeed examples/configs/ds_zero2.json | grep -q '^plan: DEEPSPEED, ZeRO-2' ||
    fail "--deepspeed FILE"
"$ZTRAIN" train --help | grep -q -- '--bf16 .*--mixed_precision bf16' || fail "train --help lacks --bf16"
# Trainer's names that are not ztrain's get the flag they meant
expect_exit 2 "did you mean --gradient_accumulation_steps" -- run --gradient_accumulation 2
expect_exit 2 "did you mean --eval_strategy" -- run --evaluation_strategy steps
expect_exit 2 "did you mean --per_device_train_batch_size" -- run --per_gpu_train_batch_size 2
expect_exit 2 "did you mean --num_train_epochs" -- run --num_epochs 2
finish
