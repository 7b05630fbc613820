/* test_prof.c — the profiler (core/prof.h, kernels/prof_backend.h): every entry of
 * every table is wrapped at the dispatch (an entry added to backend.h and not to
 * prof_backend.c fails here) and still computes what the inner entry computes; a
 * device clock's marks are read only at the step's end (one sync per profiled step,
 * none inside it) and become the trace's times; the step range; a trace that cannot
 * be written is an error naming the file. */
#include <stddef.h>
#include <string.h>
#include <unistd.h>

#include "../src/core/prof.h"
#include "../src/kernels/backend.h"
#include "../src/kernels/prof_backend.h"
#include "test.h"
#include "tmpdir.h"

typedef void (*fn)(void);

/* Every function-pointer slot of the table but the questions passed through */
static int passed_through(size_t off)
{
    return off == offsetof(zt_backend, name) || off == offsetof(zt_backend, stream) ||
           off == offsetof(zt_backend, attention_scratch_bytes) ||
           off == offsetof(zt_backend, attention_cache_scratch_bytes) ||
           (off >= offsetof(zt_backend, host_visible) && off < offsetof(zt_backend, host_visible) + sizeof(fn)) ||
           (off >= offsetof(zt_backend, kernels) && off < offsetof(zt_backend, kernels) + sizeof(fn));
}

static void check_wrapped(const zt_backend *inner)
{
    zt_backend copy = *inner; /* the wrapper keeps a pointer to inner: keep ours intact */
    const zt_backend *w = zt_backend_profiled(&copy);
    ZT_CHECK(!strcmp(w->name, inner->name) && w->host_visible == inner->host_visible && w->kernels == inner->kernels);
    int slots = 0;
    for (size_t off = 0; off + sizeof(fn) <= sizeof(zt_backend); off += sizeof(fn)) {
        if (passed_through(off))
            continue;
        fn a, b;
        memcpy(&a, (const char *)inner + off, sizeof a);
        memcpy(&b, (const char *)w + off, sizeof b);
        ZT_CHECK_MSG(!a || a != b, "%s: the entry at byte %zu of zt_backend is not timed (add it to prof_backend.c)",
                     inner->name, off);
        slots++;
    }
    ZT_CHECK(slots >= 30);
    /* and the wrapped entries compute what the inner ones do */
    float A[6] = {1, 2, 3, 4, 5, 6}, B[6] = {1, 0, 0, 1, 1, 1}, C1[4], C2[4];
    void *dA = w->alloc(ZT_MEM_OTHER, sizeof A), *dB = w->alloc(ZT_MEM_OTHER, sizeof B);
    float *dC = w->alloc(ZT_MEM_OTHER, sizeof C1);
    w->to_device(dA, A, sizeof A);
    w->to_device(dB, B, sizeof B);
    zt_err err = {0};
    ZT_CHECK(w->matmul(dC, dA, ZT_F32, dB, ZT_F32, 2, 2, 3, 0, 0, 0.0f, ZT_F32, &err) == ZT_OK);
    w->to_host(C1, dC, sizeof C1);
    ZT_CHECK(inner->matmul(dC, dA, ZT_F32, dB, ZT_F32, 2, 2, 3, 0, 0, 0.0f, ZT_F32, &err) == ZT_OK);
    inner->to_host(C2, dC, sizeof C2);
    ZT_CHECK(!memcmp(C1, C2, sizeof C1) && C1[0] == 1 + 3 * 1 && C1[3] == 4 * 0 + 5 + 6);
    w->free(ZT_MEM_OTHER, dA, sizeof A);
    w->free(ZT_MEM_OTHER, dB, sizeof B);
    w->free(ZT_MEM_OTHER, dC, sizeof C1);
}

static void test_every_entry_wrapped(void)
{
    check_wrapped(zt_backend_cpu());
    check_wrapped(zt_backend_emu());
}

/* A stand-in device clock: mark i is at 10·i µs; it counts syncs. */
static long fake_marks, fake_syncs;
static long fake_mark(void *q) { (void)q; return fake_marks++; }
static int fake_sync(zt_err *err) { (void)err; fake_syncs++; return ZT_OK; }
static int fake_elapsed(long a, long b, double *us, zt_err *err)
{
    (void)err;
    *us = 10.0 * (double)(b - a);
    return ZT_OK;
}
static void fake_reset(void) { fake_marks = 0; }
static const zt_prof_clock fake = {"fake clock", fake_mark, fake_sync, fake_elapsed, fake_reset};

static char *read_all(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    static char text[1 << 16];
    size_t n = fread(text, 1, sizeof text - 1, f);
    text[n] = 0;
    fclose(f);
    return text;
}

