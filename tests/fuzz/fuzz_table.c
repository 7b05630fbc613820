/* fuzz_table.c — Parquet and Arrow tables (io/table.h, through Arrow's own
 * readers) and a save_to_disk directory's state.json, on arbitrary bytes: the
 * first byte picks a .parquet file, an .arrow file, or state.json in a directory
 * beside a data-00000-of-00001.arrow of the remaining bytes.  Properties: a
 * refusal is exit 2 naming the file (or a path under the directory); every row
 * accepted holds valid UTF-8 in its "text" column (issue 44). */
#include "fuzz.h"

#include <sys/stat.h>

#include "../../src/core/text.h"
#include "../../src/io/table.h"

static int on_row(void *ctx, const char *const *vals, const size_t *lens, zt_err *err)
{
    (void)ctx, (void)err;
    FUZZ_REQUIRE(zt_utf8_invalid_at((const unsigned char *)vals[0], lens[0]) == lens[0],
                 "a row's text is not UTF-8");
    return ZT_OK;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    static const char *const col[1] = {"text"};
    const char *path;
    int mode = data[0] % 3;
    if (mode < 2) {
        path = fuzz_write(mode ? "t.arrow" : "t.parquet", data + 1, size - 1);
    } else { /* state.json: the bytes up to the first NUL; the data file: the rest */
        const uint8_t *nul = memchr(data + 1, 0, size - 1);
        size_t n = nul ? (size_t)(nul - data - 1) : size - 1;
        static char dir[512];
        snprintf(dir, sizeof dir, "%s/ds", fuzz_dir());
        mkdir(dir, 0755);
        fuzz_write("ds/state.json", data + 1, n);
        fuzz_write("ds/data-00000-of-00001.arrow", nul ? nul + 1 : data, nul ? size - 1 - n - 1 : 0);
        fuzz_write("ds/dataset_info.json", (const uint8_t *)"{}", 2);
        path = dir;
    }
    zt_err err = {0};
    int rc = zt_table_each_row(path, col, 1, on_row, NULL, &err);
    if (rc)
        fuzz_refusal(rc, &err, path);
    return 0;
}
