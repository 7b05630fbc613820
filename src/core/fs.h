/* fs.h — writing files and directories: the one atomic writer behind every
 * file ztrain writes, and mkdir -p. */
#ifndef ZT_FS_H
#define ZT_FS_H

#include <stddef.h>

#include "status.h"

/* Write the concatenation of n byte ranges to path atomically: "path.tmp.<pid>",
 * fsync, rename over path; on any failure the tmp file is removed and an existing
 * path is left untouched.  The one implementation behind every file ztrain writes. */
typedef struct zt_wpart {
    const void *data;
    size_t bytes;
} zt_wpart;
int zt_write_atomic(const char *path, const zt_wpart *parts, int n, zt_err *err);

/* mkdir -p: create dir and its missing parents; an existing directory is fine,
 * an existing non-directory is ZT_EINPUT naming it. */
int zt_mkdirs(const char *dir, zt_err *err);

#endif
