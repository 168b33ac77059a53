/* plot.c - a log directory's scalars as an SVG (plot.h).
 *
 * Sources: stats.json (one entry per epoch: epoch_num, global_step and every
 * scalar's value at the epoch's end) and the event files (TFRecords of Event
 * protos, monitors/events.c: scalars every few steps and at every epoch end).
 * Steps become epochs through stats.json's (global_step, epoch_num) pairs.
 * The SVG is built in memory and written atomically. Text widths are
 * estimated (CHAR_W of the font size per character, generous for digits and
 * lower-case sans-serif), and margins are made from them, so every label
 * stays inside the picture.
 */
#include "plot/plot.h"

#include <ctype.h>
#include <dirent.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cJSON.h>

#include "util/crc32c.h"
#include "util/fileio.h"
#include "util/strutil.h"

#define PANEL_W 440
#define PANEL_H 290
#define COLUMNS 2
#define CHAR_W 0.62      /* of the font size: an upper bound for digits and most letters */
#define SMOOTHING 0.6    /* TensorBoard's default */
#define MAX_SERIES 128
#define MAX_EVENT_FILES 64

/* ---- a growing text buffer ---- */

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

/* The length of the UTF-8 sequence at s that XML 1.0 admits as a character
 * (1 to 4), or 0: not well-formed (str_utf8_len), U+FFFE or U+FFFF. */
static int xml_char_len(const char *s)
{
    const unsigned char *u = (const unsigned char *)s;
    int n = str_utf8_len(s);
    if (n == 3 && u[0] == 0xef && u[1] == 0xbf && u[2] >= 0xbe) /* U+FFFE, U+FFFF */
        return 0;
    return n;
}

/* Escapes what XML needs escaped; control bytes and bytes that are not
 * UTF-8 (a corrupt file's names) become '?', so the SVG stays well-formed. */
static void sb_escaped(sbuf *b, const char *s)
{
    while (*s) {
        const unsigned char *u = (const unsigned char *)s;
        int n = xml_char_len(s);
        if (*s == '<')
            sb_printf(b, "&lt;");
        else if (*s == '>')
            sb_printf(b, "&gt;");
        else if (*s == '&')
            sb_printf(b, "&amp;");
        else if (*s == '"')
            sb_printf(b, "&quot;");
        else if (n == 0 || *u < 0x20)
            sb_printf(b, "?");
        else
            sb_printf(b, "%.*s", n, s);
        s += n > 0 ? n : 1;
    }
}

/* ---- series ---- */

typedef struct {
    double x, y;
} point;

typedef struct {
    char name[64];
    point *p;            /* stats.json: (epoch, value); events: (step, value) until mapped */
    int n, cap;
} points;

#define NAME_BYTES 64

typedef struct {
    char name[NAME_BYTES];
    points epoch;        /* from stats.json */
    points step;         /* from the event files */
    bool per_step;       /* drawn from `step` */
} series;

static int points_add(points *s, double x, double y)
{
    if (s->n == s->cap) {
        int cap = s->cap ? s->cap * 2 : 64;
        point *p = realloc(s->p, (size_t)cap * sizeof(point));
        if (p == NULL)
            return -1;
        s->p = p;
        s->cap = cap;
    }
    s->p[s->n++] = (point){x, y};
    return 0;
}

/* Where to cut s to at most n bytes: n, or before the UTF-8 sequence a cut
 * at n would split (back over at most 3 continuation bytes). */
static size_t utf8_cut(const char *s, size_t n)
{
    for (int k = 0; k < 3 && n > 0 && ((unsigned char)s[n] & 0xc0) == 0x80; k++)
        n--;
    return n;
}

/* A name of len bytes (ending at a NUL before that, if any) as a series
 * keeps it: cut to 63 bytes where longer, whole characters. */
static void name_copy(char out[NAME_BYTES], const char *name, size_t len)
{
    size_t n = strnlen(name, len);
    if (n >= NAME_BYTES)
        n = utf8_cut(name, NAME_BYTES - 1);
    memcpy(out, name, n);
    out[n] = '\0';
}

