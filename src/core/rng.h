/* rng.h — splitmix64: the project's one seeded generator (initial weights,
 * the shuffled data order).  Every consumer draws from its own state word, so
 * a run's numbers depend only on the seeds it was given. */
#ifndef ZT_RNG_H
#define ZT_RNG_H

#include <stdint.h>

uint64_t zt_rand_next(uint64_t *state);
double zt_rand_uniform(uint64_t *state);  /* [0, 1) */
double zt_rand_normal(uint64_t *state);   /* standard normal, Box-Muller */

#endif
