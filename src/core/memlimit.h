/* memlimit.h — the memory limits a process lives under, besides the machine's
 * free memory: its cgroup's memory limit and its address-space limit.  The
 * memory gate (cli/memory_gate.h) takes the least of them, so a model that
 * cannot fit is refused before it is allocated rather than failing halfway. */
#ifndef ZT_MEMLIMIT_H
#define ZT_MEMLIMIT_H

#include <stddef.h>

/* self_cgroup is /proc/self/cgroup's text, root the cgroup mount
 * (/sys/fs/cgroup; a test gives a tree of its own).  The least room (limit less
 * usage) of this process's memory cgroup and its ancestors, cgroup v2
 * (memory.max, memory.current) or v1 (memory.limit_in_bytes,
 * memory.usage_in_bytes), with that level's limit file in which; -1 when no
 * level sets a limit. */
double zt_cgroup_memory_room(const char *root, const char *self_cgroup, char *which, size_t which_len);

/* The room ulimit -v (RLIMIT_AS) leaves this process: the limit less the
 * address space it already maps (VmSize); -1 when unlimited. */
double zt_address_space_room(void);

/* The number N of the first line of a /proc file (/proc/meminfo,
 * /proc/self/status) that line_format (e.g. "MemAvailable: %llu kB") matches;
 * 0 when the file or the line is missing. */
unsigned long long zt_proc_kb(const char *path, const char *line_format);

#endif
