# Config values out of any sane range are refused with exit 2 naming the key
# (issue 44, point 9), by init-model and by train, before anything is written:
# initializer_range 1e300 (all-inf weights), rope_theta 1e-300 (NaN at step 1),
# rms_norm_eps 1e300 (a zero gradient) or 1e-300 (0 in fp32), a head_dim of 1e6,
# and sizes whose parameter count overflows.  The edges of each range are taken.
. "$(dirname "$0")/lib.bash"
fix=tests/fixtures/gqa_tied
# cfg NAME KEY VALUE: the fixture's config.json with KEY set to VALUE
cfg() {
    python3 - "$fix/config.json" "$TMP/$1.json" "$2" "$3" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
for k, v in zip(sys.argv[3].split(","), sys.argv[4].split(",")):
    c[k] = json.loads(v)
json.dump(c, open(sys.argv[2], "w"))
PY
}
refused() { # refused NAME KEYS VALUES PATTERN
    cfg "$1" "$2" "$3"
    expect_exit 2 "$4" -- "$ZTRAIN" init-model --model_config "$TMP/$1.json" --output_dir "$TMP/$1.out"
    [ -e "$TMP/$1.out/model.safetensors" ] && fail "$1: init-model wrote a model"
    mkdir -p "$TMP/$1.dir" && cp "$TMP/$1.json" "$TMP/$1.dir/config.json" && cp $fix/model.safetensors "$TMP/$1.dir/"
    expect_exit 2 "$4" -- "$ZTRAIN" train --model "$TMP/$1.dir" --data $fix/tokens.npy --block_size 16 --max_steps 1
}
accepted() { # accepted NAME KEYS VALUES
    cfg "$1" "$2" "$3"
    "$ZTRAIN" init-model --model_config "$TMP/$1.json" --output_dir "$TMP/$1.out" > /dev/null 2>&1 ||
        fail "$1: $2 = $3 should be accepted"
}
refused init initializer_range 1e300 "initializer_range 1e\+300 is out of range"
refused init2 initializer_range 1.5 "initializer_range 1.5 is out of range"
accepted init_edge initializer_range 1.0
refused theta rope_theta 1e-300 "rope_theta 1e-300 is out of range"
refused theta2 rope_theta 1e13 "rope_theta 1e\+13 is out of range"
accepted theta_edge rope_theta 1.0
refused eps rms_norm_eps 1e300 "rms_norm_eps 1e\+300 is out of range"
refused eps2 rms_norm_eps 1e-300 "rms_norm_eps 1e-300 is out of range"
accepted eps_edge rms_norm_eps 0.1
refused hd head_dim 1000000 "head_dim 1000000 is out of range"
refused hd2 head_dim,num_attention_heads,num_key_value_heads 2050,1,1 "head_dim 2050 is out of range"
refused big hidden_size,intermediate_size,head_dim 1000000000,1000000000,2 "make [0-9.e+]+ parameters: out of range"
finish
