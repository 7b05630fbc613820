/* backend_emu_copy.c — the emulated device's copy queue (backend_emu.c has the
 * device and its scope). */
#include <string.h>

#include "backend.h"
#include "backend_emu_impl.h"

/* The copy queue, both ways, each copy numbered in the order it was queued (a GPU's
 * copy stream runs them in that order).  No copy is run when it is queued, and none
 * counts a wait: a device queues it and goes on.  Down (to_host_async): held until a
 * copy_wait, a sync or a copy_wait_marker past it, as late as a device's copy queue
 * may finish it, so a host that reads the staging buffer before its wait gets the
 * bytes a GPU could give (stale ones) and a test sees them.  Up (to_device_async):
 * held until the next copy_join too, so that a host writing the staging buffer
 * before copy_wait, or a kernel reading the destination without a copy_join, gets
 * stale bytes as well, instead of passing by the luck of one queue.  A copy_join
 * runs the uploads only: the device waits there, the host does not, so what came
 * down is still not the host's to read.  Not inside a capture: the CUDA table's
 * copies run on a stream of their own, which a capture cannot leave forked. */
#define EMU_COPIES 256
typedef struct {
    void *dst; /* a host address: host_of() already applied to a device side */
    const void *src;
    size_t bytes;
    long seq;
} emu_copy_t;
typedef struct {
    emu_copy_t q[EMU_COPIES];
    int head, n;
} emu_copy_queue;
static emu_copy_queue downloads, uploads;
static long copies_queued;    /* every copy queued since the process started: a marker */
static long overlapped_waits; /* zt_backend_emu_overlapped_waits */

/* the copies of q numbered below upto (all of them for upto < 0), in their order */
static void run_queue(emu_copy_queue *q, long upto)
{
    while (q->n && (upto < 0 || q->q[q->head].seq < upto)) {
        const emu_copy_t *c = &q->q[q->head];
        memcpy(c->dst, c->src, c->bytes);
        q->head = (q->head + 1) % EMU_COPIES;
        q->n--;
    }
}

void zt_emu_run_copies(long upto)
{
    run_queue(&uploads, upto);
    run_queue(&downloads, upto);
}

static void enqueue(emu_copy_queue *q, void *dst, const void *src, size_t bytes)
{
    if (q->n == EMU_COPIES) /* a full queue runs: a device may finish its copies at any time */
        zt_emu_run_copies(-1);
    q->q[(q->head + q->n++) % EMU_COPIES] = (emu_copy_t){dst, src, bytes, copies_queued++};
}

void emu_to_host_async(void *dst_host, const void *src, size_t bytes)
{
    zt_emu_refused("to_host_async");
    enqueue(&downloads, dst_host, host_of(src), bytes);
}

void emu_to_device_async(void *dst, const void *src_host, size_t bytes)
{
    zt_emu_refused("to_device_async"); /* offload's copy queue: no captured step has offload */
    enqueue(&uploads, host_of(dst), src_host, bytes);
}

void emu_copy_join(void) /* the device waits, the host does not */
{
    zt_emu_refused("copy_join");
    run_queue(&uploads, -1);
}

/* the marker is the number of the next copy: the copies before it are its own */
long emu_copy_record(void)
{
    zt_emu_refused("copy_record");
    return copies_queued;
}

/* one wait, for the copies queued before the marker and no others */
void emu_copy_wait_marker(long marker)
{
    zt_emu_refused("copy_wait_marker");
    zt_emu_waited();
    zt_emu_run_copies(marker);
    if (downloads.n)
        overlapped_waits++;
}

long zt_backend_emu_overlapped_waits(void) { return overlapped_waits; }
