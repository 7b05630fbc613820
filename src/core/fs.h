/* fs.h — writing files and directories: the one atomic writer behind every
 * file ztrain writes, and mkdir -p. */
#ifndef ZT_FS_H
#define ZT_FS_H

#include <stddef.h>

#include "status.h"

/* Write the concatenation of n byte ranges to path atomically: a temporary
 * "path.ztmp-XXXXXXXXXXXX" (zt_create_temp), fsync, rename over path; on any
 * failure the temporary file is removed and an existing path is left untouched.
 * The one implementation behind every file ztrain writes. */
typedef struct zt_wpart {
    const void *data;
    size_t bytes;
} zt_wpart;
int zt_write_atomic(const char *path, const zt_wpart *parts, int n, zt_err *err);
/* The same, with part i asked of get just before it is written, so a writer can
 * stream parts it makes one at a time (a producer may reuse one buffer). */
typedef int (*zt_part_fn)(void *ctx, int i, zt_wpart *part, zt_err *err);
int zt_write_atomic_fn(const char *path, int n, zt_part_fn get, void *ctx, zt_err *err);
/* Create "path.ztmp-" + 12 random characters with O_CREAT|O_EXCL|O_NOFOLLOW
 * (mode 0644), its name in tmp[cap]: the descriptor, or -1 with errno set. */
int zt_create_temp(const char *path, char *tmp, size_t cap);

/* An existing path that is a FIFO, a device, a socket or a directory is refused
 * as an output (ZT_EINPUT naming its kind), as zt_open_input refuses it as an
 * input: writing to one could block, never end, or land somewhere else.  A
 * missing path, a regular file, or a symlink to either (which zt_write_atomic
 * replaces) is fine.  zt_write_atomic checks it before creating anything. */
int zt_check_output_path(const char *path, const char *what, zt_err *err);

/* A log written record by record (the training JSONL): opened without ever
 * blocking (O_NONBLOCK: a FIFO with no reader fails at once instead of waiting
 * in open for good, where no stop request reaches it), refused unless it is a
 * regular file (zt_check_output_path, then fstat on the descriptor), and then
 * truncated.  *fd is a blocking descriptor. */
int zt_open_output(const char *path, const char *what, int *fd, zt_err *err);
/* Append one whole record of n bytes.  On a failed or short write (a full disk,
 * a file size limit, an I/O error) the partial record is cut off again, so the
 * file ends with its last whole record, and the error names the file: ZT_EFAIL. */
int zt_write_record(int fd, const char *path, const void *data, size_t n, zt_err *err);

/* Several files that must change together (a model directory's shards, its
 * index and its config): each is written whole under a hidden staging name
 * "DIR/.NAME.zstage-TOKEN" (TOKEN: 12 random characters drawn once per set),
 * and only when every one of them is on disk are they renamed into place, in
 * the order they were staged.  A failure while writing (a full disk, a file
 * size limit) therefore touches none of the files already there: the caller
 * aborts and the staged files are removed.  What a reader sees during the
 * renames themselves is the caller's concern (order them so that the file a
 * reader opens first, the index, goes last). */
typedef struct zt_fileset {
    char dir[4096];
    char token[13];
    int n, cap;
    char **names; /* final names inside dir, in commit order */
} zt_fileset;
void zt_fileset_begin(zt_fileset *s, const char *dir);
/* Record NAME (a plain file name inside the set's directory) and put its
 * staging path into buf for the caller to write with zt_write_atomic* : ZT_OK,
 * or the refusal of zt_check_output_path for DIR/NAME (a FIFO, a directory...). */
int zt_fileset_stage(zt_fileset *s, const char *name, char *buf, size_t cap, zt_err *err);
/* Rename every staged file into place (staging order), fsync the directory,
 * and free the set.  A rename that fails stops there, naming both paths; the
 * files not renamed are removed. */
int zt_fileset_commit(zt_fileset *s, zt_err *err);
/* Remove every staged file and free the set (after a failure); err's message
 * (if err is not NULL) then names each file by its final name, not its staging one. */
void zt_fileset_abort(zt_fileset *s, zt_err *err);

/* mkdir -p: create dir and its missing parents; an existing directory is fine,
 * an existing non-directory is ZT_EINPUT naming it. */
int zt_mkdirs(const char *dir, zt_err *err);
/* Copy the regular file src to dst (zt_write_atomic), read whole into accounted
 * memory: a src over max bytes is ZT_EINPUT naming it as `what`; src opened as
 * zt_open_input opens it. */
int zt_copy_file(const char *src, const char *dst, unsigned long long max, const char *what, zt_err *err);
/* Are a and b the same file or directory?  (Both must exist; 0 when either does not.) */
int zt_same_file(const char *a, const char *b);

#endif
