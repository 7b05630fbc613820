/* prof_backend.h — the profiler at the backend table's dispatch (core/prof.h).
 *
 * zt_backend_profiled(inner) returns a table whose every entry records one event
 * around the inner table's entry: its name, its category (kernel, transfer,
 * memory, sync) and its work computed from the shapes it is called with (FLOPs of
 * the products and the attention, bytes moved by the others: each input read
 * once, each output written once).  So every kernel of every backend is covered
 * once, whatever calls it.  Entries that only answer a question (stream, the
 * scratch sizes) are passed through.  On a device with a stream (CUDA) it also
 * installs the device's clock, CUDA events on that stream (backend_cuda.h).
 *
 * One wrapped table per process (the table has no context argument); wrapping
 * again replaces the inner table.  Used only when a profile is open. */
#ifndef ZT_PROF_BACKEND_H
#define ZT_PROF_BACKEND_H

#include "backend.h"

const zt_backend *zt_backend_profiled(const zt_backend *inner);

/* The FLOPs of causal attention over B sequences of T, nh heads of hd, window
 * (0: none): forward 4·B·nh·hd·P, backward 10·B·nh·hd·P (five products: the
 * scores again, dP, dV, dK, dQ), P the (query, key) pairs the mask keeps. */
double zt_attention_flops(int B, int T, int nh, int hd, int window, int backward);

#endif
