/* schema.c - the validation engine behind schema.h: walks a libconfig tree
 * against the key tables (schema_tables.c), reports the first problem with its
 * file, line and key path, and fills in defaults so the tree becomes the
 * resolved job. */
#include "config/schema.h"

#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/strutil.h"

#define PATH_LEN 256
/* Schedule points are epochs or global steps: exact as doubles. */
#define TT_SCHEDULE_MAX 9007199254740992.0
#define MAX_CANDIDATES 64

/* ---- messages ---- */

int schema_set_of(const config_setting_t *s)
{
    for (; s != NULL; s = config_setting_parent(s)) {
        intptr_t h = (intptr_t)config_setting_get_hook(s);
        if (h > 0)
            return (int)h;
    }
    return 0;
}

static int setting_line(const config_setting_t *s)
{
    for (; s != NULL; s = config_setting_parent(s)) {
        int line = (int)config_setting_source_line(s);
        if (line > 0)
            return line;
    }
    return 0;
}

int schema_error(vctx *c, const config_setting_t *s, const char *key, const char *fmt, ...)
{
    char msg[768], loc[600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);

    int set = s ? schema_set_of(s) : 0;
    if (set > 0 && set <= c->n_sets) {
        snprintf(loc, sizeof(loc), "--set %s", c->sets[set - 1]);
        /* The set's own node: its argument already names the key. */
        if ((intptr_t)config_setting_get_hook(s) == set)
            key = NULL;
    } else {
        const char *file = c->file;
        const char *src = s ? config_setting_source_file(s) : NULL;
        if (src != NULL && c->real_path != NULL && strcmp(src, c->real_path) != 0)
            file = src; /* an @include'd file */
        int line = s ? setting_line(s) : 0;
        if (line > 0)
            snprintf(loc, sizeof(loc), "%s:%d", file, line);
        else
            snprintf(loc, sizeof(loc), "%s", file);
    }
    if (key != NULL && key[0] != '\0')
        return err_set(c->err, TT_ERR_USAGE, "%s: %s: %s", loc, key, msg);
    return err_set(c->err, TT_ERR_USAGE, "%s: %s", loc, msg);
}

static const char *type_desc(int type)
{
    switch (type) {
    case CONFIG_TYPE_INT:
    case CONFIG_TYPE_INT64: return "an integer";
    case CONFIG_TYPE_FLOAT: return "a float";
    case CONFIG_TYPE_STRING: return "a string";
    case CONFIG_TYPE_BOOL: return "a boolean";
    case CONFIG_TYPE_GROUP: return "a group";
    case CONFIG_TYPE_ARRAY: return "an array";
    case CONFIG_TYPE_LIST: return "a list";
    default: return "nothing";
    }
}

static void join_key(char *out, const char *path, const char *name)
{
    if (path[0] == '\0')
        snprintf(out, PATH_LEN, "%s", name);
    else
        snprintf(out, PATH_LEN, "%s.%s", path, name);
}

static void join_index(char *out, const char *path, int i)
{
    snprintf(out, PATH_LEN, "%s[%d]", path, i);
}

/* "(did you mean 'x'?)" or "(expected a, b or c)" into out. */
static void suggest(char *out, size_t n, const char *word, const char *const *cand, int nc,
                    const char *prefix, bool list_all)
{
    const char *best = str_closest(word, cand, nc);
    if (best != NULL) {
        snprintf(out, n, " (did you mean '%s%s'?)", prefix, best);
        return;
    }
    out[0] = '\0';
    if (!list_all || nc == 0)
        return;
    size_t len = (size_t)snprintf(out, n, " (expected ");
    for (int i = 0; i < nc && len < n; i++) {
        const char *sep = i == 0 ? "" : (i == nc - 1 ? " or " : ", ");
        len += (size_t)snprintf(out + len, n - len, "%s%s", sep, cand[i]);
    }
    if (len < n)
        snprintf(out + len, n - len, ")");
}

/* " ('json' is a monitor: list it in monitors)" when a plug-in is in the wrong list. */
static void plugin_hint(char *out, size_t n, const group_spec *spec, const char *name)
{
    const group_spec *other = spec->sibling;
    if (other == NULL)
        return;
    for (const variant_spec *v = other->variants; v->name != NULL; v++)
        if (strcmp(v->name, name) == 0) {
            snprintf(out, n, " ('%s' is a %s: list it in %s)", name, other->what,
                     spec->sibling_list);
            return;
        }
}

/* ---- helpers on settings ---- */

double schema_number(const config_setting_t *s)
{
    switch (config_setting_type(s)) {
    case CONFIG_TYPE_INT: return config_setting_get_int(s);
    case CONFIG_TYPE_INT64: return (double)config_setting_get_int64(s);
    case CONFIG_TYPE_FLOAT: return config_setting_get_float(s);
    default: return 0;
    }
}

