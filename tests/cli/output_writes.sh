# Outputs that cannot be written (issue 33 point 2): every write of the JSONL, the
# TensorBoard events, the model, a checkpoint and a plot is checked, and a failure is an error naming the
# file (exit 1) with no half-written record or file left; outputs refuse special
# files as inputs do (exit 2), and a FIFO with no reader never blocks the run in
# open (where no stop request would reach it).  A full disk is stood in for by a
# file size limit (export PMIX_MCA_gds=hash; ulimit -f: EFBIG, SIGXFSZ ignored), which needs no mount.
# Open MPI's PMIx keeps its store in a shared-memory file the limit would refuse,
# so the limited runs use its hash store instead (PMIX_MCA_gds=hash).
. "$(dirname "$0")/lib.bash"
fix=tests/fixtures/gqa_tied
train() { timeout -k 5 30 "$ZTRAIN" train --model $fix --data $fix/tokens.npy --threads 1 --block_size 16 \
          --per_device_train_batch_size 2 --peak_gflops 1000 --progress false "$@"; }

# special files as --log_jsonl: refused at once, nothing written to them
expect_exit 2 "--log_jsonl: /dev/full: the --log_jsonl log is a character device, not a regular file" -- \
    train --max_steps 2 --log_jsonl /dev/full
ln -s /dev/full "$TMP/full.jsonl"
expect_exit 2 "full.jsonl: the --log_jsonl log is a character device" -- train --max_steps 2 --log_jsonl "$TMP/full.jsonl"
mkfifo "$TMP/fifo.jsonl"
start=$(date +%s)
expect_exit 2 "fifo.jsonl: the --log_jsonl log is a FIFO, not a regular file" -- train --max_steps 2 --log_jsonl "$TMP/fifo.jsonl"
[ $(( $(date +%s) - start )) -lt 20 ] || fail "a FIFO with no reader took $(( $(date +%s) - start )) s to refuse"
# with a reader too (it would have been written to)
cat "$TMP/fifo.jsonl" > "$TMP/fifo.got" & reader=$!
expect_exit 2 "fifo.jsonl: the --log_jsonl log is a FIFO" -- train --max_steps 2 --log_jsonl "$TMP/fifo.jsonl"
kill $reader 2>/dev/null; wait $reader 2>/dev/null
[ -s "$TMP/fifo.got" ] && fail "a record went into the FIFO"
mkdir -p "$TMP/dirlog"; expect_exit 2 "dirlog: the --log_jsonl log is a directory" -- train --max_steps 1 --log_jsonl "$TMP/dirlog"

# a JSONL that fills up (8 KiB allowed, each record about 1 KiB): exit 1 naming
# the file, every line a whole JSON object
out=$( (export PMIX_MCA_gds=hash; ulimit -f 8; train --max_steps 40 --log_jsonl "$TMP/a.jsonl") 2>&1)
rc=$?
[ "$rc" -eq 1 ] || fail "full JSONL: exit $rc (want 1): $out"
printf '%s' "$out" | grep -q -- "--log_jsonl: $TMP/a.jsonl: writing a record: File too large (the file ends with the last whole record)" ||
    fail "full JSONL: no error naming the file: $out"
printf '%s' "$out" | grep -q "^trained" && fail "full JSONL: reported as trained"
/usr/bin/python3 - "$TMP/a.jsonl" <<'PY' || fail "full JSONL: a cut line"
import json, sys
b = open(sys.argv[1], 'rb').read()
assert b and b.endswith(b'\n'), b[-80:]
rows = [json.loads(l) for l in b.decode().splitlines()]
assert [r['step'] for r in rows] == list(range(1, len(rows) + 1)), rows
PY

# TensorBoard events that fill up (1 KiB allowed, about 60 bytes an event, 4 events a
# logged step): exit 1 naming the file, every rank stopped, the file ends with its last
# whole TFRecord (a length, its CRC, the data, its CRC)
tb_whole() { # DIR: one event file, made of whole records only
    /usr/bin/python3 - "$1" <<'PY'
import glob, sys
files = glob.glob(sys.argv[1] + "/events.out.tfevents.*")
assert len(files) == 1, files
b = open(files[0], "rb").read()
i = n = 0
while i < len(b):
    size = int.from_bytes(b[i:i + 8], "little")
    assert i + 16 + size <= len(b), "a record cut at byte %d of %d" % (i, len(b))
    i += 16 + size
    n += 1
assert n > 1, n  # the file_version record and at least one scalar
PY
}
out=$( (export PMIX_MCA_gds=hash; ulimit -f 1; train --max_steps 40 --logging_steps 1 --report_to tensorboard \
       --logging_dir "$TMP/tb1") 2>&1)
