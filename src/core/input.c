/* input.c — see input.h. */
#include "input.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

int zt_errno_code(int e)
{
    switch (e) {
    case ENOENT: case ENOTDIR: case EACCES: case EPERM: case EISDIR: case EROFS:
    case ENAMETOOLONG: case ELOOP: case EEXIST: case ENXIO: case ENODEV: case EOVERFLOW:
    case EFBIG: case ETXTBSY: case EWOULDBLOCK:
        return ZT_EINPUT;
    default: /* EMFILE, ENFILE, ENOMEM, EIO, EINTR...: the machine, not the path */
        return ZT_EFAIL;
    }
}

const char *zt_file_kind(mode_t mode)
{
    return S_ISDIR(mode)    ? "directory"
           : S_ISFIFO(mode) ? "FIFO"
           : S_ISCHR(mode)  ? "character device"
           : S_ISBLK(mode)  ? "block device"
           : S_ISSOCK(mode) ? "socket"
           : S_ISLNK(mode)  ? "symbolic link"
                            : "special file";
}

int zt_open_input(const char *path, const char *what, int *fd, struct stat *st, zt_err *err)
{
    const char *sep = what ? " " : "", *role = what ? what : "";
    *fd = -1;
    /* O_NOCTTY: a terminal named as input must not become our controlling one */
    int f = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (f < 0) {
        int e = errno;
        return zt_fail(err, zt_errno_code(e), "%s: cannot open%s%s: %s", path, sep, role, strerror(e));
    }
    if (fstat(f, st) != 0) {
        int e = errno;
        close(f);
        return zt_fail(err, ZT_EFAIL, "%s: cannot stat: %s", path, strerror(e));
    }
    if (!S_ISREG(st->st_mode)) {
        close(f);
        return zt_fail(err, ZT_EINPUT, "%s: %s is a %s, not a regular file (refused: reading it could "
                       "block or never end)", path, what ? what : "the input", zt_file_kind(st->st_mode));
    }
    /* a regular file never blocks; clear the flag so reads behave as usual */
    int fl = fcntl(f, F_GETFL);
    if (fl >= 0)
        (void)fcntl(f, F_SETFL, fl & ~O_NONBLOCK);
    *fd = f;
    return ZT_OK;
}

int zt_read_full(int fd, const char *path, void *buf, size_t n, zt_err *err)
{
    size_t got = 0;
    while (got < n) {
        ssize_t r = read(fd, (char *)buf + got, n - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return zt_fail(err, ZT_EFAIL, "%s: read failed after %zu of %zu bytes: %s", path, got, n,
                           r < 0 ? strerror(errno) : "file shrank");
        got += (size_t)r;
    }
    return ZT_OK;
}
