/* plot.c — `ztrain plot LOG.jsonl --output FILE.svg|FILE.png`: the training log as a chart. */
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "../report/plot.h"
#include "commands.h"
#include "flags.h"

int zt_cmd_plot(int argc, char **argv, zt_err *err)
{
    const char *output = NULL;
    zt_flag flags[] = {
        {"output", ZT_FLAG_STR, &output, "the chart to write: FILE.svg or FILE.png", 1, 0, 0},
    };
    if (zt_flags_wants_help(argc, argv)) {
        zt_flags_usage(flags, 1, "usage: ztrain plot LOG.jsonl --output FILE.svg|FILE.png\n"
                       "Draws loss (train and eval), learning rate, gradient norm, tokens/s and the lost-update\n"
                       "fraction per step from a `train --log_jsonl` file, as SVG, or as PNG (the same chart,\n"
                       "960 x 800 pixels).");
        return ZT_OK;
    }
    if (argc < 1 || !strncmp(argv[0], "--", 2))
        return zt_fail(err, ZT_EINPUT, "ztrain plot: expected the log first: ztrain plot LOG.jsonl --output FILE.svg");
    const char *log = argv[0];
    int rc = zt_flags_parse(flags, 1, argc - 1, argv + 1, "ztrain plot", err);
    if (rc)
        return rc;
    if (!output)
        return zt_fail(err, ZT_EINPUT, "ztrain plot: --output FILE.svg (or FILE.png) is required");
    const char *dot = strrchr(output, '.');
    int png = dot && !strcasecmp(dot, ".png");
    if (!png && (!dot || strcasecmp(dot, ".svg")))
        return zt_fail(err, ZT_EINPUT, "--output %s: expected a .svg or .png file", output);
    if ((rc = zt_plot_log(log, output, png ? ZT_PLOT_PNG : ZT_PLOT_SVG, err)))
        return rc;
    printf("wrote %s\n", output);
    return ZT_OK;
}
