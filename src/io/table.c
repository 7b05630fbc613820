/* table.c — Parquet and save_to_disk Arrow tables (see table.h): which data files
 * a path names, and the calls into the Arrow shim, or the refusal of a build
 * without it. */
#include "table.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../core/input.h"
#include "../core/json.h"
#include "../core/mem.h"
#ifdef ZT_HAVE_ARROW
#include "arrow_shim.h"
#endif

enum { PATH_CAP = 4096 };

/* The data files a table path names: the file itself, or a save_to_disk
 * directory's data files in the order its state.json lists them (the order
 * `datasets` reads them in). */
typedef struct table_files {
    int n, parquet;
    char *paths; /* n * PATH_CAP */
} table_files;

static int has_ext(const char *path, const char *ext)
{
    const char *dot = strrchr(path, '.');
    return dot && !strcasecmp(dot, ext);
}

static int is_dir(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

/* A directory is a save_to_disk Dataset unless its name says it is another kind of
 * data file (dir.npy, dir.txt, ...): that one goes to its own reader, which refuses a
 * directory naming the kind it expected ("the token file is a directory"). */
static int named_as_other_data(const char *path)
{
    static const char *const other[] = {".npy", ".bin", ".txt", ".jsonl", ".json"};
    for (size_t i = 0; i < sizeof other / sizeof *other; i++)
        if (has_ext(path, other[i]))
            return 1;
    return 0;
}

int zt_table_is_table(const char *path)
{
    return has_ext(path, ".parquet") || has_ext(path, ".arrow") || (is_dir(path) && !named_as_other_data(path));
}

int zt_table_supported(void)
{
#ifdef ZT_HAVE_ARROW
    return 1;
#else
    return 0;
#endif
}

static void files_free(table_files *f)
{
    zt_free(ZT_MEM_OTHER, f->paths, (size_t)f->n * PATH_CAP);
    memset(f, 0, sizeof *f);
}

static int files_alloc(table_files *f, int n, const char *path, zt_err *err)
{
    f->n = n;
    if (!(f->paths = zt_alloc(ZT_MEM_OTHER, (size_t)n * PATH_CAP)))
        return zt_fail(err, ZT_EFAIL, "%s: out of memory for %d data files", path, n);
    return ZT_OK;
}

/* path, with every symlink resolved, stays inside dir (also resolved): a
 * data-*.arrow or state.json that is a link out of a save_to_disk directory is
 * refused, as a "../" in a file name is, so the directory is what is read. */
static int inside(const char *dir, const char *path, zt_err *err)
{
    char d[PATH_MAX], p[PATH_MAX];
    if (!realpath(dir, d) || !realpath(path, p)) /* a missing file: the open names it */
        return errno == ENOENT ? ZT_OK : zt_fail(err, ZT_EINPUT, "%s: cannot resolve it: %s", path, strerror(errno));
    if (strncmp(p, d, strlen(d)) != 0 || p[strlen(d)] != '/')
        return zt_fail(err, ZT_EINPUT, "%s: a symlink out of the save_to_disk directory %s (to %s): refused; a "
                       "dataset directory is read only from its own files", path, dir, p);
    return ZT_OK;
}

/* state.json's "_data_files": [{"filename": "data-00000-of-00001.arrow"}, ...] */
static int dir_files(const char *dir, table_files *f, zt_err *err)
{
    char state[PATH_CAP], dict[PATH_CAP];
    if (snprintf(state, sizeof state, "%s/state.json", dir) >= (int)sizeof state ||
        snprintf(dict, sizeof dict, "%s/dataset_dict.json", dir) >= (int)sizeof dict)
        return zt_fail(err, ZT_EINPUT, "%s: path too long", dir);
    if (access(state, F_OK) != 0) {
        if (access(dict, F_OK) == 0)
            return zt_fail(err, ZT_EINPUT, "%s: a DatasetDict (dataset_dict.json): give one split's directory, such "
                           "as %s/train", dir, dir);
        return zt_fail(err, ZT_EINPUT, "%s: a directory, but not one that datasets' save_to_disk wrote (no "
                       "state.json); data directories are read as a Dataset's data-*.arrow files", dir);
    }
    zt_json j;
    int rc = inside(dir, state, err);
    if (rc || (rc = zt_json_parse_file(state, 1 << 20, &j, err)))
        return rc;
    const cJSON *list = cJSON_GetObjectItemCaseSensitive(j.root, "_data_files");
    int n = cJSON_IsArray(list) ? cJSON_GetArraySize(list) : 0;
    if (n == 0)
        rc = zt_fail(err, ZT_EINPUT, "%s: \"_data_files\" is missing or empty (expected the data-*.arrow files)",
                     state);
    if (!rc)
        rc = files_alloc(f, n, dir, err);
    for (int i = 0; !rc && i < n; i++) {
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(list, i), "filename");
        const char *s = cJSON_IsString(name) ? name->valuestring : NULL;
        /* a name inside the directory, never a path out of it */
        if (!s || !*s || strchr(s, '/') || !strcmp(s, ".") || !strcmp(s, "..") || !has_ext(s, ".arrow"))
            rc = zt_fail(err, ZT_EINPUT, "%s: _data_files[%d].filename: expected the name of a .arrow file in %s",
                         state, i, dir);
        else if (snprintf(f->paths + (size_t)i * PATH_CAP, PATH_CAP, "%s/%s", dir, s) >= PATH_CAP)
            rc = zt_fail(err, ZT_EINPUT, "%s: path too long", dir);
        else
            rc = inside(dir, f->paths + (size_t)i * PATH_CAP, err);
    }
    zt_json_free(&j);
    if (rc)
        files_free(f);
    return rc;
}

