/* prof.c — the profiler's recorder, its Chrome trace and its table (prof.h). */
#include "prof.h"

#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "fs.h"
#include "input.h"
#include "mem.h"

enum { TRACK_COMPUTE = 1, TRACK_HOST_COMM = 2, TRACK_DEV_COMM = 3 };
enum { EV_OPEN, EV_ENDED, EV_DONE, EV_DROPPED };

typedef struct ev {
    const char *name, *cat;
    long step;
    int track, device, state;
    void *q;           /* the device queue of its marks (NULL: the compute queue) */
    long mb, me;       /* device marks (the clock's ids) */
    int64_t hb, he;    /* host marks, ns */
    double flops, bytes;
    double ts, dur;    /* µs, once resolved */
} ev;

static struct {
    int open, recording, rank;
    long a, b;
    char path[4096];
    const zt_prof_clock *clock;
    ev *evs;
    size_t n, cap;
    size_t step_first;  /* the current step's first event */
    long step;
    int step_ev;
    int64_t run0, step_host0; /* host ns: the trace's origin, the step's start */
    long step_mark0;          /* the device's mark at the step's start */
    long steps_done;
} g;

static int64_t now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

int zt_prof_parse_steps(const char *s, long *a, long *b, zt_err *err)
{
    char *end;
    errno = 0;
    long x = strtol(s, &end, 10), y = 0;
    int ok = end != s && errno == 0 && x >= 1;
    if (ok && *end == '-') {
        const char *rest = end + 1;
        if (*rest) {
            y = strtol(rest, &end, 10);
            ok = end != rest && errno == 0 && y >= x && *end == 0;
        }
    } else if (ok) {
        y = x;
        ok = *end == 0;
    }
    if (!ok)
        return zt_fail(err, ZT_EINPUT, "--profile_steps '%s': expected A-B, A or A- (1-based optimizer steps, "
                       "A <= B), e.g. 2-4", s);
    *a = x;
    *b = y;
    return ZT_OK;
}

/* rank r > 0: "trace.json" -> "trace.rank<r>.json" (other names: NAME.rank<r>.json) */
static int rank_path(const char *path, int rank, char *out, size_t cap)
{
    if (rank == 0)
        return snprintf(out, cap, "%s", path) < (int)cap ? 0 : -1;
    size_t n = strlen(path);
    int stem = n > 5 && !strcmp(path + n - 5, ".json") ? (int)(n - 5) : (int)n;
    return snprintf(out, cap, "%.*s.rank%d.json", stem, path, rank) < (int)cap ? 0 : -1;
}

int zt_prof_open(const char *path, long a, long b, int rank, zt_err *err)
{
    zt_prof_close();
    if (!path || !*path)
        return zt_fail(err, ZT_EINPUT, "--profile: expected a file name for the trace");
    if (rank_path(path, rank, g.path, sizeof g.path))
        return zt_fail(err, ZT_EINPUT, "--profile %s: path too long", path);
    /* the trace replaces the file atomically (fs.h): renaming over a device or a
     * FIFO would replace it, so anything but a regular file is refused */
    struct stat st;
    if (stat(g.path, &st) == 0 && !S_ISREG(st.st_mode))
        return zt_fail(err, ZT_EINPUT, "%s: --profile: the trace file is a %s, not a regular file (refused)", g.path,
                       zt_file_kind(st.st_mode));
    char tmp[4200];
    int fd = zt_create_temp(g.path, tmp, sizeof tmp);
    if (fd < 0)
        return zt_fail(err, ZT_EINPUT, "%s: --profile: cannot create the trace there: %s", g.path, strerror(errno));
    close(fd);
    unlink(tmp);
    g.open = 1;
    g.rank = rank;
    g.a = a;
    g.b = b;
    g.run0 = now_ns();
    return ZT_OK;
}

int zt_prof_enabled(void) { return g.open; }

void zt_prof_set_clock(const zt_prof_clock *clock) { g.clock = clock; }

