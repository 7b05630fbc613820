/* watchdog.h — the flight recorder and the collective watchdog (comm-internal).
 *
 * Every collective this rank enters gets a sequence number and a record: its
 * kind, scope, bytes, and the trainer's context (step, phase, unit).  The last
 * ZT_FLIGHT_N records form the flight recorder (FSDP's name), printed when the job
 * aborts on a timeout and on SIGUSR1 (mpirun forwards SIGUSR1 to every rank).
 *
 * A watchdog thread, started with the first communicator, wakes every 100 ms.
 * When the main thread has been blocked in one collective for longer than the
 * timeout (--collective_timeout, 600 s by default as NCCL's), it prints what the
 * rank waits for and which ranks have not arrived, asks the other ranks to print
 * theirs, and aborts the job (MPI_Abort), so a stopped or lost rank never hangs
 * the others silently.
 *
 * "Which ranks have not arrived" is knowable for the ranks on this machine: each
 * rank publishes the sequence number of the last collective it entered in a
 * shared-memory window (MPI_Win_allocate_shared over the node), which the
 * watchdog reads with plain loads, without calling MPI.  Since every rank makes
 * the same collective calls in the same order (SPMD), a rank whose number is
 * below ours has not reached our collective.  Ranks on other machines are
 * reported as unknown. */
#ifndef ZT_WATCHDOG_H
#define ZT_WATCHDOG_H

#include <stddef.h>
#include <stdint.h>

#define ZT_FLIGHT_N 32

/* One rank's slot in the node's arrival board (shared memory between processes). */
typedef struct zt_board_slot {
    _Atomic uint64_t entered;   /* sequence number of the last collective entered */
    _Atomic int timed_out;      /* this rank's watchdog fired: others, print your state */
    _Atomic int reported;       /* this rank has printed its state for a timeout */
    _Atomic double beat;        /* CLOCK_MONOTONIC time of this rank's last watchdog tick: a
                                 * rank stopped (SIGSTOP, a debugger) stops beating, whether it
                                 * stopped before a collective or inside one */
} zt_board_slot;

/* The node's board: slot[i] belongs to world rank world_rank[i]. */
typedef struct zt_board {
    int n, me, world;
    zt_board_slot **slot;
    int *world_rank;
} zt_board;

void zt_watch_set_timeout(double seconds);
/* Start the watchdog thread and the SIGUSR1 handler once per process (idempotent). */
void zt_watch_start(int rank);
/* The board the watchdog reads (NULL: none; before the window is freed). */
void zt_watch_set_board(zt_board *b);
/* The beat a rank's new slot starts with: now when its watchdog thread runs, else 0
 * (no watchdog: never judged silent). */
double zt_watch_first_beat(void);

/* Test seam (tests/test_stall.c; production never arms it): the first time
 * `rank` enters a collective in `phase` of `step`, it raises `sig` on itself,
 * as a rank stopped or killed in the middle of a step would. */
void zt_watch_test_stall(const char *phase, long step, int rank, int sig);

/* Collectives the device runs (NCCL).  The host never blocks in one: a wait only
 * orders the device's compute queue after it, and the host blocks later in some
 * device wait (a download, a sync), where the timeout above cannot see it.  So the
 * watchdog thread watches them itself, as PyTorch's NCCL watchdog does: the comm
 * layer hands over each collective's completion marker (a CUDA event) when it
 * waits for it; every tick the thread asks done(marker), releases the markers that
 * are done (release, and the record's time), and times the job out on one that is
 * not done after the timeout.  The probe is set once, before the first marker. */
void zt_watch_set_device_probe(int (*done)(void *marker), void (*release)(void *marker));
void zt_watch_device_track(uint64_t seq, void *marker);
/* Release every marker now (the communicator ends; the device has been synchronized). */
void zt_watch_device_release_all(void);
/* Markers not yet seen done (tests). */
int zt_watch_device_pending(void);

/* Enter a collective: record it and publish its number; returns the number. */
uint64_t zt_watch_enter(const char *kind, int scope, size_t bytes, long step, const char *phase, int unit);
/* The main thread blocks on collective seq (a blocking call or a wait) / is back. */
void zt_watch_block(uint64_t seq);
void zt_watch_unblock(uint64_t seq);

#endif
