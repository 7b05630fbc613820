#!/usr/bin/env python3
"""bench/tokenize_speed.py — MB/s of `ztrain tokenize` against the PyPI `tokenizers`
package on one thread, side by side on the same text and tokenizer.json, and
ztrain's scaling with threads.  Dev-time (needs a venv with tokenizers and
numpy, e.g. python3 -m venv .venv-tok && .venv-tok/bin/pip install tokenizers numpy):

    make build/ztrain && .venv-tok/bin/python bench/tokenize_speed.py [--repeat 16] [--threads 1,2]

Text: the licences under /usr/share/common-licenses (English) plus
tests/fixtures/text/multilingual.txt, concatenated and repeated --repeat times.
Tokenizers: the three fixtures (GPT-2 and Llama-3 byte-level, Llama-2
SentencePiece) and one `ztrain tokenizer train` makes from the text (4096).
`tokenizers`: Tokenizer.encode(text, add_special_tokens=False) on the whole
text, one call, best of 3; and, for scale, encode_batch of the text's lines
(a different, easier job: short inputs; ids not compared), both with its
thread pool limited to one thread (RAYON_NUM_THREADS=1).
ztrain: the encode time it reports (file mapped, UTF-8 checked, encoded; not
loading tokenizer.json or writing the output), best of 3; the whole command's
wall time is shown too.  Ids are checked equal before any number is printed.

On a shared machine wall time mostly measures waiting for a CPU, so each
side's CPU time is reported too (MB per CPU-second: `tokenizers` by
time.process_time around encode, ztrain by the CPU time of all its threads
during the encode, which it prints); with N threads equal MB/CPU-s means the
work divides without overhead, and the wall-clock speed-up needs free cores.
"""
import argparse
import glob
import os
import re
import subprocess
import sys
import tempfile
import time

os.environ["RAYON_NUM_THREADS"] = "1"  # tokenizers' thread pool: one thread (set before import)
os.environ["TOKENIZERS_PARALLELISM"] = "false"

import numpy as np  # noqa: E402
from tokenizers import Tokenizer  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ZTRAIN = os.path.join(ROOT, "build", "ztrain")


def ztrain_run(tok_dir, text_path, out, threads):
    t0 = time.perf_counter()
    r = subprocess.run([ZTRAIN, "tokenize", "--tokenizer", tok_dir, "--input", text_path, "--output", out,
                        "--threads", str(threads)], check=True, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    m = re.search(r"in ([0-9.]+) s .*, ([0-9.]+) CPU-s", r.stderr)
    return float(m.group(1)), wall, float(m.group(2))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=16)
    ap.add_argument("--threads", default="1,2")
    args = ap.parse_args()
    threads = [int(x) for x in args.threads.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        base = b""
        for p in sorted(glob.glob("/usr/share/common-licenses/*")):
            if os.path.isfile(p) and not os.path.islink(p):
                base += open(p, "rb").read()
        base += open(os.path.join(ROOT, "tests/fixtures/text/multilingual.txt"), "rb").read()
        text_path = os.path.join(tmp, "text.txt")
        with open(text_path, "wb") as f:
            f.write(base * args.repeat)
        text = (base * args.repeat).decode("utf-8")
        mb = len(base) * args.repeat / 1e6
        trained = os.path.join(tmp, "ztrain4096")
        subprocess.run([ZTRAIN, "tokenizer", "train", "--input", text_path, "--vocab_size", "4096",
                        "--output_dir", trained], check=True, capture_output=True)
        toks = [("GPT-2 byte-level (1200)", "tests/fixtures/tokenizers/gpt2"),
                ("Llama-3 byte-level (1200)", "tests/fixtures/tokenizers/llama3"),
                ("Llama-2 SentencePiece (1500)", "tests/fixtures/tokenizers/llama2"),
                ("ztrain-trained byte-level (4096)", trained)]
        print(f"text: {mb:.2f} MB ({args.repeat} x licences + multilingual); cpus: {os.cpu_count()}; "
              f"load average {os.getloadavg()[0]:.1f}")
        lines = text.splitlines(keepends=True)
        head = "| tokenizer | tokenizers 1 thread MB/s (MB/CPU-s) | tokenizers 1 thread, lines MB/s | " + " | ".join(
            f"ztrain {t} thr MB/s (MB/CPU-s; whole command)" for t in threads) + " |"
        print(head)
        print("|" + "---|" * (3 + len(threads)))
        for name, d in toks:
            d = os.path.join(ROOT, d)
            hf = Tokenizer.from_file(os.path.join(d, "tokenizer.json"))
            best, best_cpu = 1e9, 1e9
            for _ in range(3):
                t0, c0 = time.perf_counter(), time.process_time()
                ids = hf.encode(text, add_special_tokens=False).ids
                best = min(best, time.perf_counter() - t0)
                best_cpu = min(best_cpu, time.process_time() - c0)
            best_lines = 1e9
            for _ in range(3):
                t0 = time.perf_counter()
                hf.encode_batch(lines, add_special_tokens=False)
                best_lines = min(best_lines, time.perf_counter() - t0)
            row = [f"{mb / best:.2f} ({mb / best_cpu:.2f})", f"{mb / best_lines:.2f}"]
            out = os.path.join(tmp, "ids.npy")
            for t in threads:
                enc, wall, cpu = min(ztrain_run(d, text_path, out, t) for _ in range(3))
                got = np.load(out)
                if got.tolist() != ids:
                    sys.exit(f"{name}: ztrain's ids differ from tokenizers' with {t} threads")
                row.append(f"{mb / enc:.2f} ({mb / cpu:.2f}; {mb / wall:.2f})")
            print(f"| {name} | " + " | ".join(row) + " |")
            sys.stdout.flush()


if __name__ == "__main__":
    main()
