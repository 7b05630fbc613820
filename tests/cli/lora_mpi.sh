# LoRA through the engine on real ranks (issue 46): test_lora under mpirun with 2 ranks,
# where PEFT's batch of two rows is the global batch, one row a rank, and the adapter
# units are all-reduced (stage 0), reduce-scattered (stages 1-3) and, at stage 3,
# gathered beside their frozen base units; the three steps must give PEFT's losses,
# grad norms and adapters as on one rank (tests/test_lora.c, docs/lora.md).
. "$(dirname "$0")/lib.bash"
build=$(dirname "$ZTRAIN")
out=$("${mpi[@]}" -np 2 "$build/tests/test_lora" 2>&1)
rc=$?
printf '%s\n' "$out" | grep -q "world of 2 ranks" || fail "test_lora did not run on 2 ranks: $(printf '%s\n' "$out" | tail -5)"
printf '%s\n' "$out" | grep -Eq "^[1-9][0-9]* passed, 0 failed" && [ "$rc" -eq 0 ] ||
    { fail "test_lora on 2 ranks (exit $rc)"; printf '%s\n' "$out" | tail -30; }
# LoRA through the command line on 1, 2 and 4 ranks at every ZeRO stage, and FSDP's
# HYBRID_SHARD on 4 (2 nodes of 2): the same global batch of 4 rows (4, 2 or 1 a rank),
# 3 steps, with adapter dropout 0.1 (its mask keyed on the global row, so every rank count
# draws the same); the losses and grad norms within 1e-5 relative of the 1-rank run's and the
# adapters written at the end within 1e-6 (the reductions' sums in other orders, nothing
# else).  At stage 2 under the aligned bf16 plan, a step all-gathers the adapter units
# only: as many bytes as it reduce-scatters (the frozen base, gathered once at the start,
# never changes).
fix=tests/fixtures/gqa_tied
args=(--model $fix --data $fix/tokens.npy --block_size 16 --max_steps 3 --learning_rate 1e-3 --threads 1
      --peak_gflops 1000 --shuffle false --use_peft --lora_r 4 --lora_alpha 8 --lora_target_modules all-linear
      --lora_dropout 0.1)
run() { # name ranks face...
    local name=$1 np=$2
    shift 2
    "${mpi[@]}" -np "$np" "$ZTRAIN" train "${args[@]}" --per_device_train_batch_size $((4 / np)) "$@" \
        --output_dir "$TMP/$name" --log_jsonl "$TMP/$name.jsonl" >"$TMP/$name.log" 2>&1 ||
        fail "$name: $(tail -3 "$TMP/$name.log")"
}
run r1 1
names=()
for np in 2 4; do
    for z in 0 1 2 3; do
        run "r${np}_z$z" "$np" --use_deepspeed --zero_stage "$z"
        names+=("r${np}_z$z")
    done
done
run r4_hybrid 4 --use_fsdp --fsdp_sharding_strategy HYBRID_SHARD --ranks_per_node 2
names+=(r4_hybrid)
/usr/bin/python3 - "$TMP" "${names[@]}" <<'PY' || fail "LoRA across rank counts and stages ($TMP)"
import json, sys
sys.path.insert(0, "tests/cli")
from st_f32 import f32_tensors
tmp, names = sys.argv[1], sys.argv[2:]
def rows(n):
    return [(r["loss"], r["grad_norm"]) for r in map(json.loads, open(f"{tmp}/{n}.jsonl"))]
def adapters(n):
    return f32_tensors(f"{tmp}/{n}/adapter_model.safetensors")
want, wa = rows("r1"), adapters("r1")
assert len(want) == 3
bad = []
for n in names:
    got, ga = rows(n), adapters(n)
    if len(got) != 3 or any(abs(g - w) > 1e-5 * abs(w) for gr, wr in zip(got, want) for g, w in zip(gr, wr)):
        bad.append(f"{n}: {got} against {want}")
    worst = max(abs(x - y) for t in wa for x, y in zip(wa[t], ga[t])) if sorted(ga) == sorted(wa) else 1.0
    if worst > 1e-6:
        bad.append(f"{n}: adapters {worst:.3g} from the 1-rank run's")
assert not bad, "\n".join(bad)
PY
run z2_bf16 2 --use_deepspeed --zero_stage 2 --torch_dtype bfloat16 --mixed_precision bf16
grep -o '"allgather": [0-9]*, "reduce_scatter": [0-9]*' "$TMP/z2_bf16.jsonl" |
    awk '{ if ($2 + 0 != $4 + 0 || $2 + 0 == 0) bad = 1 } END { exit bad || NR != 3 }' ||
    fail "stage 2's traffic a step: $(grep -o '"comm_bytes": {[^}]*}' "$TMP/z2_bf16.jsonl")"
finish
