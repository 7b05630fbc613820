/* watchdog.c — see watchdog.h. */
#include "watchdog.h"

#include <mpi.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef struct flight_rec {
    uint64_t seq;
    const char *kind, *phase;
    int scope, unit;
    long step;
    size_t bytes;
    double t_enter, t_done; /* t_done 0: not finished */
} flight_rec;

/* The ring is written by the main thread and read by the watchdog thread.  On a
 * timeout the main thread is blocked, so the ring is still; a SIGUSR1 dump may
 * race with a record being written and print one torn line, never crash (the
 * strings are static). */
static flight_rec g_ring[ZT_FLIGHT_N];
static _Atomic uint64_t g_seq;           /* last number handed out */
static _Atomic uint64_t g_blocked_seq;   /* the collective the main thread is blocked in, 0: none */
static _Atomic double g_blocked_since;
static _Atomic double g_timeout = 600.0;
static _Atomic(zt_board *) g_board;
static volatile sig_atomic_t g_dump_requested;
/* Set once a timeout has been declared.  The abort that follows is not instant:
 * Open MPI sends the job's ranks SIGCONT, then SIGTERM, then SIGKILL, so a rank
 * stopped with SIGSTOP wakes up, the collective this rank's main thread was
 * blocked in completes, and the SIGTERM reads as a stop request — the run could
 * finish its step, save and say "trained" after the job was declared hung.  The
 * main thread parks at its next collective boundary instead (park_if_aborting). */
static atomic_int g_aborting;
static int g_rank, g_started, g_running; /* g_running: the watchdog thread exists */
static pthread_t g_thread;
/* the test seam (zt_watch_test_stall): raise the signal when this rank enters its
 * first collective of that phase at that step; never armed in production */
static char g_stall_phase[16];
static long g_stall_step = -1;
static int g_stall_rank = -1, g_stall_sig;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void zt_watch_set_timeout(double seconds) { g_timeout = seconds; }
void zt_watch_set_board(zt_board *b) { atomic_store(&g_board, b); }

/* A slot's first beat is its creation: a rank stopped before its watchdog's first
 * tick (100 ms after the thread starts; a tiny model runs dozens of steps in that
 * time) is then silent like any other, where a 0 would read as "no watchdog".  A
 * rank without the thread keeps 0 and is never called stopped. */
double zt_watch_first_beat(void) { return g_running ? now_s() : 0.0; }

static const char *scope_name(int scope)
{
    return scope == 0 ? "shard group" : scope == 1 ? "replica group" : "world";
}

static const flight_rec *find(uint64_t seq)
{
    const flight_rec *r = &g_ring[seq % ZT_FLIGHT_N];
    return seq && r->seq == seq ? r : NULL;
}

static void describe(char *buf, size_t len, const flight_rec *r)
{
    if (!r) {
        snprintf(buf, len, "a collective no longer in the recorder");
        return;
    }
    char unit[32] = "";
    if (r->unit >= 0)
        snprintf(unit, sizeof unit, ", unit %d", r->unit);
    snprintf(buf, len, "%s #%llu (%s, %zu bytes) in the %s of step %ld%s", r->kind,
             (unsigned long long)r->seq, scope_name(r->scope), r->bytes, r->phase ? r->phase : "setup",
             r->step, unit);
}

static void print_recorder(const char *why)
{
    uint64_t last = atomic_load(&g_seq);
    uint64_t first = last > ZT_FLIGHT_N ? last - ZT_FLIGHT_N + 1 : 1;
    double now = now_s();
    char line[256];
    fprintf(stderr, "ztrain: rank %d flight recorder (%s): the last %llu collectives, oldest first\n", g_rank,
            why, (unsigned long long)(last - first + 1));
    for (uint64_t s = first; s <= last; s++) {
        const flight_rec *r = find(s);
        if (!r)
            continue;
        describe(line, sizeof line, r);
        if (r->t_done > 0)
            fprintf(stderr, "  rank %d  %s: done in %.3f ms\n", g_rank, line, 1e3 * (r->t_done - r->t_enter));
        else
            fprintf(stderr, "  rank %d  %s: NOT DONE after %.3f s\n", g_rank, line, now - r->t_enter);
    }
    fflush(stderr);
}