/* The series of a name (stats.json's key or an event's tag; the same name cut
 * the same way, so a long one is one series), made on first use; NULL when
 * there are MAX_SERIES. */
static series *series_get(series *all, int *n, const char *name, size_t len)
{
    char key[NAME_BYTES];
    name_copy(key, name, len);
    for (int i = 0; i < *n; i++)
        if (strcmp(all[i].name, key) == 0)
            return &all[i];
    if (*n == MAX_SERIES)
        return NULL;
    series *s = &all[(*n)++];
    memset(s, 0, sizeof(*s));
    memcpy(s->name, key, sizeof(key));
    return s;
}

/* ---- event files: TFRecords of Event protos ---- */

typedef struct {
    const uint8_t *p, *end;
} pb;

static bool pb_varint(pb *b, uint64_t *v)
{
    *v = 0;
    for (int shift = 0; shift < 64 && b->p < b->end; shift += 7) {
        uint8_t c = *b->p++;
        *v |= (uint64_t)(c & 0x7f) << shift;
        if (!(c & 0x80))
            return true;
    }
    return false;
}

/* Reads one field's key and, for length-delimited fields, its contents. */
static bool pb_field(pb *b, int *field, int *wire, pb *sub, uint64_t *num)
{
    uint64_t key;
    if (!pb_varint(b, &key))
        return false;
    *field = (int)(key >> 3);
    *wire = (int)(key & 7);
    switch (*wire) {
    case 0:
        return pb_varint(b, num);
    case 1:
        if (b->end - b->p < 8)
            return false;
        memcpy(num, b->p, 8);
        b->p += 8;
        return true;
    case 5:
        if (b->end - b->p < 4)
            return false;
        *num = 0;
        memcpy(num, b->p, 4);
        b->p += 4;
        return true;
    case 2: {
        uint64_t len;
        if (!pb_varint(b, &len) || len > (uint64_t)(b->end - b->p))
            return false;
        sub->p = b->p;
        sub->end = b->p + len;
        b->p += len;
        return true;
    }
    default:
        return false;
    }
}

/* Event { int64 step = 2; Summary summary = 5; } Summary { repeated Value value = 1; }
 * Value { string tag = 1; float simple_value = 2; } */
static void read_event(const uint8_t *data, size_t len, series *all, int *n_series)
{
    pb ev = {data, data + len}, summary = {NULL, NULL}, sub;
    int64_t step = 0;
    int field, wire;
    uint64_t num;
    while (ev.p < ev.end && pb_field(&ev, &field, &wire, &sub, &num)) {
        if (field == 2 && wire == 0)
            step = (int64_t)num;
        else if (field == 5 && wire == 2)
            summary = sub;
    }
    if (summary.p == NULL)
        return;
    while (summary.p < summary.end && pb_field(&summary, &field, &wire, &sub, &num)) {
        if (field != 1 || wire != 2)
            continue;
        pb value = sub;
        pb tag = {NULL, NULL};
        bool have = false;
        float v = 0;
        while (value.p < value.end && pb_field(&value, &field, &wire, &sub, &num)) {
            if (field == 1 && wire == 2) {
                tag = sub;
            } else if (field == 2 && wire == 5) {
                uint32_t bits = (uint32_t)num;
                memcpy(&v, &bits, 4);
                have = true;
            }
        }
        bool named = tag.p != NULL && tag.p < tag.end && tag.p[0] != '\0';
        series *s = named && have ? series_get(all, n_series, (const char *)tag.p,
                                               (size_t)(tag.end - tag.p))
                                  : NULL;
        if (s == NULL)
            continue;
        /* a resumed run re-writes steps from its checkpoint on: the later
         * file's values replace the earlier ones from that step */
        while (s->step.n > 0 && s->step.p[s->step.n - 1].x >= (double)step)
            s->step.n--;
        points_add(&s->step, (double)step, (double)v);
    }
}

