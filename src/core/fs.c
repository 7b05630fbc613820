/* fs.c — files and directories ztrain writes (see fs.h). */
#include "fs.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "input.h"
#include "mem.h"

static int write_all(int fd, const void *data, size_t bytes)
{
    const char *p = data;
    while (bytes) {
        /* Linux moves at most ~2 GiB per write(); ask for 1 GiB at a time. */
        size_t chunk = bytes < ((size_t)1 << 30) ? bytes : ((size_t)1 << 30);
        ssize_t w = write(fd, p, chunk);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        p += w;
        bytes -= (size_t)w;
    }
    return 0;
}

/* "path.ztmp-" + 12 random letters and digits: unpredictable, so nobody can
 * plant a symlink under the name beforehand, and opened O_CREAT|O_EXCL|O_NOFOLLOW,
 * so a name that exists anyway (a symlink included) is never followed or reused. */
int zt_create_temp(const char *path, char *tmp, size_t cap)
{
    static const char alphabet[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    for (int attempt = 0; attempt < 100; attempt++) {
        unsigned char rnd[12];
        if (getrandom(rnd, sizeof rnd, 0) != (ssize_t)sizeof rnd)
            return -1;
        char suffix[13];
        for (int i = 0; i < 12; i++)
            suffix[i] = alphabet[rnd[i] % (sizeof alphabet - 1)];
        suffix[12] = 0;
        if (snprintf(tmp, cap, "%s.ztmp-%s", path, suffix) >= (int)cap) {
            errno = ENAMETOOLONG;
            return -1;
        }
        int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
        if (fd >= 0 || errno != EEXIST)
            return fd;
    }
    errno = EEXIST;
    return -1;
}

static int part_of_array(void *ctx, int i, zt_wpart *part, zt_err *err)
{
    (void)err;
    *part = ((const zt_wpart *)ctx)[i];
    return ZT_OK;
}

int zt_write_atomic(const char *path, const zt_wpart *parts, int n, zt_err *err)
{
    if (n < 0 || (n > 0 && !parts))
        return zt_fail(err, ZT_EFAIL, "%s: write: bad part list", path ? path : "");
    return zt_write_atomic_fn(path, n, part_of_array, (void *)parts, err);
}

int zt_check_output_path(const char *path, const char *what, zt_err *err)
{
    struct stat st;
    /* stat follows a symlink: a link to /dev/full is refused like /dev/full */
    if (stat(path, &st) != 0 || S_ISREG(st.st_mode))
        return ZT_OK; /* missing (or unreadable: the open or create names why) */
    return zt_fail(err, ZT_EINPUT, "%s: %s is a %s, not a regular file (refused: writing to it could block, never "
                   "end, or go somewhere else)", path, what ? what : "the output", zt_file_kind(st.st_mode));
}

int zt_open_output(const char *path, const char *what, int *fd, zt_err *err)
{
    *fd = -1;
    int rc = zt_check_output_path(path, what, err);
    if (rc)
        return rc;
    int f = open(path, O_WRONLY | O_CREAT | O_NONBLOCK | O_NOCTTY | O_CLOEXEC, 0644);
    if (f < 0) {
        int e = errno; /* ENXIO: a FIFO (made since the check) with no reader */
        return zt_fail(err, zt_errno_code(e), "%s: cannot open %s for writing: %s", path, what ? what : "the output",
                       strerror(e));
    }
    struct stat st = {0};
    if (fstat(f, &st) != 0 || !S_ISREG(st.st_mode)) {
        int e = errno;
        close(f);
        return !st.st_mode /* fstat failed */
                   ? zt_fail(err, ZT_EFAIL, "%s: cannot stat: %s", path, strerror(e))
                   : zt_fail(err, ZT_EINPUT, "%s: %s is a %s, not a regular file", path, what ? what : "the output",
                             zt_file_kind(st.st_mode));
    }
    int fl = fcntl(f, F_GETFL);
    if (ftruncate(f, 0) != 0 || fl < 0 || fcntl(f, F_SETFL, fl & ~O_NONBLOCK) != 0) {
        int e = errno;
        close(f);
        return zt_fail(err, zt_errno_code(e), "%s: cannot truncate %s: %s", path, what ? what : "the output",
                       strerror(e));
    }
    *fd = f;
    return ZT_OK;
}

int zt_write_record(int fd, const char *path, const void *data, size_t n, zt_err *err)
{
    off_t before = lseek(fd, 0, SEEK_CUR);
    if (write_all(fd, data, n) == 0)
        return ZT_OK;
    int e = errno;
    /* a short write left part of the record: cut it, so every line stays whole */
    if (before >= 0)
        (void)ftruncate(fd, before);
    return zt_fail(err, ZT_EFAIL, "%s: writing a record: %s (the file ends with the last whole record)", path,
                   strerror(e));
}

int zt_write_atomic_fn(const char *path, int n, zt_part_fn get, void *ctx, zt_err *err)
{
    if (!path || !*path)
        return zt_fail(err, ZT_EINPUT, "write: empty output path");
    if (n < 0 || !get)
        return zt_fail(err, ZT_EFAIL, "%s: write: bad part list", path);
    int rc0 = zt_check_output_path(path, NULL, err);
    if (rc0)
        return rc0;
    size_t tmp_bytes = strlen(path) + 32;
    char *tmp = zt_alloc(ZT_MEM_OTHER, tmp_bytes);
    if (!tmp)
        return zt_fail(err, ZT_EFAIL, "%s: out of memory", path);

    int rc = ZT_OK;
    int fd = zt_create_temp(path, tmp, tmp_bytes);
    if (fd < 0) {
        int e = errno;
        rc = zt_fail(err, zt_errno_code(e), "%s: cannot create %s: %s", path, tmp, strerror(e));
        zt_free(ZT_MEM_OTHER, tmp, tmp_bytes);
        return rc;
    }
    for (int i = 0; i < n && rc == ZT_OK; i++) {
        zt_wpart part = {NULL, 0};
        if ((rc = get(ctx, i, &part, err)))
            break;
        if (part.bytes && write_all(fd, part.data, part.bytes) != 0)
            rc = zt_fail(err, ZT_EFAIL, "%s: writing %s: %s", path, tmp, strerror(errno));
    }
    /* fsync before rename: otherwise a crash can leave the new name pointing at
     * a file whose data never reached the disk. */
    if (rc == ZT_OK && fsync(fd) != 0)
        rc = zt_fail(err, ZT_EFAIL, "%s: fsync %s: %s", path, tmp, strerror(errno));
    if (close(fd) != 0 && rc == ZT_OK)
        rc = zt_fail(err, ZT_EFAIL, "%s: closing %s: %s", path, tmp, strerror(errno));
    if (rc == ZT_OK && rename(tmp, path) != 0) {
        int e = errno;
        rc = zt_fail(err, zt_errno_code(e), "%s: cannot rename %s over it: %s", path, tmp,
                     strerror(e));
    }
    if (rc != ZT_OK) {
        unlink(tmp);
    } else {
        /* Make the rename itself durable.  Best effort: some filesystems refuse
         * fsync on directories, and the file is complete either way. */
        char *slash = strrchr(tmp, '/');
        const char *dir = ".";
        if (slash) {
            *slash = 0;
            dir = slash == tmp ? "/" : tmp;
        }
        int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dfd >= 0) {
            (void)fsync(dfd);
            close(dfd);
        }
    }
    zt_free(ZT_MEM_OTHER, tmp, tmp_bytes);
    return rc;
}

