/* status.c — see status.h. */
#include "status.h"

#include <stdio.h>
#include <string.h>

int zt_fail(zt_err *err, int code, const char *fmt, ...)
{
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
        err->code = code;
    }
    return code;
}

int zt_wrap(zt_err *err, const char *fmt, ...)
{
    if (!err)
        return ZT_EFAIL;
    char old[sizeof err->msg];
    memcpy(old, err->msg, sizeof old);
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    va_end(ap);
    /* append the old message after the prefix, truncating at the buffer's end */
    size_t used = n < 0 ? 0 : (size_t)n < sizeof err->msg ? (size_t)n : sizeof err->msg - 1;
    size_t room = sizeof err->msg - 1 - used, len = strnlen(old, sizeof old - 1);
    if (len > room)
        len = room;
    memcpy(err->msg + used, old, len);
    err->msg[used + len] = '\0';
    return err->code;
}