config_setting_t *schema_copy(config_setting_t *parent, const char *name,
                              const config_setting_t *src)
{
    int type = config_setting_type(src);
    config_setting_t *d = config_setting_add(parent, name, type);
    if (d == NULL)
        return NULL;
    switch (type) {
    case CONFIG_TYPE_INT: config_setting_set_int(d, config_setting_get_int(src)); break;
    case CONFIG_TYPE_INT64: config_setting_set_int64(d, config_setting_get_int64(src)); break;
    case CONFIG_TYPE_FLOAT: config_setting_set_float(d, config_setting_get_float(src)); break;
    case CONFIG_TYPE_BOOL: config_setting_set_bool(d, config_setting_get_bool(src)); break;
    case CONFIG_TYPE_STRING:
        config_setting_set_string(d, config_setting_get_string(src));
        break;
    default:
        for (int i = 0; i < config_setting_length(src); i++) {
            config_setting_t *e = config_setting_get_elem(src, (unsigned)i);
            const char *en = type == CONFIG_TYPE_GROUP ? config_setting_name(e) : NULL;
            if (schema_copy(d, en, e) == NULL)
                return NULL;
        }
    }
    config_setting_set_format(d, config_setting_get_format(src));
    return d;
}

static int read_text(config_t *cfg, const char *text, size_t len, const char *display,
                     tt_err *err);

config_setting_t *schema_add_value(config_setting_t *parent, const char *name,
                                   const char *value)
{
    size_t n = strlen(value) + 16;
    char *text = malloc(n);
    if (text == NULL)
        return NULL;
    snprintf(text, n, "v = %s;", value);
    config_t tmp;
    config_init(&tmp);
    config_setting_t *out = NULL;
    tt_err ignored = { 0 };
    if (read_text(&tmp, text, strlen(text), "--set", &ignored) == 0) {
        /* one value: "1; seed = 5" parses as two settings, the second
         * silently dropped if only v were taken */
        config_setting_t *v = config_setting_length(config_root_setting(&tmp)) == 1
                                  ? config_lookup(&tmp, "v")
                                  : NULL;
        if (v != NULL) {
            if (config_setting_get_member(parent, name) != NULL)
                config_setting_remove(parent, name);
            out = schema_copy(parent, name, v);
        }
    }
    config_destroy(&tmp);
    free(text);
    return out;
}

void schema_display_path(const char *abs, char *out, size_t n)
{
    char cwd[4096];
    size_t k;
    if (getcwd(cwd, sizeof(cwd)) != NULL && (k = strlen(cwd)) > 1 &&
        strncmp(abs, cwd, k) == 0 && abs[k] == '/')
        snprintf(out, n, "%s", abs + k + 1);
    else
        snprintf(out, n, "%s", abs);
}

/* ---- reading libconfig text ---- */

/* libconfig 1.5 reads an integer literal into an int whatever its size:
 * 2147483648 becomes -2147483648 and 4294967306 becomes 10, silently. So the
 * text is scanned first (comments, strings and names skipped as libconfig's
 * scanner does): an integer literal beyond 32 bits gets the L suffix that
 * makes libconfig read it as 64 bits, where the range checks see its true
 * value; one beyond 64 bits, which libconfig would clamp, is an error. So is
 * a NUL byte (libconfig would stop reading there) and @include, which would
 * read a file named relative to the current directory, outside these checks
 * (and /dev/stdin would hang). Returns the new text (malloc'd), or NULL with
 * *line and why set. */
/* The scan's position: text[i] of len, on line ln. */
typedef struct {
    const char *text;
    size_t len, i;
    int ln;
} scan_pos;

static const char *const nul_byte = "a NUL byte (not a text file)";

static bool is_digit(char c)
{
    return c >= '0' && c <= '9';
}

static bool is_name_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || is_digit(c) || c == '-' ||
           c == '_' || c == '*';
}

/* Past a comment or a string whose opening is at p->i (lines counted);
 * NULL, or why the text is refused. */
static const char *scan_skip_comment_or_string(scan_pos *p)
{
    const char *t = p->text;
    size_t len = p->len, i = p->i;
    if (t[i] == '#' || (t[i] == '/' && t[i + 1] == '/')) { /* to the end of the line */
        while (i < len && t[i] != '\n' && t[i] != '\0')
            i++;
    } else if (t[i] == '/') { /* a block comment */
        for (i += 2; i < len && !(t[i] == '*' && i + 1 < len && t[i + 1] == '/'); i++) {
            if (t[i] == '\0')
                return nul_byte;
            p->ln += t[i] == '\n';
        }
        i = i < len ? i + 2 : len;
    } else { /* a string */
        for (i++; i < len && t[i] != '"'; i++) {
            if (t[i] == '\0')
                return nul_byte;
            p->ln += t[i] == '\n';
            if (t[i] == '\\' && i + 1 < len && t[i + 1] != '\0')
                i++;
        }
        i = i < len ? i + 1 : len;
    }
    p->i = i;
    return NULL;
}