static void staged_path(const zt_fileset *s, const char *name, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s/.%s.zstage-%s", s->dir, name, s->token);
}

void zt_fileset_begin(zt_fileset *s, const char *dir)
{
    static const char alphabet[] = "abcdefghijklmnopqrstuvwxyz0123456789";
    memset(s, 0, sizeof *s);
    snprintf(s->dir, sizeof s->dir, "%s", dir);
    unsigned char rnd[12] = {0};
    if (getrandom(rnd, sizeof rnd, 0) != (ssize_t)sizeof rnd) /* a weaker token still differs per process */
        for (size_t i = 0; i < sizeof rnd; i++)
            rnd[i] = (unsigned char)((unsigned)getpid() >> (i % 4 * 8) ^ i * 37u);
    for (size_t i = 0; i < sizeof rnd; i++)
        s->token[i] = alphabet[rnd[i] % (sizeof alphabet - 1)];
    s->token[12] = 0;
}

int zt_fileset_stage(zt_fileset *s, const char *name, char *buf, size_t cap, zt_err *err)
{
    char final[4400];
    if (strchr(name, '/') || snprintf(final, sizeof final, "%s/%s", s->dir, name) >= (int)sizeof final ||
        strlen(s->dir) + strlen(name) + 32 > cap)
        return zt_fail(err, ZT_EINPUT, "%s/%s: path too long or not a file name", s->dir, name);
    int rc = zt_check_output_path(final, NULL, err);
    if (rc)
        return rc;
    if (s->n == s->cap) {
        int cap2 = s->cap ? 2 * s->cap : 8;
        char **grown = zt_alloc(ZT_MEM_OTHER, (size_t)cap2 * sizeof *grown);
        if (!grown)
            return zt_fail(err, ZT_EFAIL, "%s: out of memory", final);
        if (s->n)
            memcpy(grown, s->names, (size_t)s->n * sizeof *grown);
        zt_free(ZT_MEM_OTHER, s->names, (size_t)s->cap * sizeof *s->names);
        s->names = grown;
        s->cap = cap2;
    }
    size_t len = strlen(name) + 1;
    if (!(s->names[s->n] = zt_alloc(ZT_MEM_OTHER, len)))
        return zt_fail(err, ZT_EFAIL, "%s: out of memory", final);
    memcpy(s->names[s->n++], name, len);
    staged_path(s, name, buf, cap);
    return ZT_OK;
}

