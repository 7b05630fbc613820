"""Group a flat perf profile (perf report --no-children --sort dso,symbol -g none --stdio)
into the parts of a ztrain training step, by sample counts (the report needs -n: the JIT
code is spread over thousands of addresses whose rounded percentages do not add up).
Usage: perf report -n --no-children --sort dso,symbol -g none --stdio | python3 bench/perf_groups.py

oneDNN's JIT kernels live in the "[JIT] tid N" object: they are the matrix products
(ztrain's only oneDNN primitives are matmuls).  bench/profile_single.sh runs with
DNNL_JIT_PROFILE=2, so oneDNN names them in perf's map file and the products split into
the micro-kernels (jit_brgemm_amx_uker_base_t, ...) and the copies that pack the operands
into the micro-kernels' layouts (jit_brgemm_matmul_copy_a_*, copy_b_*); a profile taken
without it has raw addresses there, counted as micro-kernels.  Raw addresses in libgomp
are OpenMP's barrier and spin waits.  Kernel time is mostly page faults: first touch of
the buffers at start-up (bench/profile_single.sh runs include start-up)."""
import re
import sys

GROUPS = [  # (group, object regex, symbol regex), first match wins
    ("matmul: oneDNN's operand packing (copy_a, copy_b)", r"^\[JIT\]|libdnnl", r"copy|reorder"),
    ("matmul: oneDNN's micro-kernels and the rest of libdnnl", r"^\[JIT\]|libdnnl", r""),
    ("matmul (gemm_bf16.c: bf16 on CPUs without native bf16)", r"ztrain", r"gemm_bf16"),
    ("attention (tiles + mm_acc / pmm)", r"ztrain", r"attention|mm_acc|mm_tile|pmm|ptile"),
    ("AdamW + grad norm/clip", r"ztrain", r"adamw|engine_step|grad_end|grad_norm|clip"),
    ("dtype conversion (fp32<->bf16)", r"ztrain", r"bf16|convert|load_f32|store_f32"),
    ("SwiGLU", r"ztrain", r"swiglu"),
    ("RMSNorm", r"ztrain", r"rmsnorm"),
    ("RoPE", r"ztrain", r"rope"),
    ("cross-entropy", r"ztrain", r"xent"),
    ("other ztrain", r"ztrain", r""),
    ("OpenMP (libgomp: waits, barriers)", r"libgomp", r""),
    ("kernel (page faults, scheduling)", r"kernel", r""),
    ("libc (memset, memcpy)", r"libc", r""),
    ("other", r"", r""),
]

totals = {g[0]: 0.0 for g in GROUPS}
line_re = re.compile(r"^\s+[0-9.]+%\s+(\d+)\s+(\S+(?: tid \d+)?)\s+\[.\]\s+(\S+)")
for line in sys.stdin:
    m = line_re.match(line)
    if not m:
        continue
    samples, dso, sym = int(m.group(1)), m.group(2), m.group(3)
    for name, dso_re, sym_re in GROUPS:
        if re.search(dso_re, dso) and re.search(sym_re, sym):
            totals[name] += samples
            break
total = sum(totals.values()) or 1
for name, _, _ in GROUPS:
    if totals[name] / total >= 0.0005:
        print("%6.1f%%  %s" % (100.0 * totals[name] / total, name))
print("%d samples" % total)