/* A rank whose watchdog has not ticked for this long (16 ticks) is stopped, not
 * slow: the thread only sleeps 100 ms between ticks, even on a loaded machine. */
#define ZT_STOPPED_AFTER_S 1.6

/* The ranks on this machine that stopped: no tick for ZT_STOPPED_AFTER_S.  A
 * rank stopped inside the collective has entered it like the rest, so the
 * arrivals alone cannot name it; its silence does.  The count, names in list. */
static int stopped_ranks(const zt_board *b, char *list, size_t cap)
{
    double now = now_s();
    int n = 0;
    size_t used = 0;
    list[0] = 0;
    for (int i = 0; i < b->n; i++) {
        double beat = atomic_load(&b->slot[i]->beat);
        if (i == b->me || beat <= 0 || now - beat < ZT_STOPPED_AFTER_S)
            continue;
        int k = snprintf(list + used, cap - used, "%s%d (silent for %.1f s, at #%llu)", n ? ", " : "",
                         b->world_rank[i], now - beat, (unsigned long long)atomic_load(&b->slot[i]->entered));
        if (k > 0 && (size_t)k < cap - used)
            used += (size_t)k;
        n++;
    }
    return n;
}

/* The ranks on this machine whose last collective is before seq, and (with
 * name_stopped: the rank that timed out) those that stopped (no watchdog tick):
 * the stalled rank is named whether it stopped before the collective or inside
 * it.  A rank reporting for another does not judge silence: it may itself have
 * been the one stopped, and the others' clocks ran on while it was. */
static void print_arrivals(uint64_t seq, int name_stopped)
{
    zt_board *b = atomic_load(&g_board);
    if (!b) {
        fprintf(stderr, "ztrain: rank %d: which ranks have not arrived is unknown (no shared board)\n", g_rank);
        return;
    }
    char list[512] = "";
    size_t used = 0;
    int missing = 0;
    for (int i = 0; i < b->n; i++) {
        uint64_t e = atomic_load(&b->slot[i]->entered);
        if (i == b->me || e >= seq)
            continue;
        missing++;
        int k = snprintf(list + used, sizeof list - used, "%s%d (at #%llu)", missing > 1 ? ", " : "",
                         b->world_rank[i], (unsigned long long)e);
        if (k > 0 && (size_t)k < sizeof list - used)
            used += (size_t)k;
    }
    char stopped[512];
    int nstopped = name_stopped ? stopped_ranks(b, stopped, sizeof stopped) : 0;
    /* Every rank has arrived and none is silent yet: one stopped inside the
     * collective after entering it, later than this rank, has been silent for
     * less than the timeout, maybe less than ZT_STOPPED_AFTER_S.  Wait that long
     * at most (beating, so as not to look stopped itself) for its silence to show. */
    for (double t0 = now_s(); name_stopped && !missing && !nstopped && now_s() - t0 < ZT_STOPPED_AFTER_S + 0.2;) {
        nanosleep(&(struct timespec){0, 50 * 1000 * 1000}, NULL);
        atomic_store(&b->slot[b->me]->beat, now_s());
        nstopped = stopped_ranks(b, stopped, sizeof stopped);
    }
    if (nstopped)
        fprintf(stderr, "ztrain: rank %d: stalled rank%s (stopped: no watchdog tick): %s\n", g_rank,
                nstopped > 1 ? "s" : "", stopped);
    if (missing)
        fprintf(stderr, "ztrain: rank %d: ranks that have not arrived at #%llu: %s", g_rank,
                (unsigned long long)seq, list);
    else
        fprintf(stderr, "ztrain: rank %d: every rank on this machine has reached #%llu", g_rank,
                (unsigned long long)seq);
    if (b->n < b->world)
        fprintf(stderr, "; the %d ranks on other machines: unknown", b->world - b->n);
    fprintf(stderr, "\n");
}

