/* input.h — opening a file the user named, so that it can never block.
 *
 * open(O_RDONLY) on a FIFO waits until a writer appears, and a read from a
 * terminal or a socket waits for data: a FIFO given as config.json would hang the
 * job forever.  zt_open_input opens with O_NONBLOCK (which makes open itself
 * return at once for a FIFO), checks the type with fstat before anything is read,
 * and refuses everything but a regular file, naming its kind.  Every reader of
 * user input (config.json, the shard index, safetensors, tokens, the Accelerate
 * YAML, the DeepSpeed JSON) opens through it. */
#ifndef ZT_INPUT_H
#define ZT_INPUT_H

#include <stddef.h>
#include <sys/stat.h>

#include "status.h"

/* On success *fd is a blocking descriptor of a regular file and *st its fstat.
 * `what` names the role in the message ("the Accelerate config"; NULL: none).
 * Path errors (missing, loop, permission, not a directory, ...) and special files
 * are ZT_EINPUT; the machine's failures (no descriptors, I/O error) ZT_EFAIL. */
int zt_open_input(const char *path, const char *what, int *fd, struct stat *st, zt_err *err);

/* Read exactly n bytes of fd (a file of path, opened by zt_open_input) into buf,
 * retrying on EINTR: a read error or a file that shrank under it is ZT_EFAIL
 * naming path and how far it got. */
int zt_read_full(int fd, const char *path, void *buf, size_t n, zt_err *err);

/* The exit code an open-time errno means: the path the user gave is wrong
 * (ZT_EINPUT) or the machine failed (ZT_EFAIL). */
int zt_errno_code(int e);

/* "FIFO", "character device", ... for a non-regular st_mode. */
const char *zt_file_kind(mode_t mode);

#endif
