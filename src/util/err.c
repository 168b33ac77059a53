#include "util/err.h"

#include <stdio.h>
#include <string.h>

int err_set(tt_err *err, int code, const char *fmt, ...)
{
    if (err == NULL || err->code != TT_OK)
        return -1;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->msg, sizeof(err->msg), fmt, ap);
    va_end(ap);
    /* Keep the message one line whatever was formatted into it. */
    for (char *p = err->msg; *p; p++)
        if (*p == '\n' || *p == '\r')
            *p = ' ';
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