/* Unlink the staged files from index `from` on, and free the set. */
static void fileset_end(zt_fileset *s, int from)
{
    char path[4400];
    for (int i = 0; i < s->n; i++) {
        if (i >= from) {
            staged_path(s, s->names[i], path, sizeof path);
            unlink(path);
        }
        zt_free(ZT_MEM_OTHER, s->names[i], strlen(s->names[i]) + 1);
    }
    zt_free(ZT_MEM_OTHER, s->names, (size_t)s->cap * sizeof *s->names);
    s->names = NULL;
    s->n = s->cap = 0;
}

int zt_fileset_commit(zt_fileset *s, zt_err *err)
{
    char from[4400], to[4400];
    int i = 0, rc = ZT_OK;
    for (; i < s->n; i++) {
        staged_path(s, s->names[i], from, sizeof from);
        snprintf(to, sizeof to, "%s/%s", s->dir, s->names[i]);
        if (rename(from, to) != 0) {
            int e = errno;
            rc = zt_fail(err, zt_errno_code(e), "%s: cannot rename %s over it: %s", to, from, strerror(e));
            break;
        }
    }
    int dfd = open(s->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC); /* the renames made durable, best effort */
    if (dfd >= 0) {
        (void)fsync(dfd);
        close(dfd);
    }
    fileset_end(s, i);
    return rc;
}

void zt_fileset_abort(zt_fileset *s, zt_err *err)
{
    /* the message speaks of the file the user knows: "DIR/.NAME.zstage-TOKEN"
     * becomes "DIR/NAME" wherever it appears */
    char staged[4400];
    for (int i = 0; err && i < s->n; i++) {
        staged_path(s, s->names[i], staged, sizeof staged);
        const char *base = strrchr(staged, '/') + 1; /* ".NAME.zstage-TOKEN" */
        char *at;
        while ((at = strstr(err->msg, base))) {
            size_t tail = strlen(at + strlen(base)) + 1;
            memmove(at, at + 1, strlen(s->names[i])); /* drop the leading dot */
            memmove(at + strlen(s->names[i]), at + strlen(base), tail);
        }
    }
    fileset_end(s, 0);
}

int zt_mkdirs(const char *dir, zt_err *err)
{
    char path[4096];
    if (snprintf(path, sizeof path, "%s", dir) >= (int)sizeof path)
        return zt_fail(err, ZT_EINPUT, "%s: path too long", dir);
    for (char *p = path + 1;; p++) {
        if (*p == '/' || *p == '\0') {
            char c = *p;
            *p = '\0';
            if (mkdir(path, 0777) != 0 && errno != EEXIST)
                return zt_fail(err, ZT_EINPUT, "%s: cannot create directory: %s", path,
                               strerror(errno));
            *p = c;
            if (c == '\0')
                break;
        }
    }
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
        return zt_fail(err, ZT_EINPUT, "%s: exists and is not a directory", dir);
    return ZT_OK;
}

int zt_copy_file(const char *src, const char *dst, unsigned long long max, const char *what, zt_err *err)
{
    int fd;
    struct stat sb;
    int rc = zt_open_input(src, NULL, &fd, &sb, err);
    if (rc)
        return rc;
    if ((unsigned long long)sb.st_size > max) {
        close(fd);
        return zt_fail(err, ZT_EINPUT, "%s: %lld bytes, more than the %llu-byte limit of %s", src,
                       (long long)sb.st_size, max, what);
    }
    size_t n = (size_t)sb.st_size;
    char *buf = n ? zt_alloc(ZT_MEM_OTHER, n) : NULL;
    if (n && !buf) {
        close(fd);
        return zt_fail(err, ZT_EFAIL, "out of memory copying %s", src);
    }
    rc = zt_read_full(fd, src, buf, n, err);
    close(fd);
    if (rc == ZT_OK) {
        zt_wpart part = {buf, n};
        rc = zt_write_atomic(dst, &part, 1, err);
    }
    zt_free(ZT_MEM_OTHER, buf, n);
    return rc;
}

int zt_same_file(const char *a, const char *b)
{
    struct stat sa, sb;
    return stat(a, &sa) == 0 && stat(b, &sb) == 0 && sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}
