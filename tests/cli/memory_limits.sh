# One memory gate for every command that allocates a model (issue 44, point 4):
# init-model refuses a model that cannot fit, at once (it used to grow past
# 6.7 GB), and the gate counts the address space ulimit -v leaves (cgroup limits:
# tests/test_memlimit.c) for init-model, train and eval, with exit 2 naming it,
# where the run used to fail later with "out of memory".
. "$(dirname "$0")/lib.bash"
export PMIX_MCA_gds=hash
fix=tests/fixtures/gqa_tied
# cfg NAME HIDDEN INTERMEDIATE LAYERS: a Llama config with a 32000-token vocabulary
cfg() {
    python3 - "$fix/config.json" "$TMP/$1.json" "$2" "$3" "$4" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
c.update(hidden_size=int(sys.argv[3]), intermediate_size=int(sys.argv[4]), num_hidden_layers=int(sys.argv[5]),
         num_attention_heads=16, num_key_value_heads=16, head_dim=int(sys.argv[3]) // 16, vocab_size=32000)
json.dump(c, open(sys.argv[2], "w"))
PY
}
cfg huge 16384 53248 126
expect_exit 2 "needs an estimated [0-9.]+ (GB|TB) per rank" -- timeout 20 "$ZTRAIN" init-model \
    --model_config "$TMP/huge.json" --output_dir "$TMP/huge"
[ -e "$TMP/huge/model.safetensors" ] && fail "a refused init-model wrote a model"

# 24.8M parameters: 99 MB to initialise, about 400 MB to train
cfg mid 256 1024 8
"$ZTRAIN" init-model --model_config "$TMP/mid.json" --output_dir "$TMP/mid" > /dev/null || fail "init-model mid"
uv() { (ulimit -v "$1"; shift; exec "$@"); }
# AddressSanitizer reserves terabytes of shadow address space at start, so a binary
# built with it cannot run under any ulimit -v: make test-san's run leaves these three
# to make test's and make test-ubsan's, which run them
if ldd "$ZTRAIN" 2>/dev/null | grep -q libasan; then
    echo "  ulimit -v checks not run: $ZTRAIN is built with AddressSanitizer"
else
expect_exit 2 "ulimit -v \(RLIMIT_AS\) leaves this process" -- uv 220000 "$ZTRAIN" init-model \
    --model_config "$TMP/mid.json" --output_dir "$TMP/mid2"
expect_exit 2 "ulimit -v \(RLIMIT_AS\) leaves this process" -- uv 500000 "$ZTRAIN" train --model "$TMP/mid" \
    --data $fix/tokens.npy --block_size 16 --max_steps 1 --threads 1
expect_exit 2 "ulimit -v \(RLIMIT_AS\) leaves this process" -- uv 800000 "$ZTRAIN" eval --model "$TMP/mid" \
    --per_device_eval_batch_size 64 \
    --data $fix/tokens.npy --block_size 64 --threads 1
fi
# and --max_memory still overrides it
expect_exit 2 "--max_memory" -- "$ZTRAIN" train --model "$TMP/mid" --data $fix/tokens.npy --block_size 16 \
    --max_steps 1 --max_memory 10MB
finish