rc=$?
[ "$rc" -eq 1 ] || fail "full TensorBoard events: exit $rc (want 1): $out"
printf '%s' "$out" | grep -q -- "--report_to tensorboard: $TMP/tb1/events.out.tfevents.[^:]*: writing a record: File too large (the file ends with the last whole record)" ||
    fail "full TensorBoard events: no error naming the file: $out"
printf '%s' "$out" | grep -q "^trained" && fail "full TensorBoard events: reported as trained"
tb_whole "$TMP/tb1" || fail "full TensorBoard events: the file is not made of whole records"
# on 2 ranks rank 0 alone writes: both stop, none waits for it.  The limit is the
# ranks' (8 KiB, about 35 logged steps), set by a shell each rank starts in, since
# mpirun writes session files; the ranks talk over TCP, whose buffers are no files
# (shared memory's are, and the limit would refuse them).
out=$( (export PMIX_MCA_gds=hash OMPI_MCA_btl=self,tcp; timeout -k 5 60 "${mpi[@]}" -x OMPI_MCA_btl -np 2 \
       bash -c 'ulimit -f 8; exec "$@"' rank "$ZTRAIN" train --model $fix \
       --data $fix/tokens.npy --threads 1 --block_size 16 --per_device_train_batch_size 1 --peak_gflops 1000 \
       --progress false --max_steps 80 --logging_steps 1 --report_to tensorboard --logging_dir "$TMP/tb2") 2>&1)
rc=$?
[ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && [ "$rc" -ne 137 ] || fail "full TensorBoard events on 2 ranks: exit $rc: $out"
printf '%s' "$out" | grep -q "rank 0: --report_to tensorboard: .*File too large" || fail "full TensorBoard events on 2 ranks: $out"
printf '%s' "$out" | grep -q "^trained" && fail "full TensorBoard events on 2 ranks: reported as trained"
tb_whole "$TMP/tb2" || fail "full TensorBoard events on 2 ranks: the file is not made of whole records"

# the model: 430 KB of weights under a 100 KiB limit; nothing half-written left
out=$( (export PMIX_MCA_gds=hash; ulimit -f 100; train --max_steps 1 --output_dir "$TMP/m") 2>&1)
rc=$?
[ "$rc" -eq 1 ] || fail "full model: exit $rc (want 1): $out"
printf '%s' "$out" | grep -q "$TMP/m/model.safetensors: writing .*File too large" || fail "full model: no error naming the file: $out"
[ -e "$TMP/m/model.safetensors" ] && fail "full model: a model.safetensors was left"
[ -z "$(find "$TMP/m" -name '*.ztmp-*')" ] || fail "full model: temporary files left"
# a checkpoint (the model fits in 1 MiB, the checkpoint does not)
out=$( (export PMIX_MCA_gds=hash; ulimit -f 1024; train --max_steps 2 --save_steps 1 --output_dir "$TMP/c") 2>&1)
rc=$?
[ "$rc" -eq 1 ] || fail "full checkpoint: exit $rc (want 1): $out"
printf '%s' "$out" | grep -q "saving $TMP/c/checkpoint-1: .*File too large" || fail "full checkpoint: no error: $out"
ls -d "$TMP"/c/checkpoint-* >/dev/null 2>&1 && fail "full checkpoint: a checkpoint-N was published"

# plots: a FIFO or a device as --output is refused, a size limit is an error
train --max_steps 3 --log_jsonl "$TMP/p.jsonl" > /dev/null 2>&1 || fail "log for the plots"
mkfifo "$TMP/fifo.svg"
expect_exit 2 "fifo.svg: the output is a FIFO, not a regular file" -- timeout -k 5 20 "$ZTRAIN" plot "$TMP/p.jsonl" --output "$TMP/fifo.svg"
[ -p "$TMP/fifo.svg" ] || fail "the FIFO was replaced"
ln -s /dev/full "$TMP/full.png"
expect_exit 2 "full.png: the output is a character device" -- "$ZTRAIN" plot "$TMP/p.jsonl" --output "$TMP/full.png"
out=$( (export PMIX_MCA_gds=hash; ulimit -f 1; "$ZTRAIN" plot "$TMP/p.jsonl" --output "$TMP/big.png") 2>&1)
rc=$?
[ "$rc" -eq 1 ] || fail "full plot: exit $rc (want 1): $out"
printf '%s' "$out" | grep -q "$TMP/big.png: writing .*File too large" || fail "full plot: $out"
[ -e "$TMP/big.png" ] && fail "full plot: a file was left"
finish
