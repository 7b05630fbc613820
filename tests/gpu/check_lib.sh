# tests/gpu/check_lib.sh — the readers tests/gpu/check.sh applies to what its runs write
# (sourced, not run): ztrain's JSONL log, PyTorch's JSON line and the profile's table.
# They are here, apart from the GPU check, so that tests/cli/gpu_check_lib.sh can hold
# them to ztrain's real output on a machine without a GPU.

# losses FILE: the losses of a JSONL log, one per line
losses() { sed -n 's/.*"loss": \([^,]*\),.*/\1/p' "$1"; }
# max_rel A B: the largest relative difference between two logs' losses (inf when they
# differ in length or hold none)
max_rel() {
    paste <(losses "$1") <(losses "$2") | awk '
        NF != 2 { bad = 1 } NF == 2 { d = $1 - $2; if (d < 0) d = -d; s = $2 < 0 ? -$2 : $2; r = d / (s > 1e-12 ? s : 1e-12);
        if (r > m) m = r; n++ } END { if (bad || n == 0) print "inf"; else printf "%.3g\n", m }'
}
# le A B: A <= B, A a number (not inf)
le() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a != "inf" && a + 0 <= b + 0) }'; }
# zt_median FILE KEY: the median of a JSONL field over steps 3.. but 11 and 12 (the
# profiled steps; the lower of the two middle values for an even count), 0 when none
zt_median() { sed -n "s/.*\"step\": \([0-9]*\),.*\"$2\": \([^,]*\),.*/\1 \2/p" "$1" |
    awk '$1 > 2 && ($1 < 11 || $1 > 12) { print $2 }' | sort -g | awk '{ v[NR] = $1 } END { print NR ? v[int((NR + 1) / 2)] : 0 }'; }
# jget FILE KEY: KEY of the last JSON line of FILE that has it (torch_bench.py prints
# one; warnings may follow it)
jget() { python3 -c '
import json, sys
for line in reversed(open(sys.argv[1], errors="replace").read().splitlines()):
    try:
        d = json.loads(line)
    except ValueError:
        continue
    if isinstance(d, dict) and sys.argv[2] in d:
        print(d[sys.argv[2]])
        break' "$1" "$2" 2>/dev/null; }
# top10 FILE: the profile table's first line, its header and its 10 largest kernel
# classes (the table is sorted by time) from a run's output
top10() { sed -n '/^profile: steps/,$p' "$1" | head -12; }
# bench_ms FILE ROW [LABEL]: the milliseconds after LABEL (default fast: the fast kernel's;
# cudnn in the "cudnn ..." rows) in kernels_check --bench's row that begins with ROW (e.g.
# "attention_forward_act16 (hd 64"), empty when it has none
bench_ms() { grep -F -m1 "bench $2" "$1" | sed -n "s/.* ${3:-fast} *\([0-9.]*\) ms .*/\1/p"; }