/* Past a number at p->i: integer, hex integer or float, as libconfig's
 * scanner reads it. *needs_l: an integer beyond 32 bits without its L.
 * NULL, or why (an integer beyond 64 bits). */
static const char *scan_number(scan_pos *p, bool *needs_l)
{
    const char *t = p->text;
    size_t len = p->len, i = p->i;
    bool neg = t[i] == '-', is_float = false, hex = false;
    if (t[i] == '-' || t[i] == '+')
        i++;
    size_t digits = i;
    if (t[i] == '0' && i + 1 < len && (t[i + 1] == 'x' || t[i + 1] == 'X')) {
        hex = true;
        digits = i += 2;
        while (i < len && (is_digit(t[i]) || ((t[i] | 0x20) >= 'a' && (t[i] | 0x20) <= 'f')))
            i++;
    } else {
        for (; i < len && (is_digit(t[i]) || t[i] == '.'); i++)
            is_float |= t[i] == '.';
        if (i < len && (t[i] == 'e' || t[i] == 'E')) {
            is_float = true;
            i++;
            if (i < len && (t[i] == '-' || t[i] == '+'))
                i++;
            while (i < len && is_digit(t[i]))
                i++;
        }
    }
    p->i = i;
    *needs_l = false;
    if (is_float || i == digits)
        return NULL;
    /* the magnitude, saturated above 2^64 */
    unsigned __int128 v = 0, cap = (unsigned __int128)1 << 64;
    for (size_t k = digits; k < i; k++) {
        int d = t[k] <= '9' ? t[k] - '0' : (t[k] | 0x20) - 'a' + 10;
        v = v * (hex ? 16 : 10) + (unsigned)d;
        if (v > cap)
            v = cap;
    }
    if (v > (neg ? (unsigned __int128)1 << 63 : ((unsigned __int128)1 << 63) - 1))
        return "an integer beyond 64 bits";
    *needs_l = v > (neg ? 2147483648u : 2147483647u) && !(i < len && t[i] == 'L');
    return NULL;
}

/* Past the token at p->i (the first character of a line when at_start);
 * *needs_l as scan_number. NULL, or why the text is refused. */
static const char *scan_token(scan_pos *p, bool at_start, bool *needs_l)
{
    const char *t = p->text;
    size_t len = p->len, i = p->i;
    char ch = t[i];
    *needs_l = false;
    if (ch == '@' && at_start)
        return "@include is not supported";
    if (ch == '#' || ch == '"' || (ch == '/' && i + 1 < len && (t[i + 1] == '/' || t[i + 1] == '*')))
        return scan_skip_comment_or_string(p);
    if ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || ch == '*') {
        while (p->i < len && is_name_char(t[p->i]))
            p->i++;
        return NULL;
    }
    if (is_digit(ch) || ((ch == '-' || ch == '+' || ch == '.') && i + 1 < len &&
                         (is_digit(t[i + 1]) || t[i + 1] == '.')))
        return scan_number(p, needs_l);
    p->i++;
    return NULL;
}

static char *scan_text(const char *text, size_t len, int *line, const char **why)
{
    char *out = malloc(len * 2 + 1); /* at most one L per two bytes */
    if (out == NULL) {
        *line = 0;
        *why = "out of memory";
        return NULL;
    }
    scan_pos p = {text, len, 0, 1};
    size_t o = 0;
    bool line_start = true;
    while (p.i < len) {
        char ch = text[p.i];
        const char *bad = ch == '\0' ? nul_byte : NULL;
        bool needs_l = false;
        size_t from = p.i;
        if (ch == '\n' || ch == ' ' || ch == '\t' || ch == '\r' || ch == '\f') {
            p.ln += ch == '\n';
            line_start = ch == '\n' || line_start;
            p.i++;
        } else if (bad == NULL) {
            bad = scan_token(&p, line_start, &needs_l);
            line_start = false;
        }
        if (bad != NULL) {
            *line = p.ln;
            *why = bad;
            free(out);
            return NULL;
        }
        memcpy(out + o, text + from, p.i - from);
        o += p.i - from;
        if (needs_l)
            out[o++] = 'L';
    }
    out[o] = '\0';
    return out;
}