static void read_event_file(const char *path, series *all, int *n_series)
{
    char *text = NULL;
    size_t len = 0;
    tt_err err = {0};
    if (file_read_all(path, &text, &len, &err) != 0)
        return; /* the plot still has stats.json */
    const uint8_t *b = (const uint8_t *)text;
    size_t off = 0;
    /* uint64 length, masked CRC of it, the bytes, masked CRC of them: 16
     * bytes and the length. A record cut short (a run that is still
     * writing, its length written and not all its bytes) ends the file. */
    while (len - off >= 16) {
        uint64_t n;
        uint32_t crc;
        memcpy(&n, b + off, 8);
        memcpy(&crc, b + off + 8, 4);
        if (crc32c_mask(crc32c_update(0, b + off, 8)) != crc || n > len - off - 16)
            break;
        memcpy(&crc, b + off + 12 + n, 4);
        if (crc32c_mask(crc32c_update(0, b + off + 12, n)) != crc)
            break;
        read_event(b + off + 12, n, all, n_series);
        off += 16 + n;
    }
    free(text);
}

/* Names with their digit runs compared as numbers: the events monitor names
 * a file events.out.tfevents.<seconds>.<host>, and .<host>.<k> when that
 * name is taken (k from 1), so ".10" comes after ".9". */
static int cmp_name(const void *a, const void *b)
{
    const char *x = *(char *const *)a, *y = *(char *const *)b;
    while (*x != '\0' && *y != '\0') {
        if (isdigit((unsigned char)*x) && isdigit((unsigned char)*y)) {
            while (*x == '0' && isdigit((unsigned char)x[1]))
                x++;
            while (*y == '0' && isdigit((unsigned char)y[1]))
                y++;
            size_t nx = 0, ny = 0;
            while (isdigit((unsigned char)x[nx]))
                nx++;
            while (isdigit((unsigned char)y[ny]))
                ny++;
            if (nx != ny)
                return nx < ny ? -1 : 1;
            int c = strncmp(x, y, nx);
            if (c != 0)
                return c;
            x += nx;
            y += ny;
        } else if (*x != *y) {
            return (unsigned char)*x < (unsigned char)*y ? -1 : 1;
        } else {
            x++;
            y++;
        }
    }
    return (unsigned char)*x - (unsigned char)*y;
}

static void read_events(const char *logdir, series *all, int *n_series)
{
    DIR *d = opendir(logdir);
    if (d == NULL)
        return;
    char *names[MAX_EVENT_FILES];
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL && n < MAX_EVENT_FILES)
        if (strncmp(e->d_name, "events.out.tfevents.", 20) == 0 &&
            (names[n] = strdup(e->d_name)) != NULL)
            n++;
    closedir(d);
    /* events.out.tfevents.<unix seconds>.<host>: in name order, in time order */
    qsort(names, (size_t)n, sizeof(char *), cmp_name);
    for (int i = 0; i < n; i++) {
        char path[4400];
        snprintf(path, sizeof(path), "%s/%s", logdir, names[i]);
        read_event_file(path, all, n_series);
        free(names[i]);
    }
}

/* ---- axes ---- */

typedef struct {
    double lo, hi, step;
    int decimals;
    double scale;        /* labels are value / scale ... */
    const char *suffix;  /* ... followed by this ("", "k", "M") */
} axis;

/* A step of 1, 2 or 5 times a power of ten giving about `target` intervals. */
static double nice_step(double range, int target)
{
    double raw = range / target;
    double mag = pow(10.0, floor(log10(raw)));
    double f = raw / mag;
    return (f <= 1.0 ? 1.0 : f <= 2.0 ? 2.0 : f <= 5.0 ? 5.0 : 10.0) * mag;
}