/* Another rank timed out: say where this rank is, once. */
static void report_for_other(zt_board *b, int who, int was_stopped)
{
    char line[256];
    uint64_t bs = atomic_load(&g_blocked_seq);
    if (bs) {
        describe(line, sizeof line, find(bs));
        fprintf(stderr, "ztrain: rank %d: rank %d timed out; this rank is blocked in %s for %.1f s\n", g_rank,
                b->world_rank[who], line, now_s() - atomic_load(&g_blocked_since));
        /* A rank that was itself stopped has moved on since it woke: the others wait
         * on it, so which of them "has not arrived" at its newer collective says
         * nothing about them. */
        if (was_stopped)
            fprintf(stderr, "ztrain: rank %d: this rank was the one stopped; the others' arrivals not judged\n", g_rank);
        else
            print_arrivals(bs, 0);
    } else {
        describe(line, sizeof line, find(atomic_load(&g_seq)));
        fprintf(stderr, "ztrain: rank %d: rank %d timed out; this rank is not in a collective (its last: %s)\n",
                g_rank, b->world_rank[who], line);
    }
    print_recorder("rank timed out");
    atomic_store(&b->slot[b->me]->reported, 1);
}

static void on_timeout(uint64_t seq, double waited, int on_device)
{
    atomic_store(&g_aborting, 1);
    char line[256];
    describe(line, sizeof line, find(seq));
    fprintf(stderr, "ztrain: error: rank %d: collective timeout: %s %.1f s (--collective_timeout %g) in %s\n",
            g_rank, on_device ? "the device has waited" : "blocked", waited, atomic_load(&g_timeout), line);
    print_arrivals(seq, 1);
    print_recorder("timeout");
    zt_board *b = atomic_load(&g_board);
    if (b) { /* let the other ranks on this machine print theirs (at most 2 s) */
        atomic_store(&b->slot[b->me]->reported, 1);
        atomic_store(&b->slot[b->me]->timed_out, 1);
        double t0 = now_s();
        for (int all = 0; !all && now_s() - t0 < 2.0;) {
            nanosleep(&(struct timespec){0, 20 * 1000 * 1000}, NULL);
            double now = now_s();
            atomic_store(&b->slot[b->me]->beat, now); /* still alive while it waits here */
            all = 1;
            for (int i = 0; i < b->n; i++) /* a stopped rank cannot report: not waited for */
                all &= atomic_load(&b->slot[i]->reported) ||
                       now - atomic_load(&b->slot[i]->beat) >= ZT_STOPPED_AFTER_S;
        }
    }
    fprintf(stderr, "ztrain: error: rank %d: aborting the job after the collective timeout\n", g_rank);
    fflush(stderr);
    /* Under Open MPI's mpirun a rank that exits non-zero without MPI_Finalize
     * makes mpirun abort the job (orte_abort_on_non_zero_status, the default),
     * with its own one message.  MPI_Abort would do the same, but it first sends
     * mpirun a help message ("MPI_ABORT was invoked ...") and exits while it may
     * still be in flight: mpirun then prints an ORTE_ERROR_LOG line about a
     * truncated buffer.  Elsewhere (srun, another launcher) MPI_Abort is the one
     * way to end the others. */
    if (getenv("OMPI_MCA_orte_hnp_uri"))
        _exit(1);
    /* from this thread: the main thread is stuck inside MPI and will not return */
    MPI_Abort(MPI_COMM_WORLD, 1);
    _exit(1);
}

/* Has another rank on this machine declared a timeout?  Then the job is being
 * aborted for it, and this rank's own wait is its consequence, not a second
 * fault: a rank that was stopped (SIGSTOP, a debugger, a swapped-out node) and is
 * woken by the abort's SIGCONT finds itself "blocked" for longer than the
 * timeout, and would blame itself and abort the job a second time (which Open
 * MPI answers with ORTE_ERROR_LOG lines).  It reports where it is instead. */
static int other_timed_out(const zt_board *b)
{
    for (int i = 0; b && i < b->n; i++)
        if (i != b->me && atomic_load(&b->slot[i]->timed_out))
            return 1;
    return 0;
}

/* ---- collectives on the device (watchdog.h) ------------------------------- */

