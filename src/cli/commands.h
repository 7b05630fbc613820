/* commands.h — commands implemented outside main.c. */
#ifndef ZT_COMMANDS_H
#define ZT_COMMANDS_H

#include "../core/status.h"

const char *zt_version(void);
int zt_cli_set_threads(int threads); /* 0: the cores this process may use; returns the count */
int zt_cmd_env(int argc, char **argv, zt_err *err);
int zt_cmd_launch(int argc, char **argv, zt_err *err);
int zt_cmd_config(int argc, char **argv, zt_err *err);
int zt_cmd_estimate_memory(int argc, char **argv, zt_err *err);
int zt_cmd_tokenize(int argc, char **argv, zt_err *err);
/* Move the values after `flag` (up to the next --flag) out of argv into *list. */
int zt_cli_take_list(const char *flag, int *argc, char **argv, const char ***list);
int zt_cmd_generate(int argc, char **argv, zt_err *err);

#endif