/* Parses libconfig text after scan_text; errors name `display`. */
static int read_text(config_t *cfg, const char *text, size_t len, const char *display,
                     tt_err *err)
{
    int line = 0;
    const char *why = NULL;
    char *scanned = scan_text(text, len, &line, &why);
    if (scanned == NULL)
        return line > 0 ? err_set(err, TT_ERR_USAGE, "%s:%d: syntax error: %s", display, line, why)
                        : err_set(err, TT_ERR_RUNTIME, "%s: %s", display, why);
    int ok = config_read_string(cfg, scanned);
    free(scanned);
    if (ok)
        return 0;
    const char *msg = config_error_text(cfg);
    if (msg == NULL || strcmp(msg, "syntax error") == 0)
        return err_set(err, TT_ERR_USAGE, "%s:%d: syntax error", display, config_error_line(cfg));
    return err_set(err, TT_ERR_USAGE, "%s:%d: syntax error: %s", display, config_error_line(cfg),
                   msg);
}

/* Job and model files are small: a larger file is a mistake (a data file
 * named as a job), not something to read into memory. */
#define MAX_CONFIG_BYTES (16 << 20)

int schema_read_file(config_t *cfg, const char *path, const char *display, tt_err *err)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return err_set(err, TT_ERR_USAGE, "cannot read %s: %s", display, strerror(errno));
    struct stat st;
    int e = fstat(fileno(f), &st) != 0 ? errno : 0;
    if (e != 0 || !S_ISREG(st.st_mode)) {
        fclose(f);
        return err_set(err, TT_ERR_USAGE, "cannot read %s: %s", display,
                       e != 0                 ? strerror(e)
                       : S_ISDIR(st.st_mode) ? "Is a directory"
                                             : "not a regular file");
    }
    if (st.st_size > MAX_CONFIG_BYTES) {
        fclose(f);
        return err_set(err, TT_ERR_USAGE, "cannot read %s: %lld bytes, more than the %d of a "
                       "job or model file", display, (long long)st.st_size, MAX_CONFIG_BYTES);
    }
    char *text = malloc((size_t)st.st_size + 1);
    size_t len = text ? fread(text, 1, (size_t)st.st_size + 1, f) : 0;
    int bad = text == NULL ? ENOMEM : ferror(f) ? EIO : 0;
    fclose(f);
    if (bad != 0 || len > (size_t)st.st_size) {
        free(text);
        return err_set(err, TT_ERR_USAGE, "cannot read %s: %s", display,
                       bad ? strerror(bad) : "it grew while being read");
    }
    int rc = read_text(cfg, text, len, display, err);
    free(text);
    return rc;
}

int schema_resolve_path(vctx *c, config_setting_t *s, int elem, const char *key)
{
    const char *v = elem < 0 ? config_setting_get_string(s)
                             : config_setting_get_string_elem(s, elem);
    if (v == NULL || v[0] == '\0')
        return schema_error(c, s, key, "expected a file path (got an empty string)");
    /* A path given on the command line is relative to the current directory. */
    const char *base = schema_set_of(s) ? NULL : c->base;
    char abs[4096];
    if (path_resolve(base, v, abs, sizeof(abs)) != 0)
        return schema_error(c, s, key, "path too long");
    if (elem < 0)
        config_setting_set_string(s, abs);
    else
        config_setting_set_string_elem(s, elem, abs);
    return 0;
}

/* A path key whose file is not there is not refused here (a job may be
 * checked where its data is not: test tools, eval of its own data), but the
 * first one is kept, with its file, line and key, for the commands that read
 * the files (schema.h, vctx.missing). */
static void note_missing(vctx *c, config_setting_t *s, int elem, const char *key,
                         const key_spec *k)
{
    if (c->missing == NULL || c->missing[0] != '\0')
        return;
    const char *v = elem < 0 ? config_setting_get_string(s) : config_setting_get_string_elem(s, elem);
    struct stat st;
    if (v == NULL || stat(v, &st) == 0)
        return;
    int e = errno;
    tt_err note = {0};
    vctx where = *c;
    where.err = &note;
    if (e == ENOENT && k->missing_hint != NULL)
        schema_error(&where, s, key, "%s: no such file: %s", v, k->missing_hint);
    else
        schema_error(&where, s, key, "%s: %s", v, strerror(e));
    snprintf(c->missing, c->missing_len, "%s", note.msg);
}

/* ---- checking one value ---- */

/* A bound or a value for messages: integers exactly, other numbers in the
 * shortest form that reads back the same. */
static void number_text(double v, char *out, size_t n)
{
    if (v == floor(v) && fabs(v) < 1e17) {
        snprintf(out, n, "%.0f", v);
        return;
    }
    for (int p = 1; p <= 17; p++) {
        snprintf(out, n, "%.*g", p, v);
        if (strtod(out, NULL) == v)
            return;
    }
}

