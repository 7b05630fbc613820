/* test_plot_nopng.c — the plot as a build without librsvg and cairo has it (the
 * GPU machine's image): src/report/plot.c compiled here a second time without
 * ZT_HAVE_PNG (this file's flags never define it; the Makefile adds it to plot.o
 * alone), its entry renamed so it cannot clash with the library's copy.  A .png
 * output is refused with ZT_EINPUT naming librsvg and cairo and nothing is
 * written; SVG still works. */
#ifdef ZT_HAVE_PNG
#error "test_plot_nopng.c must be built without ZT_HAVE_PNG"
#endif
#define zt_plot_log nopng_plot_log
#include "../src/report/plot.c"
#undef zt_plot_log

#include <sys/stat.h>

#include "test.h"
#include "tmpdir.h"

static void test_png_refused_svg_written(void)
{
    char dir[64];
    ZT_CHECK(tmpdir_make(dir, sizeof dir, "zt_nopng_") != NULL);
    const char *log = "{\"step\": 1, \"loss\": 3.5, \"lr\": 0.001}\n{\"step\": 2, \"loss\": 3.1, \"lr\": 0.001}\n";
    char log_path[128], png[128], svg[128];
    tmpdir_join(log_path, sizeof log_path, dir, "log.jsonl");
    tmpdir_join(png, sizeof png, dir, "run.png");
    tmpdir_join(svg, sizeof svg, dir, "run.svg");
    write_bytes(log_path, log, strlen(log));

    zt_err err = {0};
    struct stat st;
    ZT_CHECK(nopng_plot_log(log_path, png, ZT_PLOT_PNG, &err) == ZT_EINPUT);
    ZT_CHECK_MSG(strstr(err.msg, "librsvg") && strstr(err.msg, "cairo") && strstr(err.msg, "run.png"),
                 "the refusal names the file and what is missing: %s", err.msg);
    ZT_CHECK_MSG(stat(png, &st) != 0, "a refused PNG left %s behind", png);

    zt_err err2 = {0};
    ZT_CHECK_MSG(nopng_plot_log(log_path, svg, ZT_PLOT_SVG, &err2) == ZT_OK, "SVG without PNG support: %s", err2.msg);
    ZT_CHECK(stat(svg, &st) == 0 && st.st_size > 100);
    tmpdir_remove(dir);
}

int main(void)
{
    ZT_RUN(test_png_refused_svg_written);
    ZT_TEST_MAIN_END();
}
