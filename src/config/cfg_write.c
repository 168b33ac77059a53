/* cfg_write.c - prints a libconfig tree in libconfig syntax.
 *
 * libconfig 1.5's config_write prints floats with 6 significant digits (so
 * 0.0123456789 would not survive a round trip) and cannot be told otherwise, so
 * the resolved job is printed here: floats in the shortest form that reads back
 * to the same double, groups one key per line, scalar lists on one line. */
#include <libconfig.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/schema.h"

static void put_indent(FILE *out, int depth)
{
    for (int i = 0; i < depth; i++)
        fputs("  ", out);
}

static void put_float(FILE *out, double v)
{
    char buf[64];
    for (int p = 1; p <= 17; p++) {
        snprintf(buf, sizeof(buf), "%.*g", p, v);
        if (strtod(buf, NULL) == v)
            break;
    }
    /* libconfig reads "1" as an integer: keep a float a float */
    if (strpbrk(buf, ".eEn") == NULL)
        strcat(buf, ".0");
    fputs(buf, out);
}

static void put_string(FILE *out, const char *s)
{
    fputc('"', out);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        switch (*p) {
        case '"': fputs("\\\"", out); break;
        case '\\': fputs("\\\\", out); break;
        case '\n': fputs("\\n", out); break;
        case '\t': fputs("\\t", out); break;
        case '\r': fputs("\\r", out); break;
        case '\f': fputs("\\f", out); break;
        default:
            if (*p < 0x20)
                fprintf(out, "\\x%02X", *p);
            else
                fputc(*p, out);
        }
    }
    fputc('"', out);
}

static bool is_aggregate(const config_setting_t *s)
{
    int t = config_setting_type(s);
    return t == CONFIG_TYPE_GROUP || t == CONFIG_TYPE_LIST || t == CONFIG_TYPE_ARRAY;
}

/* A list or array whose elements are all scalars (or short scalar lists, as the
 * pairs of a schedule) goes on one line. */
static bool is_flat(const config_setting_t *s)
{
    for (int i = 0; i < config_setting_length(s); i++) {
        const config_setting_t *e = config_setting_get_elem(s, (unsigned)i);
        if (config_setting_type(e) == CONFIG_TYPE_GROUP)
            return false;
        if (is_aggregate(e) && !is_flat(e))
            return false;
    }
    return true;
}

static void put_value(FILE *out, const config_setting_t *s, int depth);

static void put_members(FILE *out, const config_setting_t *g, int depth)
{
    for (int i = 0; i < config_setting_length(g); i++) {
        const config_setting_t *e = config_setting_get_elem(g, (unsigned)i);
        put_indent(out, depth);
        fprintf(out, "%s = ", config_setting_name(e));
        put_value(out, e, depth);
        fputs(";\n", out);
    }
}

static void put_value(FILE *out, const config_setting_t *s, int depth)
{
    switch (config_setting_type(s)) {
    case CONFIG_TYPE_INT:
        fprintf(out, "%d", config_setting_get_int(s));
        break;
    case CONFIG_TYPE_INT64:
        fprintf(out, "%lldL", config_setting_get_int64(s));
        break;
    case CONFIG_TYPE_FLOAT:
        put_float(out, config_setting_get_float(s));
        break;
    case CONFIG_TYPE_BOOL:
        fputs(config_setting_get_bool(s) ? "true" : "false", out);
        break;
    case CONFIG_TYPE_STRING:
        put_string(out, config_setting_get_string(s));
        break;
    case CONFIG_TYPE_GROUP:
        if (config_setting_length(s) == 0) {
            fputs("{ }", out);
            break;
        }
        fputs("{\n", out);
        put_members(out, s, depth + 1);
        put_indent(out, depth);
        fputc('}', out);
        break;
    case CONFIG_TYPE_ARRAY:
    case CONFIG_TYPE_LIST: {
        bool list = config_setting_type(s) == CONFIG_TYPE_LIST;
        int n = config_setting_length(s);
        if (n == 0) {
            fputs(list ? "( )" : "[ ]", out);
            break;
        }
        bool flat = is_flat(s);
        fputs(list ? "(" : "[", out);
        for (int i = 0; i < n; i++) {
            if (flat) {
                fputs(i ? ", " : " ", out);
            } else {
                fputs(i ? ",\n" : "\n", out);
                put_indent(out, depth + 1);
            }
            put_value(out, config_setting_get_elem(s, (unsigned)i), depth + 1);
        }
        if (flat) {
            fputs(list ? " )" : " ]", out);
        } else {
            fputc('\n', out);
            put_indent(out, depth);
            fputs(list ? ")" : "]", out);
        }
        break;
    }
    default:
        break;
    }
}

int cfg_write_root(const config_setting_t *root, FILE *out)
{
    put_members(out, root, 0);
    fflush(out);
    return ferror(out) ? -1 : 0;
}