/* The bound v breaks ("<=" and the bound in *b), or NULL. */
static const char *bound_failed(bound_kind lo_kind, double lo, bound_kind hi_kind, double hi,
                                double v, double *b)
{
    const char *op = NULL;
    if (lo_kind == BOUND_INCL && !(v >= lo))
        op = ">=";
    else if (lo_kind == BOUND_EXCL && !(v > lo))
        op = ">";
    if (op != NULL) {
        *b = lo;
        return op;
    }
    if (hi_kind == BOUND_INCL && !(v <= hi))
        op = "<=";
    else if (hi_kind == BOUND_EXCL && !(v < hi))
        op = "<";
    *b = hi;
    return op;
}

/* Checks a number against the key's bounds and the bounds of the C type it
 * is stored in (KEY_INT: int; KEY_FLOAT: float), so that every later
 * conversion and computation is defined. Integers are compared exactly. */
static int check_range(vctx *c, const config_setting_t *s, const key_spec *k, const char *key,
                       key_kind kind)
{
    bound_kind lo_kind = k->lo_kind, hi_kind = k->hi_kind;
    double lo = k->lo, hi = k->hi;
    if (kind == KEY_INT) {
        if (lo_kind == BOUND_NONE || lo < INT32_MIN)
            lo_kind = BOUND_INCL, lo = INT32_MIN;
        if (hi_kind == BOUND_NONE || hi > INT32_MAX)
            hi_kind = BOUND_INCL, hi = INT32_MAX;
    } else if (kind == KEY_FLOAT) {
        if (lo_kind == BOUND_NONE)
            lo_kind = BOUND_INCL, lo = -FLT_MAX;
        if (hi_kind == BOUND_NONE)
            hi_kind = BOUND_INCL, hi = FLT_MAX;
    }
    char got[64], bound[64];
    bool integer = config_setting_type(s) != CONFIG_TYPE_FLOAT;
    long long iv = integer ? config_setting_get_int64(s) : 0;
    double v = integer ? (double)iv : config_setting_get_float(s);
    if (integer)
        snprintf(got, sizeof(got), "%lld", iv);
    else
        number_text(v, got, sizeof(got));
    /* compared as doubles: exact, since every bound is an integer below 2^53
     * or a float. A float key is checked as the float it is stored as too:
     * 1e-95 is 0 there, 0.99999999 is 1 (FLT_MAX bounds the cast, which is
     * undefined beyond); the message says so when only the float fails. */
    double b = 0;
    const char *op = bound_failed(lo_kind, lo, hi_kind, hi, v, &b);
    if (op == NULL && kind == KEY_FLOAT && fabs(v) <= FLT_MAX && (double)(float)v != v &&
        (op = bound_failed(lo_kind, lo, hi_kind, hi, (double)(float)v, &b)) != NULL) {
        size_t used = strlen(got);
        snprintf(got + used, sizeof(got) - used, ", stored as the float ");
        used = strlen(got);
        number_text((double)(float)v, got + used, sizeof(got) - used);
    }
    if (op == NULL)
        return 0;
    number_text(b, bound, sizeof(bound));
    return schema_error(c, s, key, "must be %s %s (got %s)", op, bound, got);
}

static int check_scalar(vctx *c, config_setting_t *s, const key_spec *k, const char *key,
                        key_kind kind)
{
    int t = config_setting_type(s);
    switch (kind) {
    case KEY_INT:
    case KEY_INT64:
        if (t != CONFIG_TYPE_INT && t != CONFIG_TYPE_INT64)
            return schema_error(c, s, key, "expected an integer (got %s)", type_desc(t));
        return check_range(c, s, k, key, kind);
    case KEY_FLOAT:
        if (t != CONFIG_TYPE_INT && t != CONFIG_TYPE_INT64 && t != CONFIG_TYPE_FLOAT)
            return schema_error(c, s, key, "expected a number (got %s)", type_desc(t));
        if (!isfinite(schema_number(s)))
            return schema_error(c, s, key, "must be finite");
        return check_range(c, s, k, key, kind);
    case KEY_BOOL:
        if (t != CONFIG_TYPE_BOOL)
            return schema_error(c, s, key, "expected true or false (got %s)", type_desc(t));
        return 0;
    case KEY_STRING:
    case KEY_PATH:
        if (t != CONFIG_TYPE_STRING)
            return schema_error(c, s, key, "expected a string (got %s)", type_desc(t));
        if (k->allowed != NULL) {
            const char *v = config_setting_get_string(s);
            int n = 0;
            while (k->allowed[n] != NULL)
                n++;
            for (int i = 0; i < n; i++)
                if (strcmp(v, k->allowed[i]) == 0)
                    return 0;
            char hint[512];
            suggest(hint, sizeof(hint), v, k->allowed, n, "", true);
            return schema_error(c, s, key, "unknown value '%s'%s", v, hint);
        }
        if (kind == KEY_PATH && schema_resolve_path(c, s, -1, key) != 0)
            return -1;
        if (kind == KEY_PATH)
            note_missing(c, s, -1, key, k);
        return 0;
    default:
        return 0;
    }
}