static int table_files_of(const char *path, table_files *f, zt_err *err)
{
    memset(f, 0, sizeof *f);
    if (is_dir(path))
        return dir_files(path, f, err);
    int rc = files_alloc(f, 1, path, err);
    if (!rc && snprintf(f->paths, PATH_CAP, "%s", path) >= PATH_CAP)
        rc = zt_fail(err, ZT_EINPUT, "%s: path too long", path);
    f->parquet = has_ext(path, ".parquet");
    if (rc)
        files_free(f);
    return rc;
}

#ifdef ZT_HAVE_ARROW
/* A data file must be a regular file before Arrow opens it: a FIFO would block
 * its open forever (core/input.h). */
static int check_regular(const char *path, zt_err *err)
{
    int fd;
    struct stat st;
    int rc = zt_open_input(path, "data", &fd, &st, err);
    if (!rc)
        close(fd);
    return rc;
}
#else
static int refuse(const char *path, zt_err *err)
{
    return zt_fail(err, ZT_EINPUT, "%s: reading Parquet and Arrow data needs Apache Arrow's C++ libraries (libarrow "
                   "and libparquet, from the pyarrow wheel that scripts/setup.sh installs), and this build of ztrain "
                   "was made without them: run scripts/setup.sh, then make", path);
}
#endif

static int each_row(const char *path, const char *const *cols, int n, int json, zt_table_row_fn fn, void *ctx,
                    zt_err *err)
{
#ifndef ZT_HAVE_ARROW
    (void)cols, (void)n, (void)json, (void)fn, (void)ctx;
    return refuse(path, err);
#else
    table_files f;
    int rc = table_files_of(path, &f, err);
    for (int i = 0; !rc && i < f.n; i++) {
        const char *file = f.paths + (size_t)i * PATH_CAP;
        if (!(rc = check_regular(file, err)))
            rc = zt_arrow_read(file, file, f.parquet, cols, n, json, fn, ctx, err);
    }
    if (f.paths)
        files_free(&f);
    return rc;
#endif
}

int zt_table_each_row(const char *path, const char *const *cols, int n, zt_table_row_fn fn, void *ctx, zt_err *err)
{
    return each_row(path, cols, n, 0, fn, ctx, err);
}

int zt_table_each_row_json(const char *path, const char *const *cols, int n, zt_table_row_fn fn, void *ctx,
                           zt_err *err)
{
    return each_row(path, cols, n, 1, fn, ctx, err);
}

int zt_table_has_columns(const char *path, const char *const *cols, int n, int *yes, zt_err *err)
{
    *yes = 0;
#ifndef ZT_HAVE_ARROW
    (void)cols, (void)n;
    return refuse(path, err);
#else
    table_files f;
    int rc = table_files_of(path, &f, err);
    if (!rc && !(rc = check_regular(f.paths, err)))
        rc = zt_arrow_has_columns(f.paths, f.paths, f.parquet, cols, n, yes, err);
    if (f.paths)
        files_free(&f);
    return rc;
#endif
}

/* Each file's length, then its bytes: no two lists of files feed the same
 * stream. */
int zt_table_hash(const char *path, zt_sha256 *h, zt_err *err)
{
    table_files f;
    int rc = table_files_of(path, &f, err);
    enum { CHUNK = 1 << 20 };
    char *buf = rc ? NULL : zt_alloc(ZT_MEM_OTHER, CHUNK);
    if (!rc && !buf)
        rc = zt_fail(err, ZT_EFAIL, "out of memory");
    for (int i = 0; !rc && i < f.n; i++) {
        const char *file = f.paths + (size_t)i * PATH_CAP;
        int fd;
        struct stat st;
        if ((rc = zt_open_input(file, "data", &fd, &st, err)))
            break;
        uint64_t len = (uint64_t)st.st_size;
        zt_sha256_update(h, &len, sizeof len);
        for (;;) {
            ssize_t got = read(fd, buf, CHUNK);
            if (got < 0 && errno == EINTR)
                continue;
            if (got < 0)
                rc = zt_fail(err, ZT_EFAIL, "%s: read failed: %s", file, strerror(errno));
            if (got <= 0)
                break;
            zt_sha256_update(h, buf, (size_t)got);
        }
        close(fd);
    }
    zt_free(ZT_MEM_OTHER, buf, buf ? CHUNK : 0);
    if (f.paths)
        files_free(&f);
    return rc;
}