static axis make_axis(double lo, double hi, int target, bool integer)
{
    axis a = {.scale = 1.0, .suffix = ""};
    if (!isfinite(lo) || !isfinite(hi)) {
        lo = 0.0;
        hi = 1.0;
    }
    if (hi - lo <= 1e-9 * fmax(fabs(lo), fabs(hi))) {
        /* constant: its value in the middle of a range around it */
        double v = (lo + hi) / 2, half = v != 0.0 ? fabs(v) / 2 : 1.0;
        lo = v - half;
        hi = v + half;
    }
    a.step = nice_step(hi - lo, target);
    if (integer && a.step < 1.0)
        a.step = 1.0;
    a.lo = floor(lo / a.step + 1e-9) * a.step;
    a.hi = ceil(hi / a.step - 1e-9) * a.step;
    double big = fmax(fabs(a.lo), fabs(a.hi));
    if (big >= 1e7) {
        a.scale = 1e6;
        a.suffix = "M";
    } else if (big >= 1e4) {
        a.scale = 1e3;
        a.suffix = "k";
    }
    double s = a.step / a.scale;
    a.decimals = s >= 1.0 ? 0 : (int)ceil(-log10(s) - 1e-9);
    return a;
}

static void tick_label(const axis *a, double v, char *out, size_t n)
{
    if (fabs(v) < a->step * 1e-6)
        v = 0.0; /* never "-0" */
    snprintf(out, n, "%.*f%s", a->decimals, v / a->scale, a->suffix);
}

/* ---- drawing ---- */

typedef struct {
    const char *title;
    int members[2];
    int n_members;
    bool paired;        /* a train_X / validation_X panel */
} panel;