static int check_array(vctx *c, config_setting_t *s, const key_spec *k, const char *key)
{
    int t = config_setting_type(s);
    /* An empty list `( )` is as good as an empty array. */
    if (t != CONFIG_TYPE_ARRAY && !(t == CONFIG_TYPE_LIST && config_setting_length(s) == 0))
        return schema_error(c, s, key, "expected an array [ ... ] (got %s)", type_desc(t));
    int n = config_setting_length(s);
    if (n < k->min_len || (k->max_len > 0 && n > k->max_len)) {
        if (k->max_len == 0)
            return schema_error(c, s, key, "must have at least %d element%s (got %d)",
                                k->min_len, k->min_len == 1 ? "" : "s", n);
        if (k->min_len == k->max_len)
            return schema_error(c, s, key, "must have %d elements (got %d)", k->min_len, n);
        return schema_error(c, s, key, "must have %d to %d elements (got %d)", k->min_len,
                            k->max_len, n);
    }
    key_kind ek = k->kind == KEY_INT_ARRAY     ? KEY_INT
                  : k->kind == KEY_FLOAT_ARRAY ? KEY_FLOAT
                  : k->kind == KEY_PATH_ARRAY  ? KEY_PATH
                                               : KEY_STRING;
    for (int i = 0; i < n; i++) {
        config_setting_t *e = config_setting_get_elem(s, (unsigned)i);
        char ekey[PATH_LEN];
        join_index(ekey, key, i);
        if (ek == KEY_PATH) {
            if (config_setting_type(e) != CONFIG_TYPE_STRING)
                return schema_error(c, e, ekey, "expected a string (got %s)",
                                    type_desc(config_setting_type(e)));
            if (schema_resolve_path(c, s, i, ekey) != 0)
                return -1;
            note_missing(c, s, i, ekey, k);
        } else if (check_scalar(c, e, k, ekey, ek) != 0) {
            return -1;
        } else if (k->ascending && i > 0 &&
                   schema_number(e) < schema_number(config_setting_get_elem(s, (unsigned)i - 1))) {
            return schema_error(c, e, ekey, "must not be below the element before it (%g < %g)",
                                schema_number(e),
                                schema_number(config_setting_get_elem(s, (unsigned)i - 1)));
        }
    }
    return 0;
}

static int check_schedule(vctx *c, config_setting_t *s, const key_spec *k, const char *key)
{
    int t = config_setting_type(s);
    if (t != CONFIG_TYPE_LIST)
        return schema_error(c, s, key, "expected a list of (epoch, value) pairs (got %s)",
                            type_desc(t));
    int n = config_setting_length(s);
    if (n < 1)
        return schema_error(c, s, key, "must have at least one (epoch, value) pair");
    double prev = -1;
    for (int i = 0; i < n; i++) {
        config_setting_t *e = config_setting_get_elem(s, (unsigned)i);
        char ekey[PATH_LEN];
        join_index(ekey, key, i);
        int et = config_setting_type(e);
        int len = et == CONFIG_TYPE_LIST || et == CONFIG_TYPE_ARRAY ? config_setting_length(e) : 0;
        if (len != 2 && len != 3)
            return schema_error(c, e, ekey, "expected an (epoch, value) pair");
        /* (epoch, value, "cosine"): reached from the previous point by a half cosine */
        const char *how = len == 3 ? config_setting_get_string_elem(e, 2) : NULL;
        if (len == 3 && (et != CONFIG_TYPE_LIST || how == NULL || strcmp(how, "cosine") != 0))
            return schema_error(c, e, ekey, "the third element of a point can only be "
                                "\"cosine\"");
        config_setting_t *ep = config_setting_get_elem(e, 0);
        config_setting_t *v = config_setting_get_elem(e, 1);
        int tt = config_setting_type(ep);
        if (tt != CONFIG_TYPE_INT && tt != CONFIG_TYPE_INT64)
            return schema_error(c, e, ekey, "the epoch must be an integer (got %s)",
                                type_desc(tt));
        int vt = config_setting_type(v);
        if (vt != CONFIG_TYPE_INT && vt != CONFIG_TYPE_INT64 && vt != CONFIG_TYPE_FLOAT)
            return schema_error(c, e, ekey, "the value must be a number (got %s)",
                                type_desc(vt));
        double epoch = schema_number(ep), value = schema_number(v);
        if (epoch < 0 || epoch > TT_SCHEDULE_MAX)
            return schema_error(c, e, ekey, "the epoch must be 0 to %.0f (got %lld)",
                                TT_SCHEDULE_MAX, config_setting_get_int64(ep));
        if (!isfinite(value) || fabs(value) > FLT_MAX)
            return schema_error(c, e, ekey, "the value must be a finite float (got %g)", value);
        if (epoch < prev)
            return schema_error(c, e, ekey, "epochs must not decrease (%.0f after %.0f)",
                                epoch, prev);
        prev = epoch;
    }
    return 0;
}

