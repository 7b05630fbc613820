/* comm_impl.h — what comm.c (the collectives) and comm_create.c (the
 * communicators) share; private to src/comm. */
#ifndef ZT_COMM_IMPL_H
#define ZT_COMM_IMPL_H

#include <mpi.h>

#include "comm.h"
#include "watchdog.h"

static inline MPI_Comm *as_comm(void *p) { return (MPI_Comm *)p; }

/* The flight-recorder entry of a collective, with the caller's context. */
static inline uint64_t enter(const zt_comm *c, const char *kind, int scope, size_t bytes)
{
    return zt_watch_enter(kind, scope, bytes, c->step, c->phase, c->unit);
}

#endif
