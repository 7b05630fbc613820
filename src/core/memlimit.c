/* memlimit.c — the memory limits a process lives under (see memlimit.h). */
#include "memlimit.h"

#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

/* A number from the first line of path: -1 when absent or "max" (no limit). */
static double read_number(const char *path)
{
    FILE *f = fopen(path, "r");
    unsigned long long v = 0;
    int ok = f && fscanf(f, "%llu", &v) == 1;
    if (f)
        fclose(f);
    return ok ? (double)v : -1.0;
}

/* One cgroup directory's room: limit - usage, or -1 when it sets no limit (v1
 * writes "no limit" as a number near 2^63). */
static double cgroup_room(const char *dir, const char *limit_file, const char *usage_file)
{
    char path[4400];
    snprintf(path, sizeof path, "%s/%s", dir, limit_file);
    double limit = read_number(path);
    if (limit < 0 || limit >= 1e18)
        return -1.0;
    snprintf(path, sizeof path, "%s/%s", dir, usage_file);
    double used = read_number(path);
    return used >= 0 && used < limit ? limit - used : used >= limit ? 0.0 : limit;
}

double zt_cgroup_memory_room(const char *root, const char *self_cgroup, char *which, size_t which_len)
{
    /* cgroup v2: the "0::PATH" line, files memory.max and memory.current under
     * ROOT (a unified mount) or ROOT/unified (a hybrid one); v1: the line whose
     * controllers include "memory", memory.limit_in_bytes and
     * memory.usage_in_bytes under ROOT/memory.  Every ancestor's limit binds
     * too, so the walk goes up to the mount's root and keeps the least room. */
    double best = -1.0;
    char line[4400], base[4400], dir[4400];
    for (const char *l = self_cgroup; l && *l;) {
        size_t n = strcspn(l, "\n");
        snprintf(line, sizeof line, "%.*s", (int)(n < sizeof line ? n : sizeof line - 1), l);
        l += n + (l[n] == '\n');
        char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (!c2)
            continue;
        *c2 = 0;
        const char *ctrl = c1 + 1, *cpath = c2 + 1;
        int v2 = *ctrl == 0, v1 = 0;
        for (const char *t = ctrl; !v2 && *t; t += strcspn(t, ","), t += *t == ',')
            v1 |= strncmp(t, "memory", 6) == 0 && (t[6] == ',' || t[6] == 0);
        if (!v1 && !v2)
            continue;
        char probe[4500];
        snprintf(base, sizeof base, "%s%s", root, v1 ? "/memory" : "");
        snprintf(probe, sizeof probe, "%s/cgroup.controllers", base);
        if (v2 && access(probe, F_OK) != 0)
            snprintf(base, sizeof base, "%s/unified", root);
        snprintf(dir, sizeof dir, "%s%s", base, strcmp(cpath, "/") ? cpath : "");
        for (;;) {
            double room = v2 ? cgroup_room(dir, "memory.max", "memory.current")
                             : cgroup_room(dir, "memory.limit_in_bytes", "memory.usage_in_bytes");
            if (room >= 0 && (best < 0 || room < best)) {
                best = room;
                snprintf(which, which_len, "%s/%s", dir, v2 ? "memory.max" : "memory.limit_in_bytes");
            }
            char *slash = strrchr(dir, '/');
            if (strlen(dir) <= strlen(base) || !slash)
                break;
            *slash = 0;
        }
    }
    return best;
}

unsigned long long zt_proc_kb(const char *path, const char *line_format)
{
    FILE *f = fopen(path, "r");
    unsigned long long kb = 0;
    char line[256];
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, line_format, &kb) == 1)
            break;
    if (f)
        fclose(f);
    return kb;
}

/* This process's room under ulimit -v (RLIMIT_AS): the limit less the address
 * space it already maps (VmSize); -1 when unlimited. */
double zt_address_space_room(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_AS, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY)
        return -1.0;
    double used = (double)zt_proc_kb("/proc/self/status", "VmSize: %llu kB") * 1024.0;
    return (double)rl.rlim_cur > used ? (double)rl.rlim_cur - used : 0.0;
}

