/* table.h — text kept as tables, the way `datasets` users keep it: Parquet files
 * (.parquet) and the Arrow files `datasets.Dataset.save_to_disk` writes (a
 * directory holding data-NNNNN-of-MMMMM.arrow, dataset_info.json and state.json,
 * or one of its .arrow files).  Each row is one record: its text in one string
 * column (--text_field), or TRL's "prompt" and "completion" columns.
 *
 * Read through Apache Arrow's own C++ libraries (arrow_shim.cc), which the build
 * links only when it finds them (make: ZT_HAVE_ARROW).  Without them every reader
 * here is ZT_EINPUT naming the file and what is missing. */
#ifndef ZT_TABLE_H
#define ZT_TABLE_H

#include <stddef.h>

#include "../core/sha256.h"
#include "../core/status.h"

/* 1 if path names a table: a .parquet or .arrow file, or a directory. */
int zt_table_is_table(const char *path);

/* 1 if this build can read tables (it was linked with Arrow's libraries). */
int zt_table_supported(void);

/* Call fn(ctx, vals, lens) for each row of the table with the string values of
 * its n columns cols, in file order (a directory: its data files in state.json's
 * order).  ZT_EINPUT naming the file and the column for a missing or non-string
 * column, a null value or an unreadable file. */
typedef int (*zt_table_row_fn)(void *ctx, const char *const *vals, const size_t *lens, zt_err *err);
int zt_table_each_row(const char *path, const char *const *cols, int n, zt_table_row_fn fn, void *ctx, zt_err *err);

/* The same with each value as JSON text (a string quoted, a list of structs an
 * array of objects): TRL's conversational columns, lists of {role, content}. */
int zt_table_each_row_json(const char *path, const char *const *cols, int n, zt_table_row_fn fn, void *ctx,
                           zt_err *err);

/* *yes = 1 when the table (its first data file) has every column of cols. */
int zt_table_has_columns(const char *path, const char *const *cols, int n, int *yes, zt_err *err);

/* Feed the bytes of the table's data files, in order, to h (a cache key). */
int zt_table_hash(const char *path, zt_sha256 *h, zt_err *err);

#endif
