#include "util/err.h"

#include <stdio.h>
#include <string.h>

#include "util/strutil.h"

int err_set(tt_err *err, int code, const char *fmt, ...)
{
    if (err == NULL || err->code != TT_OK)
        return -1;
    /* Messages quote paths, names and values from users' files and from
     * libraries: escape whatever is not printable text (newlines, terminal
     * control codes, bytes that are not UTF-8), so the message is one line
     * that cannot drive the terminal. */
    char raw[sizeof(err->msg)];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(raw, sizeof(raw), fmt, ap);
    va_end(ap);
    str_escape(raw, err->msg, sizeof(err->msg));
    err->code = code;
    return -1;
}

void err_clear(tt_err *err)
{
    if (err == NULL)
        return;
    err->code = TT_OK;
    err->msg[0] = '\0';
}
