/* test_memlimit.c — the cgroup memory limit the memory gate obeys (issue 44,
 * point 4), read from trees built here the way the kernel lays them out: cgroup
 * v1 (ROOT/memory/PATH), v2 unified (ROOT/PATH) and v2 hybrid (ROOT/unified/PATH),
 * an ancestor's tighter limit winning, "max" and v1's near-2^63 meaning none. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../src/core/memlimit.h"
#include "test.h"

static char root[256];

static void put(const char *rel, const char *text)
{
    char path[512], dir[512];
    snprintf(path, sizeof path, "%s/%s", root, rel);
    snprintf(dir, sizeof dir, "%s", path);
    for (char *p = dir + strlen(root) + 1; *p; p++)
        if (*p == '/') {
            *p = 0;
            mkdir(dir, 0755);
            *p = '/';
        }
    FILE *f = fopen(path, "w");
    ZT_CHECK(f != NULL);
    if (f) {
        fputs(text, f);
        fclose(f);
    }
}

static void fresh(const char *name)
{
    snprintf(root, sizeof root, "/tmp/zt_memlimit_%d_%s", (int)getpid(), name);
    mkdir(root, 0755);
}

static void test_v1_ancestor_wins(void)
{
    fresh("v1");
    put("memory/a/b/memory.limit_in_bytes", "1000000\n");
    put("memory/a/b/memory.usage_in_bytes", "200000\n");
    put("memory/a/memory.limit_in_bytes", "500000\n");
    put("memory/a/memory.usage_in_bytes", "100000\n");
    put("memory/memory.limit_in_bytes", "9223372036854771712\n"); /* v1's "no limit" */
    char which[512] = "";
    double room = zt_cgroup_memory_room(root, "5:cpu,cpuacct:/\n4:memory:/a/b\n0::/\n", which, sizeof which);
    ZT_CHECK_MSG(room == 400000.0, "room %.0f", room);
    ZT_CHECK_MSG(strstr(which, "/memory/a/memory.limit_in_bytes") != NULL, "which %s", which);
    /* the child's own limit when it is the tighter one */
    put("memory/a/b/memory.limit_in_bytes", "300000\n");
    room = zt_cgroup_memory_room(root, "4:memory:/a/b\n", which, sizeof which);
    ZT_CHECK_MSG(room == 100000.0, "room %.0f", room);
    ZT_CHECK_MSG(strstr(which, "/memory/a/b/memory.limit_in_bytes") != NULL, "which %s", which);
}

static void test_v2_unified_and_hybrid(void)
{
    fresh("v2");
    put("cgroup.controllers", "memory\n");
    put("x/memory.max", "300000\n");
    put("x/memory.current", "100000\n");
    char which[512] = "";
    double room = zt_cgroup_memory_room(root, "0::/x\n", which, sizeof which);
    ZT_CHECK_MSG(room == 200000.0, "room %.0f", room);
    ZT_CHECK_MSG(strstr(which, "/x/memory.max") != NULL, "which %s", which);
    put("x/memory.max", "max\n");
    ZT_CHECK(zt_cgroup_memory_room(root, "0::/x\n", which, sizeof which) == -1.0);
    fresh("hybrid"); /* no cgroup.controllers at the root: v2 lives under unified/ */
    put("unified/y/memory.max", "64000\n");
    put("unified/y/memory.current", "80000\n"); /* over its limit: no room */
    room = zt_cgroup_memory_room(root, "1:name=systemd:/\n0::/y\n", which, sizeof which);
    ZT_CHECK_MSG(room == 0.0, "room %.0f", room);
}

static void test_no_limit(void)
{
    fresh("none");
    char which[64] = "";
    ZT_CHECK(zt_cgroup_memory_room(root, "4:memory:/gone\n0::/gone\n", which, sizeof which) == -1.0);
    ZT_CHECK(zt_cgroup_memory_room(root, "", which, sizeof which) == -1.0);
}

int main(void)
{
    ZT_RUN(test_v1_ancestor_wins);
    ZT_RUN(test_v2_unified_and_hybrid);
    ZT_RUN(test_no_limit);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf /tmp/zt_memlimit_%d_*", (int)getpid());
    if (system(cmd) != 0)
        fprintf(stderr, "  could not remove the test's trees\n");
    ZT_TEST_MAIN_END();
}
