# Slurm's srun starts ztrain without mpirun (issue 13 point 2).  The test makes a
# one-node Slurm cluster of Debian's packages (munged, slurmctld and slurmd,
# started here as root with their own key, configuration and state under $TMP,
# in a network namespace of their own, entered with nsenter, so that their ports
# clash with nothing; slurmd needs this machine's /sys/fs/cgroup, which `ip netns
# exec` would hide) and runs `srun --mpi=pmix -n 2 ztrain train` with
# HYBRID_SHARD (Debian's Open MPI has PMIx and no Slurm PMI: --mpi=pmi2 and
# --mpi=none fail in MPI_Init, saying so): the ranks find
# each other through Slurm's PMIx server, the topology comes out as 1 machine x 2
# ranks (shard group 2, no --ranks_per_node), and the losses and the weights are
# those of `mpirun -np 2` with the same plan, bit for bit.  Then the ranks get
# Slurm's SIGTERM (scancel --signal=TERM, as a preemption or `--signal` before a
# time limit sends it), save a checkpoint and stop with exit 0, and a second srun
# continues from it with `--resume_from_checkpoint latest`.  Last, the example batch
# script (examples/slurm/train_hybrid.sbatch) runs as it is, is stopped by SIGTERM with
# a checkpoint, requeues itself and resumes from latest.
# Needs root (slurmd starts tasks as their user; ip netns); without it, or without
# the packages (scripts/setup.sh installs them), the test fails and says so.
. "$(dirname "$0")/lib.bash"
root=$(cd "$(dirname "$0")/../.." && pwd)
fix=$root/tests/fixtures/gqa_tied
ZTRAIN=$(cd "$(dirname "$ZTRAIN")" && pwd)/$(basename "$ZTRAIN")

if [ "$(id -u)" -ne 0 ]; then
    fail "a Slurm cluster needs root (slurmd, ip netns); run this test as root, as CI does"
    finish
fi
for tool in munged slurmctld slurmd srun sinfo scancel; do
    command -v $tool > /dev/null || { fail "$tool is not installed (scripts/setup.sh installs munge, slurmctld, slurmd, slurm-client)"; finish; }
done

d=$TMP/slurm
ns=ztslurm$$
mkdir -p "$d/state" "$d/spool" "$d/tmp"
chmod 700 "$d"
pids=()
cleanup() {
    local pid
    for pid in $(ip netns pids $ns 2>/dev/null); do kill -9 "$pid" 2>/dev/null; done
    for pid in "${pids[@]}"; do kill -9 "$pid" 2>/dev/null; done
    wait 2>/dev/null
    ip netns del $ns 2>/dev/null
    rm -rf "$TMP"
}
trap cleanup EXIT
# lo, and a veth pair (both ends inside) with an address on one: Slurm resolves with
# AI_ADDRCONFIG, which finds no IPv4 address at all where only loopback has one
addr=198.19.0.1
ip netns add $ns && ip -n $ns link set lo up && ip -n $ns link add zt0 type veth peer name zt1 &&
    ip -n $ns addr add $addr/24 dev zt0 && ip -n $ns link set zt0 up && ip -n $ns link set zt1 up ||
    { fail "could not make a network namespace with an address (ip netns add, veth)"; finish; }
in_ns=(nsenter --net=/run/netns/$ns env SLURM_CONF="$d/slurm.conf")

# munge: its own key and socket (slurm.conf's AuthInfo names the socket)
dd if=/dev/urandom of="$d/munge.key" bs=1024 count=1 status=none
chmod 400 "$d/munge.key"
"${in_ns[@]}" munged --foreground --force --key-file="$d/munge.key" --socket="$d/munge.sock" --pid-file="$d/munged.pid" \
    --log-file="$d/munged.log" --seed-file="$d/munged.seed" > "$d/munged.out" 2>&1 &
pids+=($!)