static int grow(void)
{
    size_t cap = g.cap ? 2 * g.cap : 4096;
    ev *e = zt_alloc(ZT_MEM_OTHER, cap * sizeof *e);
    if (!e)
        return -1;
    if (g.n)
        memcpy(e, g.evs, g.n * sizeof *e);
    zt_free(ZT_MEM_OTHER, g.evs, g.cap * sizeof *e);
    g.evs = e;
    g.cap = cap;
    return 0;
}

int zt_prof_begin(const char *name, const char *cat, void *q)
{
    if (!g.recording || (g.n == g.cap && grow()))
        return -1;
    ev *e = &g.evs[g.n];
    memset(e, 0, sizeof *e);
    e->name = name;
    e->cat = cat;
    e->step = g.step;
    e->track = q == ZT_PROF_COMPUTE ? TRACK_COMPUTE : q == ZT_PROF_HOST_COMM ? TRACK_HOST_COMM : TRACK_DEV_COMM;
    e->device = g.clock && e->track != TRACK_HOST_COMM;
    e->q = q == ZT_PROF_COMPUTE || q == ZT_PROF_HOST_COMM ? NULL : q;
    if (e->device && (e->mb = g.clock->mark(e->q)) < 0)
        return -1;
    if (!e->device)
        e->hb = now_ns();
    e->state = EV_OPEN;
    return (int)g.n++;
}

void zt_prof_end(int h, double flops, double bytes)
{
    if (h < 0 || (size_t)h >= g.n || g.evs[h].state != EV_OPEN)
        return;
    ev *e = &g.evs[h];
    if (e->device) {
        e->me = g.clock->mark(e->q);
        if (e->me < 0) {
            e->state = EV_DROPPED;
            return;
        }
    } else {
        e->he = now_ns();
    }
    e->flops = flops;
    e->bytes = bytes;
    e->state = EV_ENDED;
}

void zt_prof_step_begin(long step)
{
    g.recording = g.open && step >= g.a && (g.b == 0 || step <= g.b);
    if (!g.recording)
        return;
    g.step = step;
    g.step_first = g.n;
    g.step_host0 = now_ns();
    if (g.clock && (g.step_mark0 = g.clock->mark(NULL)) < 0) {
        g.recording = 0; /* the device cannot time this step: none of it is recorded */
        return;
    }
    g.step_ev = zt_prof_begin("step", "step", ZT_PROF_COMPUTE);
}

/* A device mark's µs on the trace's axis: the device's time since the step's first
 * mark, placed at the host time that mark was recorded (the device tracks are
 * aligned with the host's at each profiled step's start). */
static int device_us(long mark, double *us, zt_err *err)
{
    double d = 0.0;
    int rc = g.clock->elapsed_us(g.step_mark0, mark, &d, err);
    *us = (double)(g.step_host0 - g.run0) / 1e3 + d;
    return rc;
}

int zt_prof_step_end(zt_err *err)
{
    if (!g.recording)
        return ZT_OK;
    zt_prof_end(g.step_ev, 0.0, 0.0);
    g.recording = 0;
    int rc = g.clock ? g.clock->sync(err) : ZT_OK;
    for (size_t i = g.step_first; i < g.n && rc == ZT_OK; i++) {
        ev *e = &g.evs[i];
        if (e->state != EV_ENDED) { /* begun and not ended within the step: left out */
            e->state = EV_DROPPED;
            continue;
        }
        double b, end;
        if (e->device) {
            if ((rc = device_us(e->mb, &b, err)) || (rc = device_us(e->me, &end, err)))
                break;
        } else {
            b = (double)(e->hb - g.run0) / 1e3;
            end = (double)(e->he - g.run0) / 1e3;
        }
        e->ts = b;
        e->dur = end > b ? end - b : 0.0;
        e->state = EV_DONE;
    }
    if (g.clock)
        g.clock->reset();
    g.steps_done++;
    return rc;
}

/* ---- the trace --------------------------------------------------------------- */

typedef struct buf {
    char *p;
    size_t n, cap;
    int oom;
} buf;

