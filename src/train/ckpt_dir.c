/* ckpt_dir.c — checkpoint-N entries in the output directory (ckpt_dir.h). */
#include "ckpt_dir.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int rm_entry(const char *path, const struct stat *sb, int type, struct FTW *ftw)
{
    (void)sb, (void)type, (void)ftw;
    return remove(path) != 0 && errno != ENOENT ? -1 : 0;
}

/* rm -rf, not following symlinks. */
int zt_ckpt_remove_tree(const char *path)
{
    return nftw(path, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

static void fsync_dir(const char *path)
{
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
        (void)fsync(fd); /* best effort: some filesystems refuse fsync on directories */
        close(fd);
    }
}

/* checkpoint-N with N all digits: N, else -1. */
static long checkpoint_number(const char *name)
{
    if (strncmp(name, "checkpoint-", 11) || !name[11])
        return -1;
    long n = 0;
    for (const char *p = name + 11; *p; p++) {
        if (*p < '0' || *p > '9' || n > 100000000000000L)
            return -1;
        n = n * 10 + (*p - '0');
    }
    return n;
}

/* Leftovers of interrupted saves: .checkpoint-*.tmp-* and .checkpoint-*.del-*
 * directories, *.ztmp-* files of interrupted atomic writes and .*.zstage-*
 * files of an interrupted model save (zt_fileset). */
static int is_litter(const char *name)
{
    if (!strncmp(name, ".checkpoint-", 12) && (strstr(name, ".tmp-") || strstr(name, ".del-")))
        return 1;
    return strstr(name, ".ztmp-") != NULL || (name[0] == '.' && strstr(name, ".zstage-") != NULL);
}

void zt_ckpt_remove_litter(const char *output_dir)
{
    DIR *d = opendir(output_dir);
    if (!d)
        return;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (!is_litter(e->d_name))
            continue;
        char path[4400];
        snprintf(path, sizeof path, "%s/%s", output_dir, e->d_name);
        zt_ckpt_remove_tree(path);
    }
    closedir(d);
}

static int cmp_numbered_desc(const void *a, const void *b)
{
    long x = ((const zt_ckpt_numbered *)a)->n, y = ((const zt_ckpt_numbered *)b)->n;
    return x < y ? 1 : x > y ? -1 : 0;
}

zt_ckpt_numbered *zt_ckpt_list(const char *dir, int *n)
{
    *n = 0;
    DIR *d = opendir(dir);
    if (!d)
        return NULL;
    int cap = 16;
    zt_ckpt_numbered *v = malloc((size_t)cap * sizeof *v);
    struct dirent *e;
    while (v && (e = readdir(d))) {
        long k = checkpoint_number(e->d_name);
        if (k < 0 || strlen(e->d_name) >= sizeof v->name)
            continue;
        if (*n == cap) {
            zt_ckpt_numbered *w = realloc(v, (size_t)(cap *= 2) * sizeof *v);
            if (!w)
                break;
            v = w;
        }
        v[*n].n = k;
        snprintf(v[*n].name, sizeof v->name, "%s", e->d_name);
        (*n)++;
    }
    closedir(d);
    if (v)
        qsort(v, (size_t)*n, sizeof *v, cmp_numbered_desc);
    return v;
}

/* Keep the newest keep checkpoint-N directories, and checkpoint-best (0: none) as
 * Trainer keeps its best model's: in place of the oldest of those kept, or beside
 * the newest when keep is 1.  Each goes by renaming it to a .del- name first, so a
 * kill during the removal leaves litter, never a partial checkpoint-N. */
void zt_ckpt_rotate(const char *output_dir, long keep, long best)
{
    int n;
    zt_ckpt_numbered *v = zt_ckpt_list(output_dir, &n);
    int best_kept = 0;
    for (int i = 0; v && best > 0 && i < n && i < (int)keep; i++)
        best_kept |= v[i].n == best;
    if (best > 0 && !best_kept && keep > 1)
        keep--; /* the best takes the place of the oldest kept */
    for (int i = (int)keep; v && i < n; i++) {
        if (v[i].n == best)
            continue;
        char from[4400], to[4400];
        snprintf(from, sizeof from, "%s/%s", output_dir, v[i].name);
        snprintf(to, sizeof to, "%s/.%s.del-%ld", output_dir, v[i].name, (long)getpid());
        if (rename(from, to) == 0)
            zt_ckpt_remove_tree(to);
    }
    free(v);
}

/* Rank 0: put tmpdir in place of final.  An existing checkpoint-N is exchanged
 * with it in one step (renameat2 RENAME_EXCHANGE), then the old copy, now under
 * the temporary name, is removed.  Where the filesystem cannot exchange, the old
 * one is first renamed aside: for a moment no checkpoint-N exists, but never a
 * mixed one. */
int zt_ckpt_publish(const char *tmpdir, const char *final, const char *output_dir, long step, zt_err *err)
{
    fsync_dir(tmpdir);
    struct stat sb;
    int rc = ZT_OK;
    if (lstat(final, &sb) != 0) {
        if (rename(tmpdir, final) != 0)
            rc = zt_fail(err, ZT_EINPUT, "%s: cannot rename %s into place: %s", final, tmpdir, strerror(errno));
    } else if (!S_ISDIR(sb.st_mode)) {
        rc = zt_fail(err, ZT_EINPUT, "%s: exists and is not a directory", final);
    } else if (renameat2(AT_FDCWD, tmpdir, AT_FDCWD, final, RENAME_EXCHANGE) == 0) {
        zt_ckpt_remove_tree(tmpdir);
    } else {
        char aside[4400];
        snprintf(aside, sizeof aside, "%s/.checkpoint-%ld.del-%ld", output_dir, step, (long)getpid());
        if (rename(final, aside) != 0 || rename(tmpdir, final) != 0)
            rc = zt_fail(err, ZT_EINPUT, "%s: cannot replace it with %s: %s", final, tmpdir, strerror(errno));
        else
            zt_ckpt_remove_tree(aside);
    }
    fsync_dir(output_dir);
    return rc;
}