node=$(hostname -s)
cat > "$d/slurm.conf" <<EOF
ClusterName=zt
SlurmctldHost=$node($addr)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$d/munge.sock
StateSaveLocation=$d/state
SlurmdSpoolDir=$d/spool
TmpFS=$d/tmp
SlurmctldPidFile=$d/slurmctld.pid
SlurmdPidFile=$d/slurmd.pid
SlurmctldLogFile=$d/slurmctld.log
SlurmdLogFile=$d/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
SchedulerParameters=sched_interval=2
MpiDefault=none
NodeName=$node NodeAddr=$addr CPUs=$(nproc) State=UNKNOWN
PartitionName=zt Nodes=$node Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
EOF
"${in_ns[@]}" slurmctld -D -f "$d/slurm.conf" > "$d/slurmctld.out" 2>&1 &
pids+=($!)
"${in_ns[@]}" slurmd -D -f "$d/slurm.conf" > "$d/slurmd.out" 2>&1 &
pids+=($!)
for _ in $(seq 1 100); do
    [ "$("${in_ns[@]}" sinfo -h -o %t 2>/dev/null)" = idle ] && break
    sleep 0.1
done
if [ "$("${in_ns[@]}" sinfo -h -o %t 2>/dev/null)" != idle ]; then
    fail "the one-node cluster did not come up: $("${in_ns[@]}" sinfo 2>&1 | tail -2); $(tail -n 5 "$d/slurmctld.log" "$d/slurmd.log" "$d/slurmd.out" "$d/munged.out" 2>&1)"
    finish
fi

train=(train --model $fix --data $fix/tokens.npy --block_size 16 --per_device_train_batch_size 1 --threads 1
       --peak_gflops 1 --progress false --use_fsdp --fsdp_sharding_strategy HYBRID_SHARD)
