/* tune.h — choosing among a library's candidate algorithms for one shape by timing
 * them once, and remembering the winner for the run.
 *
 * The CUDA table's products (cuda/matmul.cu) ask cuBLASLt's heuristic for its top
 * candidates (up to ZT_TUNE_MAX) at a shape's first use, time each on the real
 * operands, and keep the fastest: the heuristic's first choice is often not the
 * fastest for the long, thin weight-gradient products of a training step.  The
 * choice is the host logic here (the cache, the switch, the fastest of given times),
 * so it is tested on a machine without a GPU with a fake timer (tests/test_tune.c).
 *
 * Timing makes the choice depend on the machine's moment: two runs may pick different
 * algorithms for a shape, and so differ in the last bits of their sums.  A run that
 * must be reproducible turns tuning off with ZT_MATMUL_TUNE=0 and takes the
 * heuristic's first candidate, which depends on the shape alone. */
#ifndef ZT_TUNE_H
#define ZT_TUNE_H

#include <stddef.h>

#include "../core/status.h"

#define ZT_TUNE_MAX 8        /* candidates timed per shape */
#define ZT_TUNE_KEY_BYTES 64 /* a shape's key, compared as bytes */
#define ZT_TUNE_SLOTS 256    /* shapes remembered; more than any model has */

/* The time of candidate `cand` (any unit, smaller is faster); negative when the
 * candidate cannot run this shape (it is then never chosen). */
typedef double (*zt_tune_timer)(void *ctx, int cand);

typedef struct zt_tune_cache {
    int on; /* 0: no timing, the first candidate */
    int used, next_evict;
    struct {
        unsigned char key[ZT_TUNE_KEY_BYTES];
        size_t key_bytes;
        int winner;
    } slot[ZT_TUNE_SLOTS];
} zt_tune_cache;

/* Whether tuning is on, from the environment variable ZT_MATMUL_TUNE: unset, empty
 * or "1" on, "0" off; anything else is refused (ZT_EINPUT naming the variable). */
int zt_tune_setting(int *on, zt_err *err);

/* The index of the fastest of n candidates (n >= 1), each timed once; ties go to the
 * earlier (the heuristic's order); 0 when every one fails. */
int zt_tune_fastest(int n, zt_tune_timer time, void *ctx);

/* The candidate to use for a shape: the remembered winner of an earlier call with
 * the same key (no timing), else the fastest of n (or 0 when c->on is 0, without
 * timing), remembered.  key_bytes at most ZT_TUNE_KEY_BYTES. */
int zt_tune_choose(zt_tune_cache *c, const void *key, size_t key_bytes, int n, zt_tune_timer time, void *ctx);

#endif
