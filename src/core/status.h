/* status.h — errors as values.
 *
 * Every fallible function returns an int status (ZT_OK, ZT_EINPUT, ZT_EFAIL) and,
 * on failure, fills a zt_err with a message that names the file, key, flag or
 * rank at fault.  Only main() turns a status into an exit code, so the codes
 * double as the CLI's exit codes (contract §7: 0 ok, 2 bad input, 1 anything else). */
#ifndef ZT_STATUS_H
#define ZT_STATUS_H

#include <stdarg.h>

enum { ZT_OK = 0, ZT_EFAIL = 1, ZT_EINPUT = 2 };
/* Not a failure: the run stopped cleanly on SIGINT (exit 130, as a shell reports
 * Ctrl-C); nothing to print. */
enum { ZT_EINTERRUPT = 130 };

typedef struct zt_err {
    int code;
    char msg[1024];
} zt_err;

/* Record a failure and return its code, so callers can write
 *   return zt_fail(err, ZT_EINPUT, "%s: header length %llu exceeds 100 MB", path, n); */
int zt_fail(zt_err *err, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Prefix an existing message with more context ("loading DIR: " + old message). */
int zt_wrap(zt_err *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