static int check_group_list(vctx *c, config_setting_t *s, const key_spec *k, const char *key)
{
    int t = config_setting_type(s);
    if (t != CONFIG_TYPE_LIST && !(t == CONFIG_TYPE_ARRAY && config_setting_length(s) == 0))
        return schema_error(c, s, key, "expected a list ( ... ) (got %s)", type_desc(t));
    int n = config_setting_length(s);
    if (n < k->min_len)
        return schema_error(c, s, key, "must have at least %d element%s", k->min_len,
                            k->min_len == 1 ? "" : "s");
    for (int i = 0; i < n; i++) {
        config_setting_t *e = config_setting_get_elem(s, (unsigned)i);
        char ekey[PATH_LEN];
        join_index(ekey, key, i);
        int et = config_setting_type(e);
        if (k->kind == KEY_PLUGIN_LIST && et == CONFIG_TYPE_STRING) {
            /* "json" is short for { type = "json"; }: check the name now, the
             * caller turns it into a group once everything is checked. */
            const char *name = config_setting_get_string(e);
            const variant_spec *v = k->sub->variants;
            const char *cand[MAX_CANDIDATES];
            int nc = 0;
            for (; v->name != NULL; v++) {
                if (strcmp(v->name, name) == 0)
                    break;
                if (nc < MAX_CANDIDATES)
                    cand[nc++] = v->name;
            }
            if (v->name == NULL) {
                char hint[512];
                suggest(hint, sizeof(hint), name, cand, nc, "", false);
                plugin_hint(hint, sizeof(hint), k->sub, name);
                return schema_error(c, e, ekey, "unknown %s '%s'%s", k->sub->what, name, hint);
            }
            continue;
        }
        if (et != CONFIG_TYPE_GROUP)
            return schema_error(c, e, ekey, "expected a group { ... }%s (got %s)",
                                k->kind == KEY_PLUGIN_LIST ? " or a name" : "", type_desc(et));
        if (schema_check_group(c, e, k->sub, ekey) != 0)
            return -1;
    }
    return 0;
}

static int check_value(vctx *c, config_setting_t *s, const key_spec *k, const char *key)
{
    switch (k->kind) {
    case KEY_GROUP:
        if (config_setting_type(s) != CONFIG_TYPE_GROUP)
            return schema_error(c, s, key, "expected a group { ... } (got %s)",
                                type_desc(config_setting_type(s)));
        return schema_check_group(c, s, k->sub, key);
    case KEY_GROUP_LIST:
    case KEY_PLUGIN_LIST:
        return check_group_list(c, s, k, key);
    case KEY_INT_ARRAY:
    case KEY_FLOAT_ARRAY:
    case KEY_STRING_ARRAY:
    case KEY_PATH_ARRAY:
        return check_array(c, s, k, key);
    case KEY_SCHEDULE:
        return check_schedule(c, s, k, key);
    case KEY_CUSTOM:
        return k->parse(c, s, key);
    default:
        return check_scalar(c, s, k, key, k->kind);
    }
}

/* ---- checking a group ---- */

static const key_spec *find_key(const key_spec *keys, const char *name)
{
    for (; keys != NULL && keys->name != NULL; keys++)
        if (strcmp(keys->name, name) == 0)
            return keys;
    return NULL;
}

