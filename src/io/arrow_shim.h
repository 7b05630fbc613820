/* arrow_shim.h — the plain C door to Apache Arrow's C++ libraries (arrow_shim.cc,
 * built only when make finds them: ZT_HAVE_ARROW).  table.h is the interface the
 * rest of ztrain uses; this header is io's own. */
#ifndef ZT_ARROW_SHIM_H
#define ZT_ARROW_SHIM_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "../core/status.h" /* C linkage for zt_fail from the C++ side too */

typedef int (*zt_arrow_row_fn)(void *ctx, const char *const *vals, const size_t *lens, zt_err *err);

/* Read one data file (Parquet when parquet is 1, else an Arrow IPC stream or
 * file), a record batch (a Parquet row group's batch) at a time, and call
 * fn(ctx, vals, lens) for each row with the string values of the n columns
 * cols, in file order.  shown: the name used in messages.  ZT_EINPUT naming
 * shown and the column for a missing or non-string column or a null value, and
 * shown for a file Arrow cannot read; fn's own code otherwise.  json: the
 * values are each cell as JSON text instead (a string quoted, a list of
 * structs as an array of objects), for columns of nested values. */
int zt_arrow_read(const char *path, const char *shown, int parquet, const char *const *cols, int n, int json,
                  zt_arrow_row_fn fn, void *ctx, zt_err *err);

/* *yes = 1 when the data file's schema has every column of cols[0..n). */
int zt_arrow_has_columns(const char *path, const char *shown, int parquet, const char *const *cols, int n,
                         int *yes, zt_err *err);

#ifdef __cplusplus
}
#endif

#endif
