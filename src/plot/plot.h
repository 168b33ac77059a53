/* plot.h - `towertrain plot`: a log directory's scalars as an SVG a person
 * reads at a glance, written by hand (no plotting dependency).
 *
 * One panel per quantity: train_X and validation_X share panel X with a
 * legend; every other scalar has its own. A scalar recorded every few steps
 * in the event files is drawn per step, smoothed as TensorBoard smooths
 * (exponential moving average of weight 0.6, debiased) with the raw series
 * faint behind; the others are drawn per epoch from stats.json. x is in
 * epochs; y has ticks at 1-2-5 steps whose labels fit inside the picture, and
 * a constant series is drawn at its value in the middle of a range around it.
 */
#ifndef TT_PLOT_H
#define TT_PLOT_H

#include "util/err.h"

/* Reads LOGDIR/stats.json (required) and LOGDIR/events.out.tfevents.* (when
 * present) and writes the SVG to svg_path atomically. */
int plot_logdir_svg(const char *logdir, const char *svg_path, tt_err *err);

#endif
