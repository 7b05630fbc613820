# Across machines over a real network: "machines" are network namespaces joined
# by a bridge, each with its own address, its own /etc/hosts and its own host
# name, and ztrain starts in them through `ztrain launch --hostfile`, with an rsh
# agent that enters the namespace in place of ssh and Open MPI's TCP transport
# only.  Every run is compared bit for bit (saved weights and per-step losses)
# with the same plan on this one machine and the same shard groups, and its
# per-link bytes with comm.h's formulas:
#   FULL_SHARD 2x2, HYBRID_SHARD 2x2 and 3x2 (the shard group found from the
#   topology), DeepSpeed ZeRO-2 3x2, and a resume after kill -9 of a remote rank
#   (`--resume_from_checkpoint latest`: the newest complete checkpoint).
#
# The network is tests/cli/netns.bash's: a bridge in its own namespace, nothing
# routed, this machine's own network untouched.  Everything is removed on exit,
# failed or not (trap).  Needs root (ip netns); without it the test fails and
# says so.
. "$(dirname "$0")/lib.bash"
root=$(cd "$(dirname "$0")/../.." && pwd)
fix=$root/tests/fixtures/gqa_tied

if [ "$(id -u)" -ne 0 ]; then
    fail "network namespaces need root (ip netns add); run this test as root, as CI does"
    finish
fi

. "$(dirname "$0")/netns.bash"
net_init "$TMP"
trap 'net_cleanup; rm -rf "$TMP"' EXIT
# on_one ARGS...: the same ranks on this machine, as one machine
on_one() { local np=$1; shift; timeout 300 "${mpi[@]}" -np "$np" "$ZTRAIN" "$@"; }

train=(train --model $fix --data $fix/tokens.npy --block_size 16 --per_device_train_batch_size 1
       --max_steps 3 --threads 1 --peak_gflops 1 --progress false)

