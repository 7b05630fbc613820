# ztrain launch across machines, without a network: the mpirun line it builds
# from a hostfile, a host list and the Accelerate YAML's multi-machine keys, the
# OMPI_MCA_* settings it leaves alone, and the contradictions it refuses (exit 2,
# naming both sides).  tests/cli/multinode.sh runs the same lines over TCP.
. "$(dirname "$0")/lib.bash"

printf '# two machines\nnode-a slots=2   # first\n\nnode-b slots=2 max_slots=4\n' > "$TMP/hosts"
cmd=$("$ZTRAIN" launch --hostfile "$TMP/hosts" --dry_run train --model m --data d 2>"$TMP/err") ||
    fail "launch --hostfile: $(cat "$TMP/err")"
printf '%s' "$cmd" | grep -q "^mpirun -np 4 --hostfile $TMP/hosts .* train --threads [0-9]* --model m --data d$" ||
    fail "hostfile mpirun line: $cmd"
grep -q "4 ranks on 2 machines x 2 (hostfile $TMP/hosts)" "$TMP/err" || fail "launch should say the layout: $(cat "$TMP/err")"
# binding is per machine: threads = this machine's cores / the 2 ranks each machine holds
cores=$(nproc)
want=$((cores / 2 > 0 ? cores / 2 : 1))
printf '%s' "$cmd" | grep -q -- "--threads $want " || fail "threads per rank should be $want (cores $cores / 2): $cmd"

cmd=$(OMPI_MCA_btl=tcp,self OMPI_MCA_plm_rsh_agent="/x/agent -q" "$ZTRAIN" launch --hosts node-a:3,node-b:3 \
      --dry_run train 2>"$TMP/err") || fail "launch --hosts"
printf '%s' "$cmd" | grep -q "^mpirun -np 6 --host node-a:3,node-b:3 " || fail "host list mpirun line: $cmd"
# the environment's Open MPI settings reach mpirun as they are: shown, not turned into flags
for setting in "OMPI_MCA_btl=tcp,self" "OMPI_MCA_plm_rsh_agent=/x/agent -q"; do
    grep -Fxq "ztrain launch: from the environment: $setting" "$TMP/err" ||
        fail "$setting should be shown as given: $(cat "$TMP/err")"
done
printf '%s' "$cmd" | grep -q -- "--mca" && fail "launch should not add --mca settings: $cmd"
# a binding set in the environment replaces launch's own
cmd=$(OMPI_MCA_hwloc_base_binding_policy=none "$ZTRAIN" launch --hosts a:1,b:1 --dry_run train 2>/dev/null)
printf '%s' "$cmd" | grep -q -- "--bind-to\|--map-by" && fail "the environment's binding should win: $cmd"

# the Accelerate YAML: num_machines, num_processes and mpirun_config.mpirun_hostfile
yaml() { # yaml FILE num_machines num_processes [extra lines]
    printf 'distributed_type: MULTI_CPU\nnum_machines: %s\nnum_processes: %s\nmachine_rank: 0\n' "$2" "$3" > "$1"
    printf 'main_process_ip: 10.1.2.3\nmain_process_port: 29500\nmpirun_config:\n  mpirun_ccl: %s\n' "'1'" >> "$1"
    printf '  mpirun_hostfile: %s\n%s' "$TMP/hosts" "${4:-}" >> "$1"
}
yaml "$TMP/ok.yaml" 2 4
cmd=$("$ZTRAIN" launch --config_file "$TMP/ok.yaml" --dry_run train --model m 2>"$TMP/err") ||
    fail "YAML with mpirun_hostfile: $(cat "$TMP/err")"
printf '%s' "$cmd" | grep -q "mpirun -np 4 --hostfile $TMP/hosts .* train --config_file $TMP/ok.yaml" ||
    fail "YAML mpirun line: $cmd"
grep -q "main_process_ip 10.1.2.3, main_process_port 29500 .* not used" "$TMP/err" ||
    fail "main_process_ip/port should be shown: $(cat "$TMP/err")"