static const char *const colours[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd"};

static const point *shown(const series *s, int *n)
{
    *n = s->per_step ? s->step.n : s->epoch.n;
    return s->per_step ? s->step.p : s->epoch.p;
}

static double text_w(const char *s, double size)
{
    return (double)strlen(s) * size * CHAR_W;
}

static void polyline(sbuf *b, const char *cls, const char *name, const point *p, int n,
                     const double *ys, const axis *ax, const axis *ay, double left, double top,
                     double w, double h, const char *colour, const char *extra)
{
    sb_printf(b, "<polyline class=\"%s\" data-scalar=\"", cls);
    sb_escaped(b, name);
    sb_printf(b, "\" fill=\"none\" stroke=\"%s\" %s points=\"", colour, extra);
    for (int i = 0; i < n; i++) {
        double y = ys ? ys[i] : p[i].y;
        if (!isfinite(y))
            continue;
        sb_printf(b, "%.1f,%.1f ", left + (p[i].x - ax->lo) / (ax->hi - ax->lo) * w,
                  top + h - (y - ay->lo) / (ay->hi - ay->lo) * h);
    }
    sb_printf(b, "\"/>\n");
}

/* TensorBoard's smoothing: a debiased exponential moving average; constant
 * series and non-finite values are left as they are. */
static void smooth(const point *p, int n, double *out)
{
    bool constant = true;
    for (int i = 1; i < n; i++)
        constant &= p[i].y == p[0].y;
    double last = 0.0;
    int count = 0;
    for (int i = 0; i < n; i++) {
        if (constant || !isfinite(p[i].y)) {
            out[i] = p[i].y;
            continue;
        }
        last = last * SMOOTHING + (1.0 - SMOOTHING) * p[i].y;
        count++;
        out[i] = last / (1.0 - pow(SMOOTHING, count));
    }
}

/* A panel's plotting area and its axes. */
typedef struct {
    axis ax, ay;
    double left, top, w, h;
} frame;

/* The legend: a stroke of each series' colour and its name, cut to the
 * panel's width (before a UTF-8 sequence, at least as many bytes as
 * characters fit). */
static void draw_legend(sbuf *b, const panel *pn, const series *all, double x0, double y0)
{
    for (int m = 0; m < pn->n_members; m++) {
        const series *s = &all[pn->members[m]];
        double ly = y0 + 38 + 15 * m;
        char text[160];
        snprintf(text, sizeof(text), "%s%s", s->name,
                 s->per_step ? " (per step, smoothed 0.6; raw faint)" : " (per epoch)");
        size_t room = (size_t)((PANEL_W - 14 - 30 - 14) / (11 * CHAR_W));
        if (strlen(text) > room) {
            size_t cut = utf8_cut(text, room - 3);
            snprintf(text + cut, sizeof(text) - cut, "...");
        }
        sb_printf(b, "<g class=\"legend\"><line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" "
                  "stroke=\"%s\" stroke-width=\"2.5\"/><text x=\"%.1f\" y=\"%.1f\" "
                  "font-size=\"11\">", x0 + 14, ly - 4, x0 + 36, ly - 4, colours[m], x0 + 42, ly);
        sb_escaped(b, text);
        sb_printf(b, "</text></g>\n");
    }
}

/* The frame's box, its grid lines with their tick labels, and "epoch". */
static void draw_grid(sbuf *b, const frame *f)
{
    double right = f->left + f->w, bottom = f->top + f->h;
    char lab[64];
    sb_printf(b, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"none\" "
              "stroke=\"#888\"/>\n", f->left, f->top, f->w, f->h);
    for (double v = f->ay.lo; v <= f->ay.hi + f->ay.step / 2; v += f->ay.step) {
        double y = bottom - (v - f->ay.lo) / (f->ay.hi - f->ay.lo) * f->h;
        tick_label(&f->ay, v, lab, sizeof(lab));
        sb_printf(b, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#e4e4e4\"/>"
                  "<text class=\"ytick\" x=\"%.1f\" y=\"%.1f\" font-size=\"11\" "
                  "text-anchor=\"end\">%s</text>\n", f->left, y, right, y, f->left - 6, y + 4, lab);
    }
    for (double v = f->ax.lo; v <= f->ax.hi + f->ax.step / 2; v += f->ax.step) {
        double x = f->left + (v - f->ax.lo) / (f->ax.hi - f->ax.lo) * f->w;
        tick_label(&f->ax, v, lab, sizeof(lab));
        sb_printf(b, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#e4e4e4\"/>"
                  "<text class=\"xtick\" x=\"%.1f\" y=\"%.1f\" font-size=\"11\" "
                  "text-anchor=\"middle\">%s</text>\n", x, f->top, x, bottom, x, bottom + 15, lab);
    }
    sb_printf(b, "<text class=\"xlabel\" x=\"%.1f\" y=\"%.1f\" font-size=\"11\" "
              "text-anchor=\"middle\">epoch</text>\n", f->left + f->w / 2, bottom + 31);
}

/* One series in colour: per step raw faint and smoothed, per epoch a line
 * with dots. */
static void draw_series(sbuf *b, const series *s, const char *colour, const frame *f)
{
    int n;
    const point *p = shown(s, &n);
    if (s->per_step) {
        double *sm = malloc((size_t)(n ? n : 1) * sizeof(double));
        polyline(b, "raw", s->name, p, n, NULL, &f->ax, &f->ay, f->left, f->top, f->w, f->h,
                 colour, "stroke-width=\"1\" stroke-opacity=\"0.25\"");
        if (sm != NULL) {
            smooth(p, n, sm);
            polyline(b, "smoothed", s->name, p, n, sm, &f->ax, &f->ay, f->left, f->top, f->w,
                     f->h, colour, "stroke-width=\"2\"");
        }
        free(sm);
        return;
    }
    polyline(b, "epoch", s->name, p, n, NULL, &f->ax, &f->ay, f->left, f->top, f->w, f->h,
             colour, "stroke-width=\"2\"");
    for (int i = 0; i < n; i++)
        if (isfinite(p[i].y))
            sb_printf(b, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"%s\"/>\n",
                      f->left + (p[i].x - f->ax.lo) / (f->ax.hi - f->ax.lo) * f->w,
                      f->top + f->h - (p[i].y - f->ay.lo) / (f->ay.hi - f->ay.lo) * f->h, colour);
}

static void draw_panel(sbuf *b, const panel *pn, const series *all, int index, double x_lo,
                       double x_hi)
{
    double x0 = (index % COLUMNS) * PANEL_W, y0 = (index / COLUMNS) * PANEL_H;
    double lo = INFINITY, hi = -INFINITY;
    for (int m = 0; m < pn->n_members; m++) {
        int n;
        const point *p = shown(&all[pn->members[m]], &n);
        for (int i = 0; i < n; i++)
            if (isfinite(p[i].y)) {
                lo = fmin(lo, p[i].y);
                hi = fmax(hi, p[i].y);
            }
    }
    frame f = {.ay = make_axis(lo, hi, 5, false), .ax = make_axis(x_lo, x_hi, 8, true)};
    /* the widest y label sets the left margin */
    double label_w = 0;
    char lab[64];
    for (double v = f.ay.lo; v <= f.ay.hi + f.ay.step / 2; v += f.ay.step) {
        tick_label(&f.ay, v, lab, sizeof(lab));
        label_w = fmax(label_w, text_w(lab, 11));
    }
    f.left = x0 + 14 + label_w + 8;
    f.top = y0 + 34 + 15 * pn->n_members;
    f.w = x0 + PANEL_W - 18 - f.left;
    f.h = y0 + PANEL_H - 40 - f.top;

    sb_printf(b, "<g class=\"panel\" data-quantity=\"");
    sb_escaped(b, pn->title);
    sb_printf(b, "\">\n<text class=\"title\" x=\"%.1f\" y=\"%.1f\" font-size=\"14\" "
              "font-weight=\"bold\">", x0 + 14, y0 + 20);
    sb_escaped(b, pn->title);
    sb_printf(b, "</text>\n");
    draw_legend(b, pn, all, x0, y0);
    draw_grid(b, &f);
    for (int m = 0; m < pn->n_members; m++)
        draw_series(b, &all[pn->members[m]], colours[m], &f);
    sb_printf(b, "</g>\n");
}

/* train_X and validation_X are quantity X; any other name is its own. */
static const char *quantity(const char *name)
{
    if (strncmp(name, "train_", 6) == 0)
        return name + 6;
    if (strncmp(name, "validation_", 11) == 0)
        return name + 11;
    return name;
}

/* stats.json's epochs: every numeric key becomes an epoch series; the
 * first and last (epoch_num, global_step) pairs tie steps to epochs. */
typedef struct {
    int n_entries;
    double e_first, e_last, s_first, s_last;
} epoch_span;

/* Reads stats.json into all[*n_series]; 0, or -1 with err set. */
static int read_stats(const char *stats_path, series *all, int *n_series, epoch_span *sp,
                      tt_err *err)
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
    *sp = (epoch_span){0};
    for (const cJSON *e = stats->child; e; e = e->next) {
        const cJSON *ep = cJSON_GetObjectItemCaseSensitive(e, "epoch_num");
        const cJSON *gs = cJSON_GetObjectItemCaseSensitive(e, "global_step");
        if (!cJSON_IsNumber(ep) || !cJSON_IsNumber(gs))
            continue;
        if (sp->n_entries++ == 0) {
            sp->e_first = ep->valuedouble;
            sp->s_first = gs->valuedouble;
        }
        sp->e_last = ep->valuedouble;
        sp->s_last = gs->valuedouble;
        for (const cJSON *f = e->child; f; f = f->next) {
            if (!cJSON_IsNumber(f) || strcmp(f->string, "epoch_num") == 0 ||
                strcmp(f->string, "global_step") == 0)
                continue;
            series *s = series_get(all, n_series, f->string, strlen(f->string));
            if (s != NULL)
                points_add(&s->epoch, ep->valuedouble, f->valuedouble);
        }
    }
    cJSON_Delete(stats);
    if (sp->n_entries == 0)
        return err_set(err, TT_ERR_USAGE, "%s: no entry has epoch_num and global_step",
                       stats_path);
    return 0;
}

