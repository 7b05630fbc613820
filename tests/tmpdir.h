/* tmpdir.h — scratch files for tests.
 *
 * tmpdir_make creates a fresh directory /tmp/<prefix>XXXXXX with mkdtemp;
 * tmpdir_join and tmpdir_path build paths inside it; write_bytes writes a byte
 * buffer to a file, recording a failed ZT_CHECK if it cannot; tmpdir_remove
 * deletes a directory tree with nftw (no shell, no system()).  nftw needs
 * _GNU_SOURCE, which the Makefile defines. */
#ifndef ZT_TMPDIR_H
#define ZT_TMPDIR_H

#include <errno.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

#include "test.h"

/* Fill dir (cap bytes) with a new, empty, private directory /tmp/<prefix>XXXXXX.
 * Returns dir, or NULL with errno set, as mkdtemp does. */
static inline char *tmpdir_make(char *dir, size_t cap, const char *prefix)
{
    int n = snprintf(dir, cap, "/tmp/%sXXXXXX", prefix);
    if (n < 0 || (size_t)n >= cap) {
        errno = ENAMETOOLONG;
        return NULL;
    }
    return mkdtemp(dir);
}

/* buf = dir/name; returns buf. */
static inline char *tmpdir_join(char *buf, size_t cap, const char *dir, const char *name)
{
    snprintf(buf, cap, "%s/%s", dir, name);
    return buf;
}

/* dir/name in a ring of 8 static buffers, so a few paths can be live at once. */
static inline const char *tmpdir_path(const char *dir, const char *name)
{
    static char ring[8][512];
    static int next;
    return tmpdir_join(ring[next++ % 8], sizeof ring[0], dir, name);
}

/* Create or truncate path and write n bytes of data; a failure is a failed check. */
static inline void write_bytes(const char *path, const void *data, size_t n)
{
    FILE *f = fopen(path, "wb");
    ZT_CHECK_MSG(f != NULL, "cannot create %s", path);
    if (!f)
        return;
    if (n)
        ZT_CHECK(fwrite(data, 1, n, f) == n);
    fclose(f);
}

static inline int tmpdir_remove_one(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb, (void)flag, (void)ftw;
    return remove(p);
}

/* Remove dir and everything below it, not following symlinks.  Like rm -rf, a
 * dir that does not exist is success.  Returns 0, or -1 if anything stayed. */
static inline int tmpdir_remove(const char *dir)
{
    struct stat st;
    if (lstat(dir, &st) != 0 && errno == ENOENT)
        return 0;
    return nftw(dir, tmpdir_remove_one, 16, FTW_DEPTH | FTW_PHYS) == 0 ? 0 : -1;
}

#endif