# losses and grad norms per step, without the timings
losses() { /usr/bin/python3 -c '
import json, sys
for l in open(sys.argv[1]):
    r = json.loads(l); print(r["step"], repr(r["loss"]), repr(r["grad_norm"]))' "$1"; }

# compare NAME MACHINES NP ARGS...: across machines and on one, then the same bits
compare() {
    local name=$1 machines=$2 np=$3 out
    shift 3
    out=$(on_machines "${train[@]}" "$@" --output_dir "$TMP/$name.net" --log_jsonl "$TMP/$name.net.jsonl" 2>&1) ||
        { fail "$name across $machines machines: $out"; return 1; }
    printf '%s\n' "$out" > "$TMP/$name.net.out"
    on_one "$np" "${train[@]}" "$@" "${ONE_ONLY[@]}" --output_dir "$TMP/$name.one" \
        --log_jsonl "$TMP/$name.one.jsonl" > "$TMP/$name.one.out" 2>&1 ||
        { fail "$name on one machine: $(cat "$TMP/$name.one.out")"; return 1; }
    cmp -s "$TMP/$name.net/model.safetensors" "$TMP/$name.one/model.safetensors" ||
        fail "$name: the weights across machines differ from one machine's"
    [ "$(losses "$TMP/$name.net.jsonl")" = "$(losses "$TMP/$name.one.jsonl")" ] && [ -s "$TMP/$name.net.jsonl" ] ||
        fail "$name: losses differ: $(losses "$TMP/$name.net.jsonl") vs $(losses "$TMP/$name.one.jsonl")"
}

# link_bytes NAME M R KIND: each step's intra/inter split against the formulas
# (comm.h): FULL_SHARD moves (M-1)/M of everything across machines; HYBRID_SHARD
# only its replica all-reduce's (M-1)/M, and that all-reduce is 2 Psi / R (the
# shard of each unit, twice) where the reduce-scatter is Psi.  One machine: none.
link_bytes() {
    /usr/bin/python3 - "$@" <<'PY' || fail "per-link bytes of $1 ($4)"
import json, sys
path, M, R, kind = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
rows = [json.loads(l) for l in open(path)]
assert rows
for r in rows:
    b, link = r["comm_bytes"], r["comm_link_bytes"]
    total = sum(b.values())
    intra, inter = link["intra_machine"], link["inter_machine"]
    assert intra + inter == total, (intra, inter, total)
    if M == 1:
        assert inter == 0, r
    elif kind == "full":  # every collective spans the world: slices from the other M-1 machines
        assert b["allreduce"] == 0 and inter * M == total * (M - 1), (inter, total)
    elif kind == "hybrid":  # shard groups stay on a machine; the replica all-reduce crosses
        # the reduce-scatter moves Psi (every unit once), the all-reduce 2 Psi / R
        assert b["allreduce"] * R == 2 * b["reduce_scatter"], b
        # each all-reduce of B bytes keeps floor(B/M) on the machine, so the sum exceeds
        # the formula by under M bytes per call (the fixture has 3 units: 3 calls)
        assert 0 <= inter * M - b["allreduce"] * (M - 1) < M * 3, (inter, b)
        assert intra == b["allgather"] + b["reduce_scatter"] + b["allreduce"] - inter, (intra, b)
PY
}

# across NAME M R KIND PLAN ARGS...: compare on M machines x R ranks, then the plan
# line (PLAN: a grep pattern) and each step's per-link bytes (KIND: full or hybrid)
across() {
    local name=$1 m=$2 r=$3 kind=$4 plan=$5
    shift 5
    compare "$name" "$m" $((m * r)) "$@" || return
    grep -q "$plan" "$TMP/$name.net.out" || fail "$name: the plan line: $(grep plan: "$TMP/$name.net.out")"
    link_bytes "$TMP/$name.net.jsonl" "$m" "$r" "$kind"
}

ONE_ONLY=()
if ! net_up 2 2; then
    fail "could not make network namespaces (ip netns / veth / bridge): is this a root shell with CAP_NET_ADMIN?"
    finish
fi
across full22 2 2 full "plan: FSDP, FULL_SHARD (ZeRO-3), 4 ranks (2 machines x 2), shard group 4" \
    --use_fsdp --fsdp_sharding_strategy FULL_SHARD
link_bytes "$TMP/full22.one.jsonl" 1 4 full
# hybrid: the shard group is the machine, found from the topology; one machine needs the flag
ONE_ONLY=(--ranks_per_node 2)
across hybrid22 2 2 hybrid "4 ranks (2 machines x 2), shard group 2," --use_fsdp --fsdp_sharding_strategy HYBRID_SHARD

# kill -9 of a rank on the remote machine: the job stops (not hangs), and a new launch
# with `--resume_from_checkpoint latest` continues from the newest complete checkpoint
# (skipping one the kill cut short) to the same bits as a run that never stopped.
# Checkpoints every 5 of 40 steps; the kill comes once checkpoint-5 is complete.
long=("${train[@]}" --max_steps 40 --save_steps 5 --use_fsdp --fsdp_sharding_strategy HYBRID_SHARD)
on_machines "${long[@]}" --output_dir "$TMP/kill" > "$TMP/kill.out" 2>&1 &
job=$!
for ((i = 0; i < 600; i++)); do
    [ -f "$TMP/kill/checkpoint-5/trainer_state.json" ] || ! kill -0 $job 2>/dev/null && break
    sleep 0.1
done
victim=""
for pid in $(ip netns pids ${net_pre}h1); do
    [ "$(ps -o comm= -p "$pid")" = ztrain ] && victim=$pid && break
done
if [ -z "$victim" ]; then
    fail "no ztrain rank found on h1 to kill (the run ended first?): $(tail -5 "$TMP/kill.out")"
else
    kill -9 "$victim"
fi
wait $job
rc=$?
[ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] || fail "after kill -9 of rank pid $victim on h1 the job should fail, not exit $rc"
[ -f "$TMP/kill/model.safetensors" ] && fail "the killed run should not have finished: $(tail -3 "$TMP/kill.out")"
# the newest checkpoint: a save completes by renaming its temporary directory to checkpoint-N
newest=$(ls -d "$TMP"/kill/checkpoint-* 2>/dev/null | sed 's|.*/checkpoint-||' | sort -n | tail -1)
out=$(on_machines "${long[@]}" --output_dir "$TMP/kill" --resume_from_checkpoint latest \
      --log_jsonl "$TMP/kill.resumed.jsonl" 2>&1) || fail "resume after the kill: $out"
last=$(printf '%s' "$out" | sed -n 's|.*resumed from .*/checkpoint-\([0-9]*\) at step \1.*|\1|p')
if [ -z "$last" ] || [ "$last" != "$newest" ]; then
    fail "latest should resume from the newest complete checkpoint (checkpoint-$newest): $out"
else
    on_one 4 "${long[@]}" --ranks_per_node 2 --output_dir "$TMP/nokill" --save_steps 0 \
        --log_jsonl "$TMP/nokill.jsonl" > "$TMP/nokill.out" 2>&1 || fail "uninterrupted run: $(cat "$TMP/nokill.out")"
    cmp -s "$TMP/kill/model.safetensors" "$TMP/nokill/model.safetensors" ||
        fail "resumed after kill -9 (from checkpoint-$last): weights differ from the uninterrupted run"
    [ "$(losses "$TMP/kill.resumed.jsonl")" = "$(losses "$TMP/nokill.jsonl" | tail -n +$((last + 1)))" ] ||
        fail "resumed losses differ from the uninterrupted run's steps $((last + 1))-40"
fi
net_cleanup

if ! net_up 3 2; then
    fail "could not make 3 network namespaces"
    finish
fi
across hybrid32 3 2 hybrid "6 ranks (3 machines x 2), shard group 2," --use_fsdp --fsdp_sharding_strategy HYBRID_SHARD
ONE_ONLY=()
across ds32 3 2 full "plan: DEEPSPEED, ZeRO-2, 6 ranks (3 machines x 2), shard group 6" --use_deepspeed --zero_stage 2
finish