#define DEV_N 1024
typedef struct dev_rec {
    uint64_t seq;
    double since;
    void *marker;
} dev_rec;
static pthread_mutex_t g_dev_lock = PTHREAD_MUTEX_INITIALIZER;
static dev_rec g_dev[DEV_N];                /* in hand-over order; [0, g_ndev) in use */
static int g_ndev;
static int (*g_dev_done)(void *);
static void (*g_dev_release)(void *);

void zt_watch_set_device_probe(int (*done)(void *marker), void (*release)(void *marker))
{
    pthread_mutex_lock(&g_dev_lock);
    g_dev_done = done;
    g_dev_release = release;
    pthread_mutex_unlock(&g_dev_lock);
}

/* Release the markers that are done, keeping the others in order; the oldest
 * pending one in *oldest (NULL: none).  Under g_dev_lock. */
static void dev_reap(const dev_rec **oldest)
{
    int kept = 0;
    for (int i = 0; i < g_ndev; i++) {
        if (g_dev_done(g_dev[i].marker)) {
            flight_rec *r = &g_ring[g_dev[i].seq % ZT_FLIGHT_N];
            if (r->seq == g_dev[i].seq)
                r->t_done = now_s();
            g_dev_release(g_dev[i].marker);
        } else {
            g_dev[kept++] = g_dev[i];
        }
    }
    g_ndev = kept;
    *oldest = kept ? &g_dev[0] : NULL;
}

void zt_watch_device_track(uint64_t seq, void *marker)
{
    const dev_rec *oldest;
    pthread_mutex_lock(&g_dev_lock);
    if (g_ndev == DEV_N) /* the thread reaps every 100 ms; a faster queue reaps here */
        dev_reap(&oldest);
    while (g_ndev == DEV_N) { /* DEV_N collectives not done: the host waits for the oldest */
        uint64_t s = g_dev[0].seq;
        pthread_mutex_unlock(&g_dev_lock);
        zt_watch_block(s);
        nanosleep(&(struct timespec){0, 1000 * 1000}, NULL);
        zt_watch_unblock(s);
        pthread_mutex_lock(&g_dev_lock);
        dev_reap(&oldest);
    }
    g_dev[g_ndev++] = (dev_rec){seq, now_s(), marker};
    pthread_mutex_unlock(&g_dev_lock);
}

void zt_watch_device_release_all(void)
{
    pthread_mutex_lock(&g_dev_lock);
    for (int i = 0; i < g_ndev; i++)
        g_dev_release(g_dev[i].marker);
    g_ndev = 0;
    pthread_mutex_unlock(&g_dev_lock);
}

int zt_watch_device_pending(void)
{
    pthread_mutex_lock(&g_dev_lock);
    int n = g_ndev;
    pthread_mutex_unlock(&g_dev_lock);
    return n;
}

/* A tick: reap, and time out on the oldest collective the device still waits for. */
static void dev_tick(void)
{
    const dev_rec *oldest = NULL;
    uint64_t seq = 0;
    double waited = 0.0;
    pthread_mutex_lock(&g_dev_lock);
    if (g_ndev) {
        dev_reap(&oldest);
        if (oldest) {
            seq = oldest->seq;
            waited = now_s() - oldest->since;
        }
    }
    pthread_mutex_unlock(&g_dev_lock);
    if (seq && waited > atomic_load(&g_timeout) && !other_timed_out(atomic_load(&g_board)))
        on_timeout(seq, waited, 1);
}

