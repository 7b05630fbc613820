/* common.c — see fuzz.h. */
#include "fuzz.h"

#include <unistd.h>

static char g_dir[64];
static struct {
    char name[64];
    char path[160];
} g_slots[8];

static void remove_dir(void)
{
    for (int i = 0; i < 8; i++)
        if (g_slots[i].path[0])
            unlink(g_slots[i].path);
    if (g_dir[0])
        rmdir(g_dir);
}

const char *fuzz_dir(void)
{
    if (!g_dir[0]) {
        snprintf(g_dir, sizeof g_dir, "/tmp/ztfuzz.XXXXXX");
        if (!mkdtemp(g_dir)) {
            perror("mkdtemp");
            abort();
        }
        atexit(remove_dir);
    }
    return g_dir;
}

const char *fuzz_write(const char *name, const uint8_t *data, size_t size)
{
    int i = 0;
    while (i < 8 && g_slots[i].name[0] && strcmp(g_slots[i].name, name))
        i++;
    if (i == 8)
        abort();
    if (!g_slots[i].name[0]) {
        snprintf(g_slots[i].name, sizeof g_slots[i].name, "%s", name);
        snprintf(g_slots[i].path, sizeof g_slots[i].path, "%s/%s", fuzz_dir(), name);
    }
    FILE *f = fopen(g_slots[i].path, "wb");
    if (!f || (size && fwrite(data, 1, size, f) != size) || fclose(f) != 0) {
        perror(g_slots[i].path);
        abort();
    }
    return g_slots[i].path;
}

void fuzz_refusal(int rc, const zt_err *err, const char *path)
{
    if (rc == ZT_EFAIL && strstr(err->msg, "out of memory"))
        return;
    FUZZ_REQUIRE(rc == ZT_EINPUT, "refused with code %d (want %d, bad input): %s", rc, ZT_EINPUT, err->msg);
    FUZZ_REQUIRE(strstr(err->msg, path) != NULL, "the message does not name %s: %s", path, err->msg);
}
