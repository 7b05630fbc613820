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
finish
