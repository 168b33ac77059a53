/* plot.h - `towertrain plot`: the scalars of stats.json over epochs as an SVG,
 * one panel per scalar, written by hand (no plotting dependency). */
#ifndef TT_PLOT_H
#define TT_PLOT_H

#include "util/err.h"

int plot_stats_svg(const char *stats_path, const char *svg_path, tt_err *err);

#endif
