#include "util/strutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int str_edit_distance(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    if (la > 64 || lb > 64)
        return la > lb ? (int)la : (int)lb; /* names are short; no typo that long */
    int prev[65], cur[65];
    for (size_t j = 0; j <= lb; j++)
        prev[j] = (int)j;
    for (size_t i = 1; i <= la; i++) {
        cur[0] = (int)i;
        for (size_t j = 1; j <= lb; j++) {
            int sub = prev[j - 1] + (a[i - 1] != b[j - 1]);
            int del = prev[j] + 1, ins = cur[j - 1] + 1;
            cur[j] = sub < del ? (sub < ins ? sub : ins) : (del < ins ? del : ins);
        }
        memcpy(prev, cur, sizeof(int) * (lb + 1));
    }
    return prev[lb];
}

const char *str_closest(const char *word, const char *const *candidates, int n)
{
    int limit = (int)strlen(word) / 3;
    if (limit < 1)
        limit = 1;
    const char *best = NULL;
    int best_d = limit + 1;
    for (int i = 0; i < n; i++) {
        int d = str_edit_distance(word, candidates[i]);
        if (d < best_d) {
            best_d = d;
            best = candidates[i];
        }
    }
    return best;
}

/* Removes "." and ".." components and duplicate slashes of an absolute path. */
static void path_normalise(char *p)
{
    char *out = p; /* p[0] == '/' */
    const char *in = p;
    size_t len = 0;
    while (*in) {
        while (*in == '/')
            in++;
        const char *seg = in;
        while (*in && *in != '/')
            in++;
        size_t n = (size_t)(in - seg);
        if (n == 0 || (n == 1 && seg[0] == '.'))
            continue;
        if (n == 2 && seg[0] == '.' && seg[1] == '.') {
            while (len > 0 && out[len - 1] != '/')
                len--;
            if (len > 0)
                len--; /* drop the slash too */
            continue;
        }
        out[len++] = '/';
        memmove(out + len, seg, n);
        len += n;
    }
    if (len == 0)
        out[len++] = '/';
    out[len] = '\0';
}

int path_resolve(const char *base, const char *rel, char *out, size_t out_len)
{
    char buf[8192];
    if (rel[0] == '/') {
        if (strlen(rel) >= sizeof(buf))
            return -1;
        strcpy(buf, rel);
    } else {
        char dir[4096];
        if (base != NULL && strchr(base, '/') != NULL) {
            size_t n = (size_t)(strrchr(base, '/') - base);
            if (n >= sizeof(dir))
                return -1;
            memcpy(dir, base, n);
            dir[n] = '\0';
            if (n == 0)
                strcpy(dir, "/");
        } else {
            strcpy(dir, ".");
        }
        char cwd[4096];
        if (dir[0] != '/') {
            if (getcwd(cwd, sizeof(cwd)) == NULL)
                return -1;
        } else {
            cwd[0] = '\0';
        }
        int k = snprintf(buf, sizeof(buf), "%s%s%s/%s", cwd, cwd[0] ? "/" : "", dir, rel);
        if (k < 0 || (size_t)k >= sizeof(buf))
            return -1;
    }
    path_normalise(buf);
    if (strlen(buf) >= out_len)
        return -1;
    strcpy(out, buf);
    return 0;
}

void path_stem(const char *path, char *out, size_t out_len)
{
    const char *s = strrchr(path, '/');
    s = s ? s + 1 : path;
    size_t n = strlen(s);
    const char *dot = strrchr(s, '.');
    if (dot != NULL && dot != s)
        n = (size_t)(dot - s);
    if (n >= out_len)
        n = out_len - 1;
    memcpy(out, s, n);
    out[n] = '\0';
}

void str_clean_tag(char *tag)
{
    char *out = tag;
    for (const char *p = tag; *p;) {
        /* at the start of a component: skip "tower<digits>/" */
        if ((p == tag || p[-1] == '/') && strncmp(p, "tower", 5) == 0 && p[5] >= '0' &&
            p[5] <= '9') {
            const char *q = p + 5;
            while (*q >= '0' && *q <= '9')
                q++;
            if (*q == '/') {
                p = q + 1;
                continue;
            }
        }
        *out++ = *p++;
    }
    *out = '\0';
    size_t n = strlen(tag);
    if (n >= 2 && strcmp(tag + n - 2, ":0") == 0)
        tag[n - 2] = '\0';
}

int str_utf8_len(const char *s)
{
    const unsigned char *p = (const unsigned char *)s;
    unsigned char c = p[0];
    if (c != 0 && c < 0x80)
        return 1;
    if (c >= 0xc2 && c <= 0xdf)
        return (p[1] & 0xc0) == 0x80 ? 2 : 0;
    if (c >= 0xe0 && c <= 0xef) {
        unsigned char lo = c == 0xe0 ? 0xa0 : 0x80, hi = c == 0xed ? 0x9f : 0xbf;
        return p[1] >= lo && p[1] <= hi && (p[2] & 0xc0) == 0x80 ? 3 : 0;
    }
    if (c >= 0xf0 && c <= 0xf4) {
        unsigned char lo = c == 0xf0 ? 0x90 : 0x80, hi = c == 0xf4 ? 0x8f : 0xbf;
        return p[1] >= lo && p[1] <= hi && (p[2] & 0xc0) == 0x80 && (p[3] & 0xc0) == 0x80 ? 4
                                                                                         : 0;
    }
    return 0;
}

/* Printable ASCII, or a well-formed UTF-8 character other than the C1
 * controls (U+0080-U+009F: some terminals obey them): its length, else 0. */
static int printable_len(const unsigned char *p)
{
    if (*p < 0x80)
        return *p >= 0x20 && *p < 0x7f ? 1 : 0;
    if (p[0] == 0xc2 && p[1] < 0xa0)
        return 0;
    return str_utf8_len((const char *)p);
}

size_t str_escape(const char *src, char *out, size_t n)
{
    static const char hex[] = "0123456789abcdef";
    const unsigned char *p = (const unsigned char *)src;
    size_t len = 0;
    while (*p != '\0') {
        /* the continuation bytes checked stop at a NUL: it is never 10xxxxxx */
        int k = printable_len(p);
        if (k > 0) {
            if (len + (size_t)k >= n)
                break;
            memcpy(out + len, p, (size_t)k);
            len += (size_t)k;
            p += k;
            continue;
        }
        if (len + 4 >= n)
            break;
        out[len++] = '\\';
        out[len++] = 'x';
        out[len++] = hex[*p >> 4];
        out[len++] = hex[*p & 15];
        p++;
    }
    out[len] = '\0';
    return len;
}
