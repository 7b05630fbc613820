# The backend seam (kernels/backend.h): the model, the engine and the inference
# forward (infer/) reach every compute kernel and matrix product through a
# zt_backend table, never by name.
# Their object files must therefore leave no kernel symbol undefined; the only
# references into kernels/ are a table itself (zt_backend_cpu).  A direct call
# added later makes this fail with the symbol's name.
. "$(dirname "$0")/lib.bash"
obj=$(dirname "$ZTRAIN")/obj/src
kernels='^(zt_matmul|zt_rmsnorm_|zt_rope_|zt_bias_|zt_attention|zt_swiglu_|zt_xent_|zt_embed_|zt_transpose_|zt_adamw_step_shard|zt_accumulate|zt_sumsq|zt_round_bf16_inplace|zt_lmhead_|zt_scale_add)'
for o in model/llama.o model/lora.o model/frozen.o engine/engine.o engine/engine_view.o engine/offload.o infer/infer.o; do
    [ -f "$obj/$o" ] || { fail "$obj/$o not built"; continue; }
    direct=$(nm -u "$obj/$o" | awk '{print $2}' | grep -E "$kernels" || true)
    [ -z "$direct" ] || fail "$o calls kernels directly: $(echo $direct)"
done
# and the table is really what they use: the engine and the frozen weights run on
# the table they are given (the trainer picks it by --device), so neither names one.
# Offload (engine/offload.o) is the one exception: the state it keeps in host
# memory runs on the host's table, zt_backend_cpu, and on no other.
for o in engine/engine.o engine/engine_view.o model/frozen.o; do
    named=$(nm -u "$obj/$o" | awk '{print $2}' | grep -E '^zt_backend_(cpu|emu|cuda|named)$' || true)
    [ -z "$named" ] || fail "$o picks a backend table itself ($named) instead of taking the one it is given"
done
named=$(nm -u "$obj/engine/offload.o" | awk '{print $2}' | grep -E '^zt_backend_(emu|cuda|named)$' || true)
[ -z "$named" ] || fail "engine/offload.o names a device table ($named): offloaded state runs on the CPU's"
# the CPU backend's table is where the kernels are referenced
for sym in zt_matmul zt_rmsnorm_forward zt_attention16_forward zt_adamw_step_shard zt_sumsq; do
    nm -u "$obj/kernels/backend_cpu.o" | grep -q " $sym\$" || fail "backend_cpu.o does not reference $sym"
done
finish
