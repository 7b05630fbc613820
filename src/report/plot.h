/* plot.h — a training log (the JSONL of `train --log_jsonl`) drawn as an SVG
 * chart: loss (train and eval), learning rate, gradient norm, tokens/s per device
 * and the fraction of updates lost to rounding, each against the step.
 *
 * The SVG is written directly (text, no library): five panels with axes, ticks and
 * polylines; eval losses are points on the loss panel.  A PNG is that SVG
 * rasterised by librsvg onto a cairo image surface and encoded by cairo (Debian's
 * librsvg2 and cairo), at the SVG's size, one pixel per user unit.  Both are
 * optional at build time: a build without them (the Makefile asks pkg-config;
 * NO_PNG=1 forces it) refuses a PNG with ZT_EINPUT naming them, and still
 * writes SVG.
 *
 * Records: a line with "eval_loss" is an evaluation (needs "step"); a line with
 * "loss" is a training step (needs "step"; lr, grad_norm, tokens_per_sec_per_device
 * and lost_update_fraction are drawn when present, a negative grad_norm meaning a
 * non-finite one is left out); other objects are ignored, so later record kinds do
 * not break old plotters.  Blank lines are skipped. */
#ifndef ZT_PLOT_H
#define ZT_PLOT_H

#include "../core/status.h"

typedef enum zt_plot_format { ZT_PLOT_SVG, ZT_PLOT_PNG } zt_plot_format;

/* Read log_path and write the chart to out_path in `format` (atomically: an
 * existing file is replaced only by a complete chart).  ZT_EINPUT naming the file
 * and line for a line that is not a JSON object, a record missing "step" or
 * holding a non-number, or a log without training steps. */
int zt_plot_log(const char *log_path, const char *out_path, zt_plot_format format, zt_err *err);

#endif