/* The event files' steps in epochs, and each series per step or per epoch
 * (per step where the events hold it more often than stats.json, or only
 * there); widens [*x_lo, *x_hi] to the steps drawn. */
static void steps_to_epochs(series *all, int n_series, const epoch_span *sp, double *x_lo,
                            double *x_hi)
{
    /* the steps per epoch of stats.json, counted from the end of the epoch
     * before its first entry */
    double spe = sp->e_last > sp->e_first
                     ? (sp->s_last - sp->s_first) / (sp->e_last - sp->e_first)
                     : (sp->e_first > 0 ? sp->s_first / sp->e_first : sp->s_first);
    if (!(spe > 0))
        spe = 1;
    for (int i = 0; i < n_series; i++) {
        series *s = &all[i];
        s->per_step = s->step.n > sp->n_entries;
        for (int k = 0; k < s->step.n; k++) {
            s->step.p[k].x = sp->e_first + (s->step.p[k].x - sp->s_first) / spe;
            if (s->per_step) {
                *x_lo = fmin(*x_lo, floor(s->step.p[k].x));
                *x_hi = fmax(*x_hi, ceil(s->step.p[k].x));
            }
        }
        if (!s->per_step && s->epoch.n == 0) /* only in the events, once an epoch */
            s->per_step = s->step.n > 0;
    }
}