static void *watch_main(void *arg)
{
    (void)arg;
    int reported = 0;
    double last_tick = now_s(), woke = 0.0;
    for (;;) {
        nanosleep(&(struct timespec){0, 100 * 1000 * 1000}, NULL);
        double now = now_s();
        zt_board *bb = atomic_load(&g_board);
        if (bb)
            atomic_store(&bb->slot[bb->me]->beat, now);
        /* A tick that comes long after the last one: this process itself was
         * stopped (SIGSTOP) and has just been continued.  Its collective waited
         * because it did, so it must not time out and blame a rank that waited
         * for it; it says so instead, and the timeout clock starts again. */
        if (now - last_tick > ZT_STOPPED_AFTER_S) {
            fprintf(stderr, "ztrain: rank %d: this rank was stopped for %.1f s (its watchdog could not run); "
                    "not a timeout of the others\n", g_rank, now - last_tick);
            woke = now;
        }
        last_tick = now;
        if (g_dump_requested) {
            g_dump_requested = 0;
            print_recorder("SIGUSR1");
        }
        zt_board *b = atomic_load(&g_board);
        if (b && !reported)
            for (int i = 0; i < b->n; i++)
                if (i != b->me && atomic_load(&b->slot[i]->timed_out)) {
                    report_for_other(b, i, woke > 0 && now - woke < 2 * ZT_STOPPED_AFTER_S);
                    reported = 1;
                    break;
                }
        uint64_t seq = atomic_load(&g_blocked_seq);
        double waited = now_s() - atomic_load(&g_blocked_since);
        if (woke > 0 && now - woke < atomic_load(&g_timeout))
            waited = now - woke < waited ? now - woke : waited; /* counted from the wake-up */
        if (seq && waited > atomic_load(&g_timeout) && seq == atomic_load(&g_blocked_seq) && !other_timed_out(b))
            on_timeout(seq, waited, 0);
        dev_tick();
    }
    return NULL;
}

static void on_sigusr1(int sig)
{
    (void)sig;
    g_dump_requested = 1; /* printed by the watchdog thread, outside the handler */
}

void zt_watch_test_stall(const char *phase, long step, int rank, int sig)
{
    snprintf(g_stall_phase, sizeof g_stall_phase, "%s", phase);
    g_stall_rank = rank;
    g_stall_sig = sig;
    g_stall_step = step;
}

void zt_watch_start(int rank)
{
    g_rank = rank;
    if (g_started)
        return;
    g_started = 1;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigusr1;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGUSR1, &sa, NULL);
    /* the thread must not take the process's signals (SIGINT, SIGTERM are the main
     * thread's); SIGUSR1 may land anywhere, its handler only sets a flag */
    sigset_t all, old;
    sigfillset(&all);
    sigdelset(&all, SIGUSR1);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    if (pthread_create(&g_thread, NULL, watch_main, NULL) == 0) {
        pthread_detach(g_thread);
        g_running = 1;
    }
    else
        fprintf(stderr, "ztrain: warning: rank %d: no watchdog thread: a stalled collective will not time out\n",
                rank);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
}

/* The main thread after a declared timeout: wait for the abort to end the process
 * (a signal handler may run and return; the loop goes back to waiting). */
static void park_if_aborting(void)
{
    while (atomic_load(&g_aborting))
        pause();
}

uint64_t zt_watch_enter(const char *kind, int scope, size_t bytes, long step, const char *phase, int unit)
{
    park_if_aborting();
    if (g_stall_step >= 0 && step == g_stall_step && g_rank == g_stall_rank && phase &&
        !strcmp(phase, g_stall_phase)) {
        g_stall_step = -1;
        fprintf(stderr, "ztrain: rank %d: test: raising signal %d in the %s of step %ld\n", g_rank, g_stall_sig,
                phase, step);
        fflush(stderr);
        raise(g_stall_sig);
    }
    uint64_t seq = atomic_load(&g_seq) + 1;
    flight_rec *r = &g_ring[seq % ZT_FLIGHT_N];
    *r = (flight_rec){seq, kind, phase, scope, unit, step, bytes, now_s(), 0.0};
    atomic_store(&g_seq, seq);
    zt_board *b = atomic_load(&g_board);
    if (b)
        atomic_store(&b->slot[b->me]->entered, seq);
    return seq;
}

void zt_watch_block(uint64_t seq)
{
    atomic_store(&g_blocked_since, now_s());
    atomic_store(&g_blocked_seq, seq);
}

void zt_watch_unblock(uint64_t seq)
{
    park_if_aborting();
    atomic_store(&g_blocked_seq, 0);
    flight_rec *r = &g_ring[seq % ZT_FLIGHT_N];
    if (r->seq == seq)
        r->t_done = now_s();
}
