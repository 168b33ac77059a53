/* err.h - error values passed up to the command, which prints one line and exits.
 *
 * Library code never prints errors or calls exit(): it fills a tt_err and returns -1.
 * The code says which exit status the command should use (towertrain(1), EXIT STATUS).
 */
#ifndef TT_ERR_H
#define TT_ERR_H

#include <stdarg.h>

enum {
    TT_OK = 0,
    TT_ERR_RUNTIME = 1, /* I/O error, NaN loss, device failure */
    TT_ERR_USAGE = 2    /* bad usage, job/model file, data, checkpoint, no GPU */
};

typedef struct {
    int code;       /* TT_OK, TT_ERR_RUNTIME or TT_ERR_USAGE */
    char msg[1024]; /* one line, without the "towertrain: " prefix; bytes that are
                       not printable text are escaped as \xNN (str_escape) */
} tt_err;

/* Records the error (the first one wins) and returns -1, so callers can write
 * `return err_set(err, TT_ERR_USAGE, "...")`. err may be NULL. */
int err_set(tt_err *err, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Clears err. */
void err_clear(tt_err *err);

#endif