/* The panels: train_X with validation_X (train first), every other series
 * alone, in order of first appearance. Returns their count. */
static int make_panels(const series *all, int n_series, panel *panels)
{
    int n_panels = 0;
    for (int i = 0; i < n_series; i++) {
        const char *q = quantity(all[i].name);
        bool prefixed = q != all[i].name;
        int p = n_panels;
        for (int k = 0; prefixed && k < n_panels; k++)
            if (panels[k].paired && panels[k].n_members == 1 &&
                strcmp(panels[k].title, q) == 0 &&
                strncmp(all[panels[k].members[0]].name, all[i].name, 6) != 0)
                p = k;
        if (p == n_panels)
            panels[n_panels++] = (panel){.title = q, .paired = prefixed};
        panels[p].members[panels[p].n_members++] = i;
    }
    for (int p = 0; p < n_panels; p++)
        if (panels[p].n_members == 2 &&
            strncmp(all[panels[p].members[0]].name, "validation_", 11) == 0) {
            int t = panels[p].members[0];
            panels[p].members[0] = panels[p].members[1];
            panels[p].members[1] = t;
        }
    return n_panels;
}

int plot_logdir_svg(const char *logdir, const char *svg_path, tt_err *err)
{
    char stats_path[4400];
    snprintf(stats_path, sizeof(stats_path), "%s/stats.json", logdir);
    series *all = calloc(MAX_SERIES, sizeof(series));
    if (all == NULL)
        return err_set(err, TT_ERR_RUNTIME, "out of memory");
    int n_series = 0, rc = -1;
    epoch_span sp = {0};
    sbuf b = {0};
    if (read_stats(stats_path, all, &n_series, &sp, err) == 0) {
        read_events(logdir, all, &n_series);
        double x_lo = sp.e_first - 1, x_hi = sp.e_last;
        steps_to_epochs(all, n_series, &sp, &x_lo, &x_hi);
        panel panels[MAX_SERIES];
        int n_panels = make_panels(all, n_series, panels);
        int rows = (n_panels + COLUMNS - 1) / COLUMNS;
        int width = COLUMNS * PANEL_W, height = (rows > 0 ? rows : 1) * PANEL_H;
        sb_printf(&b, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<svg "
                  "xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
                  "viewBox=\"0 0 %d %d\" font-family=\"DejaVu Sans, Arial, sans-serif\">\n"
                  "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n", width, height,
                  width, height);
        for (int p = 0; p < n_panels; p++)
            draw_panel(&b, &panels[p], all, p, x_lo, x_hi);
        sb_printf(&b, "</svg>\n");
        rc = b.failed ? err_set(err, TT_ERR_RUNTIME, "out of memory")
                      : file_write_atomic(svg_path, b.text, b.len, err);
    }
    for (int i = 0; i < n_series; i++) {
        free(all[i].epoch.p);
        free(all[i].step.p);
    }
    free(all);
    free(b.text);
    return rc;
}
