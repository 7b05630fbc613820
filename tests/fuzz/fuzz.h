/* fuzz.h — what every libFuzzer harness in tests/fuzz shares.
 *
 * A harness defines LLVMFuzzerTestOneInput: it writes the input where the reader
 * expects a file (fuzz_write), runs the real reader on that path, and checks
 * properties beyond "no crash" with FUZZ_REQUIRE, which aborts (a finding):
 *   - a refusal is ZT_EINPUT (exit 2) and its message names the file (fuzz_refusal);
 *   - what was accepted satisfies the reader's promise, and where a writer
 *     exists, writing it back and reading that gives the same value.
 *
 * Built two ways (Makefile):
 *   make fuzz      clang -fsanitize=fuzzer,address,undefined,float-cast-overflow:
 *                  build-fuzz/fuzz_NAME, run as  build-fuzz/fuzz_NAME -max_total_time=30
 *                  tests/fuzz/corpus/NAME   (CI: .ci/run; tests/fuzz/run.sh)
 *   make / make test   with replay.c as main: build/tests/test_fuzz_NAME replays the
 *                  committed seed corpus tests/fuzz/corpus/NAME through the same
 *                  checks, so a harness that stops compiling or a seed that breaks a
 *                  property fails the ordinary test suite. */
#ifndef ZT_FUZZ_H
#define ZT_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../src/core/status.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FUZZ_REQUIRE(cond, ...)                                                            \
    do {                                                                                   \
        if (!(cond)) {                                                                     \
            fprintf(stderr, "fuzz property failed at %s:%d: %s\n  ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                                  \
            fprintf(stderr, "\n");                                                         \
            abort();                                                                       \
        }                                                                                  \
    } while (0)

/* A private directory for this process (created once, removed at exit). */
const char *fuzz_dir(void);
/* Write data to fuzz_dir()/name (replacing it) and return that path (static
 * storage per name slot: at most 8 distinct names per harness). */
const char *fuzz_write(const char *name, const uint8_t *data, size_t size);
/* A refusal must be bad input (ZT_EINPUT) naming `path` (or, for a directory
 * reader, a path under it); ZT_EFAIL is accepted only for "out of memory". */
void fuzz_refusal(int rc, const zt_err *err, const char *path);

#endif