static void test_device_clock_read_at_step_end(void)
{
    char dir[64];
    ZT_CHECK(tmpdir_make(dir, sizeof dir, "zt_prof_") != NULL);
    const char *path = tmpdir_path(dir, "t.json");
    zt_err err = {0};
    ZT_CHECK(zt_prof_open(path, 2, 2, 0, &err) == ZT_OK);
    zt_prof_set_clock(&fake);
    fake_syncs = 0;
    for (long s = 1; s <= 3; s++) {
        long syncs0 = fake_syncs;
        zt_prof_step_begin(s);                            /* step 2: mark 0 the origin, 1 the step */
        int ph = zt_prof_begin("forward", "phase", ZT_PROF_COMPUTE); /* 2 */
        int k = zt_prof_begin("matmul", "kernel", ZT_PROF_COMPUTE);  /* 3 */
        zt_prof_end(k, 2e9, 0);                                     /* 4 */
        int c = zt_prof_begin("allreduce", "collective", ZT_PROF_HOST_COMM); /* host: no mark */
        zt_prof_end(c, 0, 64);
        zt_prof_end(ph, 0, 0);                                      /* 5 */
        ZT_CHECK_MSG(fake_syncs == syncs0, "the clock was synced inside step %ld", s);
        ZT_CHECK((s == 2) == (k >= 0));
        ZT_CHECK(zt_prof_step_end(&err) == ZT_OK);                  /* step ends at 6 */
        ZT_CHECK_MSG(fake_syncs == syncs0 + (s == 2), "syncs after step %ld: %ld", s, fake_syncs);
    }
    ZT_CHECK(zt_prof_finish(NULL, &err) == ZT_OK);
    const char *t = read_all(path);
    ZT_CHECK(t != NULL);
    if (t) {
        ZT_CHECK(strstr(t, "\"traceEvents\": [") && strstr(t, "\"clock\": \"fake clock\""));
        /* the kernel: marks 3..4 = 10 µs after 30 µs; the phase 2..5; the step 1..6 */
        ZT_CHECK_MSG(strstr(t, "\"name\": \"matmul\", \"cat\": \"kernel\", \"ph\": \"X\"") &&
                     strstr(t, "\"dur\": 10.000, \"pid\": 0, \"tid\": 1, \"args\": {\"step\": 2, \"flops\": 2000000000}"),
                     "%s", t);
        ZT_CHECK(strstr(t, "\"dur\": 30.000, \"pid\": 0, \"tid\": 1, \"args\": {\"step\": 2}"));
        ZT_CHECK(strstr(t, "\"dur\": 50.000, \"pid\": 0, \"tid\": 1, \"args\": {\"step\": 2}"));
        ZT_CHECK(strstr(t, "\"name\": \"allreduce\", \"cat\": \"collective\"") && strstr(t, "\"tid\": 2"));
        ZT_CHECK(!strstr(t, "\"step\": 1}") && !strstr(t, "\"step\": 3}"));
    }
    tmpdir_remove(dir);
}

static void test_trace_write_failure_names_file(void)
{
    char dir[64];
    ZT_CHECK(tmpdir_make(dir, sizeof dir, "zt_prof_") != NULL);
    char path[128];
    tmpdir_join(path, sizeof path, dir, "t.json");
    zt_err err = {0};
    ZT_CHECK(zt_prof_open(path, 1, 0, 0, &err) == ZT_OK);
    zt_prof_step_begin(1);
    zt_prof_end(zt_prof_begin("zero", "kernel", ZT_PROF_COMPUTE), 0, 8);
    ZT_CHECK(zt_prof_step_end(&err) == ZT_OK);
    ZT_CHECK(rmdir(dir) == 0); /* the folder is gone when the trace is written */
    ZT_CHECK(zt_prof_finish(NULL, &err) != ZT_OK);
    ZT_CHECK_MSG(strstr(err.msg, path) != NULL, "%s", err.msg);
}

static void test_step_ranges(void)
{
    long a, b;
    zt_err err = {0};
    ZT_CHECK(zt_prof_parse_steps("2-4", &a, &b, &err) == ZT_OK && a == 2 && b == 4);
    ZT_CHECK(zt_prof_parse_steps("3", &a, &b, &err) == ZT_OK && a == 3 && b == 3);
    ZT_CHECK(zt_prof_parse_steps("5-", &a, &b, &err) == ZT_OK && a == 5 && b == 0);
    const char *bad[] = {"", "0", "4-2", "a", "2-b", "-3", "2-3x", "1--2"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ZT_CHECK_MSG(zt_prof_parse_steps(bad[i], &a, &b, &err) == ZT_EINPUT, "'%s' accepted", bad[i]);
        ZT_CHECK(strstr(err.msg, "--profile_steps") != NULL);
    }
    /* closed: nothing records */
    zt_prof_step_begin(1);
    ZT_CHECK(zt_prof_begin("x", "kernel", ZT_PROF_COMPUTE) == -1);
}

int main(void)
{
    ZT_RUN(test_every_entry_wrapped);
    ZT_RUN(test_device_clock_read_at_step_end);
    ZT_RUN(test_trace_write_failure_names_file);
    ZT_RUN(test_step_ranges);
    ZT_TEST_MAIN_END();
}
