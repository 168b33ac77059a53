/* plot.c - one panel per scalar: a polyline of its value at every epoch, with
 * the value range and epochs labelled. The SVG is built in memory and written
 * atomically. */
#include "plot/plot.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cJSON.h>

#include "util/fileio.h"

#define PANEL_W 360
#define PANEL_H 220
#define MARGIN 46
#define COLUMNS 3

typedef struct {
    char *text;
    size_t len, cap;
    int failed;
} sbuf;

static void sb_printf(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(sbuf *b, const char *fmt, ...)
{
    va_list ap;
    for (;;) {
        va_start(ap, fmt);
        int n = vsnprintf(b->text ? b->text + b->len : NULL, b->text ? b->cap - b->len : 0, fmt,
                          ap);
        va_end(ap);
        if (n < 0) {
            b->failed = 1;
            return;
        }
        if (b->text != NULL && b->len + (size_t)n < b->cap) {
            b->len += (size_t)n;
            return;
        }
        size_t cap = (b->cap + (size_t)n + 1) * 2;
        char *t = realloc(b->text, cap);
        if (t == NULL) {
            b->failed = 1;
            return;
        }
        b->text = t;
        b->cap = cap;
    }
}

/* Escapes the few characters XML needs escaped in a scalar name. */
static void sb_escaped(sbuf *b, const char *s)
{
    for (; *s; s++) {
        if (*s == '<')
            sb_printf(b, "&lt;");
        else if (*s == '>')
            sb_printf(b, "&gt;");
        else if (*s == '&')
            sb_printf(b, "&amp;");
        else if (*s == '"')
            sb_printf(b, "&quot;");
        else
            sb_printf(b, "%c", *s);
    }
}

static void plot_panel(sbuf *b, const cJSON *stats, const char *name, int index)
{
    int x0 = (index % COLUMNS) * PANEL_W, y0 = (index / COLUMNS) * PANEL_H;
    double lo = INFINITY, hi = -INFINITY, e_lo = INFINITY, e_hi = -INFINITY;
    for (const cJSON *e = stats->child; e; e = e->next) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(e, name);
        const cJSON *ep = cJSON_GetObjectItemCaseSensitive(e, "epoch_num");
        if (!cJSON_IsNumber(v) || !cJSON_IsNumber(ep))
            continue;
        lo = fmin(lo, v->valuedouble);
        hi = fmax(hi, v->valuedouble);
        e_lo = fmin(e_lo, ep->valuedouble);
        e_hi = fmax(e_hi, ep->valuedouble);
    }
    if (hi == lo) {
        hi += 0.5;
        lo -= 0.5;
    }
    if (e_hi == e_lo)
        e_hi = e_lo + 1;
    int pw = PANEL_W - MARGIN - 14, ph = PANEL_H - MARGIN - 24;
    int px = x0 + MARGIN, py = y0 + 24;
    sb_printf(b, "<g class=\"panel\" data-scalar=\"");
    sb_escaped(b, name);
    sb_printf(b, "\">\n<text class=\"title\" x=\"%d\" y=\"%d\" font-size=\"14\">", px, y0 + 16);
    sb_escaped(b, name);
    sb_printf(b, "</text>\n<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"none\" "
              "stroke=\"#999\"/>\n", px, py, pw, ph);
    sb_printf(b, "<text x=\"%d\" y=\"%d\" font-size=\"10\" text-anchor=\"end\">%.4g</text>\n",
              px - 4, py + 10, hi);
    sb_printf(b, "<text x=\"%d\" y=\"%d\" font-size=\"10\" text-anchor=\"end\">%.4g</text>\n",
              px - 4, py + ph, lo);
    sb_printf(b, "<text x=\"%d\" y=\"%d\" font-size=\"10\">epoch %.0f</text>\n", px,
              py + ph + 14, e_lo);
    sb_printf(b, "<text x=\"%d\" y=\"%d\" font-size=\"10\" text-anchor=\"end\">%.0f</text>\n",
              px + pw, py + ph + 14, e_hi);
    sb_printf(b, "<polyline fill=\"none\" stroke=\"#1f77b4\" stroke-width=\"2\" points=\"");
    for (const cJSON *e = stats->child; e; e = e->next) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(e, name);
        const cJSON *ep = cJSON_GetObjectItemCaseSensitive(e, "epoch_num");
        if (!cJSON_IsNumber(v) || !cJSON_IsNumber(ep))
            continue;
        double x = px + (ep->valuedouble - e_lo) / (e_hi - e_lo) * pw;
        double y = py + ph - (v->valuedouble - lo) / (hi - lo) * ph;
        sb_printf(b, "%.1f,%.1f ", x, y);
    }
    sb_printf(b, "\"/>\n</g>\n");
}

int plot_stats_svg(const char *stats_path, const char *svg_path, tt_err *err)
{
    char *text = NULL;
    size_t len = 0;
    if (file_read_all(stats_path, &text, &len, err) != 0)
        return -1;
    cJSON *stats = cJSON_ParseWithLength(text, len);
    free(text);
    if (!cJSON_IsArray(stats) || cJSON_GetArraySize(stats) == 0) {
        cJSON_Delete(stats);
        return err_set(err, TT_ERR_USAGE, "%s: expected a non-empty JSON array of epochs",
                       stats_path);
    }
    /* scalar names in first-seen order, without the counters */
    const char *names[256];
    int n = 0;
    for (const cJSON *e = stats->child; e; e = e->next)
        for (const cJSON *f = e->child; f; f = f->next) {
            if (!cJSON_IsNumber(f) || strcmp(f->string, "epoch_num") == 0 ||
                strcmp(f->string, "global_step") == 0)
                continue;
            int seen = 0;
            for (int i = 0; i < n && !seen; i++)
                seen = strcmp(names[i], f->string) == 0;
            if (!seen && n < 256)
                names[n++] = f->string;
        }
    int rows = (n + COLUMNS - 1) / COLUMNS;
    sbuf b = {0};
    sb_printf(&b, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<svg "
              "xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
              "font-family=\"sans-serif\">\n<rect width=\"100%%\" height=\"100%%\" "
              "fill=\"white\"/>\n", COLUMNS * PANEL_W, (rows > 0 ? rows : 1) * PANEL_H);
    for (int i = 0; i < n; i++)
        plot_panel(&b, stats, names[i], i);
    sb_printf(&b, "</svg>\n");
    cJSON_Delete(stats);
    int rc = b.failed ? err_set(err, TT_ERR_RUNTIME, "out of memory")
                      : file_write_atomic(svg_path, b.text, b.len, err);
    free(b.text);
    return rc;
}