losses() { /usr/bin/python3 -c '
import json, sys
for l in open(sys.argv[1]):
    r = json.loads(l); print(r["step"], repr(r["loss"]), repr(r["grad_norm"]))' "$1"; }

# srun against mpirun, same plan: the same bits
out=$(timeout 120 "${in_ns[@]}" srun --mpi=pmix -n 2 "$ZTRAIN" "${train[@]}" --max_steps 4 --output_dir "$TMP/srun" \
      --log_jsonl "$TMP/srun.jsonl" 2>&1) || fail "srun --mpi=pmix -n 2 ztrain train: $out"
printf '%s' "$out" | grep -q "plan: FSDP, HYBRID_SHARD (ZeRO-3 in node groups), 2 ranks (1 machine x 2), shard group 2," ||
    fail "srun: the ranks per node should come from the topology: $(printf '%s' "$out" | grep -m1 plan: || printf '%s' "$out")"
timeout 120 "${mpi[@]}" -np 2 "$ZTRAIN" "${train[@]}" --max_steps 4 --output_dir "$TMP/mpirun" \
    --log_jsonl "$TMP/mpirun.jsonl" > "$TMP/mpirun.out" 2>&1 || fail "mpirun -np 2: $(cat "$TMP/mpirun.out")"
cmp -s "$TMP/srun/model.safetensors" "$TMP/mpirun/model.safetensors" ||
    fail "srun and mpirun trained different weights"
[ -s "$TMP/srun.jsonl" ] && [ "$(losses "$TMP/srun.jsonl")" = "$(losses "$TMP/mpirun.jsonl")" ] ||
    fail "srun and mpirun losses differ"

# Slurm's SIGTERM to the tasks: a checkpoint, exit 0; srun again continues from it
"${in_ns[@]}" srun --mpi=pmix -n 2 -J zt-preempt "$ZTRAIN" "${train[@]}" --max_steps 1000000 --output_dir "$TMP/pre" \
    > "$TMP/pre.out" 2>&1 &
job=$!
wait_for "$TMP/pre.out" '^activations:' || fail "the preempted run never started: $(tail -3 "$TMP/pre.out")"
"${in_ns[@]}" scancel --signal=TERM --name zt-preempt
timeout 60 tail --pid=$job -f /dev/null
wait $job
rc=$?
[ "$rc" -eq 0 ] || fail "srun after SIGTERM: exit $rc (want 0): $(tail -4 "$TMP/pre.out")"
step=$(sed -n 's/.*stopped by SIGTERM after step \([0-9]*\) of .*checkpoint saved to.*/\1/p' "$TMP/pre.out")
if [ -z "$step" ]; then
    fail "no checkpoint after Slurm's SIGTERM: $(tail -4 "$TMP/pre.out")"
else
    out=$(timeout 120 "${in_ns[@]}" srun --mpi=pmix -n 2 "$ZTRAIN" "${train[@]}" --max_steps $((step + 2)) \
          --output_dir "$TMP/pre" --resume_from_checkpoint latest --override_checkpoint_args 2>&1) ||
        fail "srun resume: $out"
    printf '%s' "$out" | grep -q "resumed from $TMP/pre/checkpoint-$step at step $step: bit-exact" ||
        fail "srun resume from latest: $out"
fi

# docs/multinode.md's batch script, examples/slurm/train_hybrid.sbatch, as it is: sbatch's
# command line asks for 1 node x 2 tasks x 1 CPU in place of its 2 x 8 x 4, in a directory
# holding what it names (build/ztrain; out/init, a model with room for block_size 1024;
# data/train.bin).  scancel --signal=TERM stops the ranks with a checkpoint, the script
# requeues the job itself, and its second run resumes from latest.  (Slurm holds a
# requeued job about two minutes; the test lets it start at once.)
job=$TMP/job
mkdir -p "$job/out/hybrid" "$job/data" "$job/build" "$TMP/cfg"
ln -s "$ZTRAIN" "$job/build/ztrain"
/usr/bin/python3 - "$fix/config.json" "$TMP/cfg/config.json" "$job/data/train.bin" <<'PY'
import json, random, sys
c = json.load(open(sys.argv[1]))
c["max_position_embeddings"] = 1024
json.dump(c, open(sys.argv[2], "w"))
random.seed(1)
open(sys.argv[3], "wb").write(bytes(b for _ in range(40000) for b in (random.randrange(256), 0)))  # uint16 ids
PY
"$ZTRAIN" init-model --model_config "$TMP/cfg/config.json" --output_dir "$job/out/init" > /dev/null || fail "init-model"
id=$("${in_ns[@]}" sbatch --parsable --nodes=1 --ntasks-per-node=2 --cpus-per-task=1 --chdir="$job" \
     "$root/examples/slurm/train_hybrid.sbatch") || { fail "sbatch: $id"; finish; }
log=$job/out/hybrid/slurm-$id.log
wait_for "$job/out/hybrid/train-$id-0.jsonl" '"step"' || fail "the batch job never trained: $(tail -5 "$log")"
"${in_ns[@]}" scancel --signal=TERM "$id"
released=0
for _ in $(seq 1 120); do
    grep -q "resumed from" "$log" && break
    # the requeued job waits for its begin time; let it start soon (the scheduler
    # looks every 2 s: sched_interval above), but not in the second its first run's
    # credential was revoked: slurmd refuses a launch whose credential is not newer
    # than the revocation ("Job credential revoked") and the job ends for good
    if [ "$released" -eq 0 ] && "${in_ns[@]}" squeue -h -j "$id" -o "%T %r" | grep -q "PENDING BeginTime"; then
        "${in_ns[@]}" scontrol update JobId="$id" StartTime=now+3 && released=1
    fi
    sleep 1
done
step=$(sed -n 's|^stopped by SIGTERM after step \([0-9]*\) of 20000: checkpoint saved to out/hybrid/checkpoint-\1;.*|\1|p' "$log")
if [ -z "$step" ]; then
    fail "the batch job did not stop with a checkpoint on SIGTERM: $(grep -v '^|' "$log" | tail -5)"
else
    "$ZTRAIN" checkpoint show "$job/out/hybrid/checkpoint-$step" > /dev/null 2>&1 ||
        fail "the batch job's checkpoint-$step does not verify"
    grep -q "^resumed from out/hybrid/checkpoint-$step at step $step: bit-exact" "$log" ||
        fail "the requeued batch job did not resume from checkpoint-$step: $(grep -v '^|' "$log" | tail -5)"
    wait_for "$job/out/hybrid/train-$id-1.jsonl" '"step"' || fail "the requeued run (restart 1) logged no step"
fi
"${in_ns[@]}" scancel "$id"
finish
