/* test_table_noarrow.c — Parquet and Arrow data as a build without Apache Arrow's
 * libraries has it (make NO_ARROW=1, or a machine without the pyarrow wheel):
 * src/io/table.c compiled here a second time without ZT_HAVE_ARROW (this file's
 * flags never define it; the Makefile adds it to table.o alone), its entries
 * renamed so they cannot clash with the library's copy.  Reading a table is
 * refused with ZT_EINPUT naming the file and what is missing (libarrow,
 * libparquet, scripts/setup.sh); telling a table by its name, and hashing its
 * bytes, still work. */
#ifdef ZT_HAVE_ARROW
#error "test_table_noarrow.c must be built without ZT_HAVE_ARROW"
#endif
#define zt_table_is_table noarrow_is_table
#define zt_table_supported noarrow_supported
#define zt_table_each_row noarrow_each_row
#define zt_table_has_columns noarrow_has_columns
#define zt_table_hash noarrow_hash
#include "../src/io/table.c"

#include "test.h"
#include "tmpdir.h"

static int never(void *ctx, const char *const *vals, const size_t *lens, zt_err *err)
{
    (void)vals, (void)lens, (void)err;
    ++*(int *)ctx;
    return ZT_OK;
}

static void test_tables_refused_by_name(void)
{
    char dir[64], pq[128], arrow[128];
    ZT_CHECK(tmpdir_make(dir, sizeof dir, "zt_noarrow_") != NULL);
    tmpdir_join(pq, sizeof pq, dir, "train.parquet");
    tmpdir_join(arrow, sizeof arrow, dir, "data-00000-of-00001.arrow");
    write_bytes(pq, "PAR1 not really PAR1", 20);
    write_bytes(arrow, "stream", 6);
    ZT_CHECK(!noarrow_supported());
    ZT_CHECK(noarrow_is_table(pq) && noarrow_is_table(arrow) && noarrow_is_table(dir));
    const char *col = "text";
    const char *paths[] = {pq, arrow};
    for (int i = 0; i < 2; i++) {
        zt_err err = {0};
        int rows = 0, yes = 1;
        ZT_CHECK(noarrow_each_row(paths[i], &col, 1, never, &rows, &err) == ZT_EINPUT);
        ZT_CHECK_MSG(strstr(err.msg, paths[i]) && strstr(err.msg, "libarrow") && strstr(err.msg, "libparquet") &&
                         strstr(err.msg, "scripts/setup.sh"),
                     "the refusal names the file and what is missing: %s", err.msg);
        ZT_CHECK(rows == 0);
        zt_err err2 = {0};
        ZT_CHECK(noarrow_has_columns(paths[i], &col, 1, &yes, &err2) == ZT_EINPUT && yes == 0);
        ZT_CHECK_MSG(strstr(err2.msg, paths[i]) && strstr(err2.msg, "libarrow"), "has_columns: %s", err2.msg);
    }
    /* the cache key needs no Arrow: the file's length and bytes */
    zt_sha256 a, b;
    zt_err err = {0};
    zt_sha256_init(&a);
    zt_sha256_init(&b);
    ZT_CHECK_MSG(noarrow_hash(pq, &a, &err) == ZT_OK, "hash: %s", err.msg);
    uint64_t len = 20;
    zt_sha256_update(&b, &len, sizeof len);
    zt_sha256_update(&b, "PAR1 not really PAR1", 20);
    uint8_t da[32], db[32];
    zt_sha256_final(&a, da);
    zt_sha256_final(&b, db);
    ZT_CHECK(memcmp(da, db, 32) == 0);
    tmpdir_remove(dir);
}

int main(void)
{
    ZT_RUN(test_tables_refused_by_name);
    ZT_TEST_MAIN_END();
}
