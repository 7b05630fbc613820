/* flags.h — the one flag parser of the command line.
 *
 * A command declares a table of flags (name, kind, destination, help) and
 * zt_flags_parse fills the destinations from argv.  Accepted forms:
 * `--name value`, `--name=value`, and bare `--name` for booleans.  An unknown
 * flag is an error that suggests the closest known name; a malformed or
 * out-of-range value names the flag and what was expected. */
#ifndef ZT_FLAGS_H
#define ZT_FLAGS_H

#include "../core/status.h"

typedef enum zt_flag_kind { ZT_FLAG_STR, ZT_FLAG_INT, ZT_FLAG_LONG, ZT_FLAG_DOUBLE, ZT_FLAG_BOOL } zt_flag_kind;

typedef struct zt_flag {
    const char *name;    /* without the leading "--" */
    zt_flag_kind kind;
    void *dest;          /* const char **, int *, long *, double *, int * */
    const char *help;
    double min, max;     /* numeric range (inclusive), ignored when min > max */
    int seen;            /* set by the parser */
} zt_flag;

/* Parse argv[0..argc) (the command's own arguments).  Returns ZT_OK or ZT_EINPUT. */
int zt_flags_parse(zt_flag *flags, int nflags, int argc, char **argv, const char *command,
                   zt_err *err);
/* The usage line, then one line per flag: its help and, unless the help says it
 * or the usage line shows the flag as required, "(default X)" from the value its
 * destination holds (call it before parsing; a NULL string shows as none). */
void zt_flags_usage(const zt_flag *flags, int nflags, const char *usage_line);
/* 1 if argv holds -h or --help. */
int zt_flags_wants_help(int argc, char **argv);

#endif