grep -q "mpirun_ccl 1 .*no effect" "$TMP/err" || fail "mpirun_ccl should be shown: $(cat "$TMP/err")"
yaml "$TMP/machines.yaml" 3 4
expect_exit 2 "num_machines in $TMP/machines.yaml is 3, but hostfile $TMP/hosts lists 2 hosts" -- \
    "$ZTRAIN" launch --config_file "$TMP/machines.yaml" --dry_run train
yaml "$TMP/procs.yaml" 2 6
expect_exit 2 "num_processes in $TMP/procs.yaml is 6, but hostfile $TMP/hosts has 4 slots" -- \
    "$ZTRAIN" launch --config_file "$TMP/procs.yaml" --dry_run train
# a flag overrides the file, and is checked the same way
expect_exit 2 "--num_processes is 2, but hostfile $TMP/hosts has 4 slots" -- \
    "$ZTRAIN" launch --config_file "$TMP/ok.yaml" --num_processes 2 --dry_run train
sed 's/machine_rank: 0/machine_rank: 1/' "$TMP/ok.yaml" > "$TMP/rank1.yaml"
expect_exit 2 "machine_rank 1: with MPI, launch runs once, on the first machine" -- \
    "$ZTRAIN" launch --config_file "$TMP/rank1.yaml" --dry_run train
printf 'distributed_type: MULTI_CPU\nnum_machines: 2\nnum_processes: 4\n' > "$TMP/nohosts.yaml"
expect_exit 2 "num_machines in $TMP/nohosts.yaml is 2, but no hosts were given" -- \
    "$ZTRAIN" launch --config_file "$TMP/nohosts.yaml" --dry_run train

# in a Slurm allocation mpirun finds the nodes; launch takes the task count and binds per node
# (the environment is faked here: no Slurm on the test machine, so srun itself is not run)
cmd=$(SLURM_JOB_NUM_NODES=2 SLURM_NTASKS=4 "$ZTRAIN" launch --dry_run train 2>"$TMP/err") ||
    fail "launch in a Slurm allocation: $(cat "$TMP/err")"
printf '%s' "$cmd" | grep -q "^mpirun -np 4 .* train --threads $want$" || fail "Slurm allocation: $cmd"
expect_exit 2 "num_machines in $TMP/nohosts.yaml is 2, but the Slurm allocation has 3 nodes" -- \
    env SLURM_JOB_NUM_NODES=3 "$ZTRAIN" launch --config_file "$TMP/nohosts.yaml" --dry_run train

# malformed hosts name the file and line, or the flag
printf 'node-a slots=2\nnode-b slot=2\n' > "$TMP/typo"
expect_exit 2 "hostfile $TMP/typo:2: 'slot=2' not understood" -- "$ZTRAIN" launch --hostfile "$TMP/typo" --dry_run train
printf 'node-a slots=0\n' > "$TMP/zero"
expect_exit 2 "hostfile $TMP/zero:1: 'slots=0' not understood .*N >= 1" -- \
    "$ZTRAIN" launch --hostfile "$TMP/zero" --dry_run train
printf '# nothing\n\n' > "$TMP/empty"
expect_exit 2 "hostfile $TMP/empty: no hosts" -- "$ZTRAIN" launch --hostfile "$TMP/empty" --dry_run train
expect_exit 2 "hostfile $TMP/missing: cannot open" -- "$ZTRAIN" launch --hostfile "$TMP/missing" --dry_run train
printf 'node-a\nnode-b\n' > "$TMP/noslots"
expect_exit 2 "does not give every host's slots=N" -- "$ZTRAIN" launch --hostfile "$TMP/noslots" --dry_run train
expect_exit 2 "5 processes do not spread evenly over the 2 hosts" -- \
    "$ZTRAIN" launch --hostfile "$TMP/noslots" --num_processes 5 --dry_run train
expect_exit 2 "--hosts: 'b:x': expected host or host:N" -- "$ZTRAIN" launch --hosts a:2,b:x --dry_run train
expect_exit 2 "give --hostfile or --hosts, not both" -- \
    "$ZTRAIN" launch --hosts a:2 --hostfile "$TMP/hosts" --dry_run train
finish