static int check_type_key(vctx *c, config_setting_t *g, const group_spec *spec,
                          const char *path, const variant_spec **out)
{
    char key[PATH_LEN];
    join_key(key, path, "type");
    config_setting_t *t = config_setting_get_member(g, "type");
    if (t == NULL) {
        if (spec->default_type == NULL)
            return schema_error(c, g, path[0] ? path : NULL, "missing required key 'type'");
        char quoted[128];
        snprintf(quoted, sizeof(quoted), "\"%s\"", spec->default_type);
        if ((t = schema_add_value(g, "type", quoted)) == NULL)
            return err_set(c->err, TT_ERR_RUNTIME, "out of memory");
    }
    if (config_setting_type(t) != CONFIG_TYPE_STRING)
        return schema_error(c, t, key, "expected a string (got %s)",
                            type_desc(config_setting_type(t)));
    const char *name = config_setting_get_string(t);
    const char *cand[MAX_CANDIDATES];
    int nc = 0;
    for (const variant_spec *v = spec->variants; v->name != NULL; v++) {
        if (strcmp(v->name, name) == 0) {
            *out = v;
            return 0;
        }
        if (nc < MAX_CANDIDATES)
            cand[nc++] = v->name;
    }
    char hint[512];
    suggest(hint, sizeof(hint), name, cand, nc, "", nc <= 4);
    plugin_hint(hint, sizeof(hint), spec, name);
    return schema_error(c, t, key, "unknown %s '%s'%s", spec->what, name, hint);
}

/* Whether `name` is a key of some type of this group. */
static bool wrong_variant_key_of(const group_spec *spec, const char *name)
{
    for (const variant_spec *o = spec->variants; o->name != NULL; o++)
        if (find_key(o->keys, name) != NULL)
            return true;
    return false;
}

/* A key that belongs to other types of this group: say which. */
static int wrong_variant_key(vctx *c, config_setting_t *s, const group_spec *spec,
                             const variant_spec *v, const char *key)
{
    char owners[256];
    size_t len = 0;
    owners[0] = '\0';
    for (const variant_spec *o = spec->variants; o->name != NULL; o++)
        if (find_key(o->keys, config_setting_name(s)) != NULL && len < sizeof(owners))
            len += (size_t)snprintf(owners + len, sizeof(owners) - len, "%s'%s'",
                                    len ? ", " : "", o->name);
    if (len == 0)
        return 1;
    return schema_error(c, s, key, "not allowed for %s '%s' (only for %s)", spec->what,
                        v->name, owners);
}

int schema_check_group(vctx *c, config_setting_t *g, const group_spec *spec, const char *path)
{
    const variant_spec *v = NULL;
    if (spec->variants != NULL && check_type_key(c, g, spec, path, &v) != 0)
        return -1;

    /* Pass 1, in file order: every key must be known. */
    for (int i = 0; i < config_setting_length(g); i++) {
        config_setting_t *s = config_setting_get_elem(g, (unsigned)i);
        const char *name = config_setting_name(s);
        if (find_key(spec->keys, name) || (v && find_key(v->keys, name)) ||
            (v && strcmp(name, "type") == 0))
            continue;
        char key[PATH_LEN];
        join_key(key, path, name);
        if (v != NULL && config_setting_get_hook(s) == SCHEMA_HOOK_OTHER_TYPE &&
            wrong_variant_key_of(spec, name)) {
            config_setting_remove_elem(g, (unsigned)i--); /* the old type's key */
            continue;
        }
        if (v != NULL) {
            int r = wrong_variant_key(c, s, spec, v, key);
            if (r <= 0)
                return r;
        }
        const char *cand[MAX_CANDIDATES];
        int nc = 0;
        for (const key_spec *k = spec->keys; k->name != NULL && nc < MAX_CANDIDATES; k++)
            cand[nc++] = k->name;
        for (const key_spec *k = v ? v->keys : NULL; k && k->name && nc < MAX_CANDIDATES; k++)
            cand[nc++] = k->name;
        char prefix[PATH_LEN], hint[PATH_LEN + 64];
        join_key(prefix, path, "");
        suggest(hint, sizeof(hint), name, cand, nc, prefix, false);
        return schema_error(c, s, NULL, "unknown key '%s'%s", key, hint);
    }

    /* Pass 2, in table order (so later keys can rely on earlier ones): check
     * values, report missing required keys, fill defaults. */
    for (int pass = 0; pass < 2; pass++) {
        const key_spec *k = pass == 0 ? spec->keys : (v ? v->keys : NULL);
        for (; k != NULL && k->name != NULL; k++) {
            char key[PATH_LEN];
            join_key(key, path, k->name);
            config_setting_t *s = config_setting_get_member(g, k->name);
            if (s != NULL) {
                if (check_value(c, s, k, key) != 0)
                    return -1;
                continue;
            }
            if (k->required)
                return schema_error(c, g, path[0] ? path : NULL,
                                    "missing required key '%s'", k->name);
            if (k->def == NULL)
                continue;
            if ((s = schema_add_value(g, k->name, k->def)) == NULL)
                return err_set(c->err, TT_ERR_RUNTIME, "bad default for %s", key);
            /* Defaults are checked too: a group default gets its own defaults. */
            if (check_value(c, s, k, key) != 0)
                return -1;
        }
    }
    if (spec->check != NULL)
        return spec->check(c, g, path, v);
    return 0;
}
