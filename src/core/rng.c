/* rng.c — see rng.h. */
#include "rng.h"

#include <math.h>

uint64_t zt_rand_next(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

double zt_rand_uniform(uint64_t *s) { return (double)(zt_rand_next(s) >> 11) * 0x1.0p-53; }

double zt_rand_normal(uint64_t *s)
{
    double u1 = zt_rand_uniform(s), u2 = zt_rand_uniform(s);
    if (u1 < 1e-300)
        u1 = 1e-300;
    return sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
}
