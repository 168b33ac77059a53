/* strutil.h - small string and path helpers. */
#ifndef TT_STRUTIL_H
#define TT_STRUTIL_H

#include <stddef.h>

/* The candidate closest to word by edit distance, or NULL when none is close
 * enough to be a plausible typo (distance <= max(1, strlen(word) / 3)). */
const char *str_closest(const char *word, const char *const *candidates, int n);

/* Levenshtein distance. */
int str_edit_distance(const char *a, const char *b);

/* Resolves `rel` against the directory of file `base` (or the current directory
 * when base is NULL) into an absolute, lexically normalised path in out.
 * An absolute rel is only normalised. Returns 0, or -1 when it does not fit. */
int path_resolve(const char *base, const char *rel, char *out, size_t out_len);

/* The file name without directory and without its last extension:
 * "jobs/fashion_mnist_lenet.cfg" -> "fashion_mnist_lenet". */
void path_stem(const char *path, char *out, size_t out_len);

/* The length of the character at s: 1 for a byte below 0x80 (NUL: 0), 2 to 4
 * for a well-formed UTF-8 sequence (RFC 3629: no overlong forms, no
 * surrogates, nothing above U+10FFFF; a NUL inside ends it), else 0. */
int str_utf8_len(const char *s);

/* Copies src into out (n bytes, always NUL-terminated, n >= 1) so that it is
 * safe to print as one line of an error: every byte that is not printable
 * ASCII or part of a well-formed UTF-8 character (C1 controls U+0080-U+009F
 * included) is written as \xNN. Nothing is cut in half: an escape or a
 * character that does not fit is left out. Escaping escaped text changes
 * nothing (a backslash stays as it is). Returns the length written. */
size_t str_escape(const char *src, char *out, size_t n);

/* A summary tag as tensorpack cleans it: every "tower<N>/" prefix and a
 * trailing ":0" removed ("tower1/loss:0" -> "loss"). In place. */
void str_clean_tag(char *tag);

#endif