static void put(buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(buf *b, const char *fmt, ...)
{
    for (;;) {
        if (b->oom)
            return;
        va_list ap;
        va_start(ap, fmt);
        int k = vsnprintf(b->p ? b->p + b->n : NULL, b->p ? b->cap - b->n : 0, fmt, ap);
        va_end(ap);
        if (k >= 0 && b->p && b->n + (size_t)k < b->cap) {
            b->n += (size_t)k;
            return;
        }
        size_t cap = (b->cap ? 2 * b->cap : 1 << 16) + (size_t)(k > 0 ? k : 0);
        char *p = zt_alloc(ZT_MEM_OTHER, cap);
        if (!p || k < 0) {
            zt_free(ZT_MEM_OTHER, p, cap);
            b->oom = 1;
            return;
        }
        if (b->n)
            memcpy(p, b->p, b->n);
        zt_free(ZT_MEM_OTHER, b->p, b->cap);
        b->p = p;
        b->cap = cap;
    }
}

static const char *track_name(int t)
{
    if (t == TRACK_COMPUTE)
        return g.clock ? "device stream (kernels, phases)" : "host thread (kernels, phases)";
    return t == TRACK_HOST_COMM ? "collectives (host, MPI)" : "collectives (device queue)";
}

/* Chrome's trace event format: complete events ("ph": "X", ts and dur in µs) and
 * the process and thread names as metadata ("ph": "M"); Perfetto reads it. */
static void trace_json(buf *b)
{
    char range[48] = "";
    if (g.b)
        snprintf(range, sizeof range, "%ld", g.b);
    put(b, "{\"displayTimeUnit\": \"ms\", \"otherData\": {\"clock\": \"%s\", \"steps\": \"%ld-%s\"}, \"traceEvents\": [\n",
        g.clock ? g.clock->what : "host wall clock", g.a, range);
    put(b, "{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": %d, \"tid\": 0, \"args\": {\"name\": \"ztrain rank %d\"}}",
        g.rank, g.rank);
    for (int t = TRACK_COMPUTE; t <= TRACK_DEV_COMM; t++)
        put(b, ",\n{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": %d, \"tid\": %d, \"args\": {\"name\": \"%s\"}}",
            g.rank, t, track_name(t));
    for (size_t i = 0; i < g.n; i++) {
        const ev *e = &g.evs[i];
        if (e->state != EV_DONE)
            continue;
        put(b, ",\n{\"name\": \"%s\", \"cat\": \"%s\", \"ph\": \"X\", \"ts\": %.3f, \"dur\": %.3f, \"pid\": %d, "
            "\"tid\": %d, \"args\": {\"step\": %ld", e->name, e->cat, e->ts, e->dur, g.rank, e->track, e->step);
        if (e->flops > 0)
            put(b, ", \"flops\": %.0f", e->flops);
        if (e->bytes > 0)
            put(b, ", \"bytes\": %.0f", e->bytes);
        put(b, "}}");
    }
    put(b, "\n]}\n");
}

/* ---- the table by kernel class ---------------------------------------------------- */

typedef struct row {
    const char *name, *cat;
    long count;
    double us, flops, bytes;
} row;

static int by_time(const void *x, const void *y)
{
    double a = ((const row *)x)->us, b = ((const row *)y)->us;
    return a < b ? 1 : a > b ? -1 : 0;
}

/* rows: one per (category, name) among the resolved events that pass keep */
static size_t gather(row *rows, size_t cap, int (*keep)(const ev *))
{
    size_t n = 0;
    for (size_t i = 0; i < g.n; i++) {
        const ev *e = &g.evs[i];
        if (e->state != EV_DONE || !keep(e))
            continue;
        size_t r = 0;
        while (r < n && (strcmp(rows[r].name, e->name) || strcmp(rows[r].cat, e->cat)))
            r++;
        if (r == n) {
            if (n == cap)
                continue;
            rows[n++] = (row){e->name, e->cat, 0, 0, 0, 0};
        }
        rows[r].count++;
        rows[r].us += e->dur;
        rows[r].flops += e->flops;
        rows[r].bytes += e->bytes;
    }
    qsort(rows, n, sizeof *rows, by_time);
    return n;
}

static int is_compute(const ev *e) { return e->track == TRACK_COMPUTE && strcmp(e->cat, "phase") && strcmp(e->cat, "step"); }
static int is_collective(const ev *e) { return e->track != TRACK_COMPUTE; }
static int is_phase(const ev *e) { return !strcmp(e->cat, "phase"); }
static int is_step(const ev *e) { return !strcmp(e->cat, "step"); }

/* achieved rate: TFLOP/s where the class counts FLOPs, else GB/s where it moves bytes */
static void rate(char *s, size_t cap, const row *r)
{
    double sec = r->us * 1e-6;
    if (sec <= 0 || (r->flops <= 0 && r->bytes <= 0))
        snprintf(s, cap, "-");
    else if (r->flops > 0)
        snprintf(s, cap, "%.3f TFLOP/s", r->flops / sec / 1e12);
    else
        snprintf(s, cap, "%.2f GB/s", r->bytes / sec / 1e9);
}

static void print_rows(FILE *f, const row *rows, size_t n, double total_us)
{
    for (size_t i = 0; i < n; i++) {
        char r[48];
        rate(r, sizeof r, &rows[i]);
        fprintf(f, "  %-26s %8ld %12.3f %8.2f  %s\n", rows[i].name, rows[i].count, rows[i].us / 1e3,
                total_us > 0 ? 100.0 * rows[i].us / total_us : 0.0, r);
    }
}

/* The share of the step: each class's time over the profiled steps' time on the
 * compute queue; "(outside any kernel)" is the rest (host work, waits, gaps), so the
 * shares of the first block add up to 100 %.  Collectives run on tracks of their own
 * and may overlap the kernels: their shares are listed apart. */
static void print_table(FILE *f)
{
    enum { CAP = 128 };
    row rows[CAP], steps[1];
    size_t ns = gather(steps, 1, is_step);
    double total = ns ? steps[0].us : 0.0, kern = 0.0;
    size_t n = gather(rows, CAP, is_compute);
    for (size_t i = 0; i < n; i++)
        kern += rows[i].us;
    fprintf(f, "profile: steps %ld-%ld (%ld profiled, %.3f ms, %s): trace in %s\n", g.a,
            g.b ? g.b : g.a + g.steps_done - 1, g.steps_done, total / 1e3, g.clock ? g.clock->what : "host wall clock",
            g.path);
    fprintf(f, "  %-26s %8s %12s %8s  %s\n", "kernel class", "count", "total ms", "share %", "achieved");
    print_rows(f, rows, n, total);
    fprintf(f, "  %-26s %8s %12.3f %8.2f\n", "(outside any kernel)", "", (total - kern) / 1e3,
            total > 0 ? 100.0 * (total - kern) / total : 0.0);
    if ((n = gather(rows, CAP, is_collective)) > 0) {
        fprintf(f, "  collectives (own track, may overlap the kernels):\n");
        print_rows(f, rows, n, total);
    }
    if ((n = gather(rows, CAP, is_phase)) > 0) {
        fprintf(f, "  phases:\n");
        print_rows(f, rows, n, total);
    }
}

int zt_prof_finish(FILE *table, zt_err *err)
{
    if (!g.open)
        return ZT_OK;
    buf b = {0};
    trace_json(&b);
    int rc = b.oom ? zt_fail(err, ZT_EFAIL, "%s: out of memory for the trace", g.path)
                   : zt_write_atomic(g.path, &(zt_wpart){b.p, b.n}, 1, err);
    zt_free(ZT_MEM_OTHER, b.p, b.cap);
    if (rc == ZT_OK && table) {
        print_table(table);
        fflush(table);
    }
    zt_prof_close();
    return rc;
}

void zt_prof_close(void)
{
    zt_free(ZT_MEM_OTHER, g.evs, g.cap * sizeof *g.evs);
    memset(&g, 0, sizeof g);
}
