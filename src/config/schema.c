/* schema.c - the validation engine behind schema.h: walks a libconfig tree
 * against the key tables (schema_tables.c), reports the first problem with its
 * file, line and key path, and fills in defaults so the tree becomes the
 * resolved job. */
#include "config/schema.h"

#include <errno.h>
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
        snprintf(loc, sizeof(loc), "--set %s", c->sets[set - 1].arg);
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
    const group_spec *other = spec == &callback_spec ? &monitor_spec
                              : spec == &monitor_spec ? &callback_spec : NULL;
    if (other == NULL)
        return;
    for (const variant_spec *v = other->variants; v->name != NULL; v++)
        if (strcmp(v->name, name) == 0) {
            snprintf(out, n, " ('%s' is a %s: list it in %s)", name, other->what,
                     other == &monitor_spec ? "monitors" : "callbacks");
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
    if (config_read_string(&tmp, text)) {
        config_setting_t *v = config_lookup(&tmp, "v");
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

int schema_read_file(config_t *cfg, const char *path, const char *display, tt_err *err)
{
    struct stat st;
    if (stat(path, &st) != 0)
        return err_set(err, TT_ERR_USAGE, "cannot read %s: %s", display, strerror(errno));
    if (S_ISDIR(st.st_mode))
        return err_set(err, TT_ERR_USAGE, "cannot read %s: Is a directory", display);
    if (config_read_file(cfg, path))
        return 0;
    if (config_error_type(cfg) == CONFIG_ERR_FILE_IO)
        return err_set(err, TT_ERR_USAGE, "cannot read %s: %s", display,
                       errno ? strerror(errno) : "I/O error");
    const char *file = config_error_file(cfg);
    if (file == NULL || strcmp(file, path) == 0)
        file = display;
    const char *text = config_error_text(cfg);
    if (text == NULL || strcmp(text, "syntax error") == 0)
        return err_set(err, TT_ERR_USAGE, "%s:%d: syntax error", file, config_error_line(cfg));
    return err_set(err, TT_ERR_USAGE, "%s:%d: syntax error: %s", file, config_error_line(cfg),
                   text);
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

/* ---- checking one value ---- */

static int check_range(vctx *c, const config_setting_t *s, const key_spec *k, const char *key,
                       double v)
{
    char got[64];
    if (config_setting_type(s) == CONFIG_TYPE_FLOAT)
        snprintf(got, sizeof(got), "%.17g", v);
    else
        snprintf(got, sizeof(got), "%.0f", v);
    /* shortest form that reads back the same, for readable messages */
    if (config_setting_type(s) == CONFIG_TYPE_FLOAT)
        for (int p = 1; p <= 17; p++) {
            snprintf(got, sizeof(got), "%.*g", p, v);
            if (strtod(got, NULL) == v)
                break;
        }
    if (k->lo_kind == BOUND_INCL && !(v >= k->lo))
        return schema_error(c, s, key, "must be >= %g (got %s)", k->lo, got);
    if (k->lo_kind == BOUND_EXCL && !(v > k->lo))
        return schema_error(c, s, key, "must be > %g (got %s)", k->lo, got);
    if (k->hi_kind == BOUND_INCL && !(v <= k->hi))
        return schema_error(c, s, key, "must be <= %g (got %s)", k->hi, got);
    if (k->hi_kind == BOUND_EXCL && !(v < k->hi))
        return schema_error(c, s, key, "must be < %g (got %s)", k->hi, got);
    return 0;
}

static int check_scalar(vctx *c, config_setting_t *s, const key_spec *k, const char *key,
                        key_kind kind)
{
    int t = config_setting_type(s);
    switch (kind) {
    case KEY_INT:
        if (t != CONFIG_TYPE_INT &&
            !(t == CONFIG_TYPE_INT64 && config_setting_get_int64(s) >= INT32_MIN &&
              config_setting_get_int64(s) <= INT32_MAX))
            return schema_error(c, s, key, "expected an integer (got %s)",
                                t == CONFIG_TYPE_INT64 ? "a 64-bit integer" : type_desc(t));
        return check_range(c, s, k, key, schema_number(s));
    case KEY_INT64:
        if (t != CONFIG_TYPE_INT && t != CONFIG_TYPE_INT64)
            return schema_error(c, s, key, "expected an integer (got %s)", type_desc(t));
        return check_range(c, s, k, key, schema_number(s));
    case KEY_FLOAT:
        if (t != CONFIG_TYPE_INT && t != CONFIG_TYPE_INT64 && t != CONFIG_TYPE_FLOAT)
            return schema_error(c, s, key, "expected a number (got %s)", type_desc(t));
        if (!isfinite(schema_number(s)))
            return schema_error(c, s, key, "must be finite");
        return check_range(c, s, k, key, schema_number(s));
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
        if (kind == KEY_PATH)
            return schema_resolve_path(c, s, -1, key);
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
        } else if (check_scalar(c, e, k, ekey, ek) != 0) {
            return -1;
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
        if ((et != CONFIG_TYPE_LIST && et != CONFIG_TYPE_ARRAY) || config_setting_length(e) != 2)
            return schema_error(c, e, ekey, "expected an (epoch, value) pair");
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
        double epoch = schema_number(ep);
        if (epoch < 0)
            return schema_error(c, e, ekey, "the epoch must be >= 0 (got %.0f)", epoch);
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
    case KEY_MODEL: {
        int t = config_setting_type(s);
        char prefix[PATH_LEN];
        join_key(prefix, key, "");
        if (t == CONFIG_TYPE_STRING) {
            if (schema_resolve_path(c, s, -1, key) != 0)
                return -1;
            const char *abs = config_setting_get_string(s);
            if (model_cfg_load(abs, c->model, c->err) == 0)
                return 0;
            /* Reading errors name the --set or the job line; errors inside the
             * model file already name that file. */
            if (strncmp(c->err->msg, "cannot read ", 12) == 0) {
                char msg[1024];
                snprintf(msg, sizeof(msg), "%s", c->err->msg);
                err_clear(c->err);
                return schema_error(c, s, key, "%s", msg);
            }
            return -1;
        }
        if (t != CONFIG_TYPE_GROUP)
            return schema_error(c, s, key, "expected a model file name or a group { ... } "
                                "(got %s)", type_desc(t));
        if (schema_check_group(c, s, &model_spec, key) != 0)
            return -1;
        return model_cfg_from_setting(c, s, prefix, c->model);
    }
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
