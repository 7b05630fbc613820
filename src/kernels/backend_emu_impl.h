/* backend_emu_impl.h — what the emulated device (backend_emu.c) shares with its
 * copy queue (backend_emu_copy.c); private to src/kernels.  The scope of the
 * emulator is backend_emu.c's header comment and docs/gpu.md's. */
#ifndef ZT_BACKEND_EMU_IMPL_H
#define ZT_BACKEND_EMU_IMPL_H

#include <stddef.h>
#include <stdint.h>

#define EMU_BIAS ((uintptr_t)1 << 62)

/* a host address as a handle, and back; NULL stays NULL (an alloc of 0 bytes, an absent buffer) */
static inline void *handle_of(const void *p) { return p ? (void *)((uintptr_t)p + EMU_BIAS) : NULL; }
static inline void *host_of(const void *p) { return p ? (void *)((uintptr_t)p - EMU_BIAS) : NULL; }

/* backend_emu.c: an entry a capture cannot hold, noted; a host wait counted */
void zt_emu_refused(const char *entry);
void zt_emu_waited(void);

/* backend_emu_copy.c: the copies queued before upto run (all of them for upto < 0),
 * and the table's entries for the copy queue */
void zt_emu_run_copies(long upto);
void emu_to_host_async(void *dst_host, const void *src, size_t bytes);
void emu_to_device_async(void *dst, const void *src_host, size_t bytes);
void emu_copy_join(void);
long emu_copy_record(void);
void emu_copy_wait_marker(long marker);

#endif
