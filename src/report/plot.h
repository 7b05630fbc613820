/* plot.h — a training log (the JSONL of `train --log_jsonl`) drawn as an SVG
 * chart: loss (train and eval), learning rate, gradient norm, tokens/s per device
 * and the fraction of updates lost to rounding, each against the step.
 *
 * The SVG is written directly (text, no library): five panels with axes, ticks and
 * polylines; eval losses are points on the loss panel.  Only .svg is produced; PNG
 * would need a rasteriser, and ztrain links none (a browser or rsvg-convert turns
 * the SVG into a PNG).
 *
 * Records: a line with "eval_loss" is an evaluation (needs "step"); a line with
 * "loss" is a training step (needs "step"; lr, grad_norm, tokens_per_sec_per_device
 * and lost_update_fraction are drawn when present, a negative grad_norm meaning a
 * non-finite one is left out); other objects are ignored, so later record kinds do
 * not break old plotters.  Blank lines are skipped. */
#ifndef ZT_PLOT_H
#define ZT_PLOT_H

#include "../core/status.h"

/* Read log_path and write the chart to svg_path (atomically: an existing file is
 * replaced only by a complete chart).  ZT_EINPUT naming the file and line for a
 * line that is not a JSON object, a record missing "step" or holding a non-number,
 * or a log without training steps. */
int zt_plot_log(const char *log_path, const char *svg_path, zt_err *err);

#endif
