/* launch.c — `ztrain launch`: start the ranks through Open MPI's mpirun, as
 * `accelerate launch` starts them through torchrun.
 *
 *   ztrain launch --num_processes N [--threads_per_process T] [--config_file F] CMD [ARGS]
 * runs  mpirun -np N [--allow-run-as-root] [binding] BIN CMD [--config_file F] [--threads T] ARGS
 * Ranks are bound to T cores each when N*T cores exist, and left unbound (and
 * oversubscribed) when they outnumber the cores, so two ranks on a two-core
 * machine, or four for a test, still run. */
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../config/accelerate.h"
#include "commands.h"
#include "flags.h"

static int usable_cores(void)
{
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0)
        return CPU_COUNT(&set);
    return 1;
}

int zt_cmd_launch(int argc, char **argv, zt_err *err)
{
    /* launch's own flags come before the command name */
    int split = 0;
    while (split < argc && !strncmp(argv[split], "--", 2)) {
        int is_bool = !strcmp(argv[split], "--dry_run");
        split += strchr(argv[split], '=') || is_bool ? 1 : 2;
    }
    int num = 0, tpp = 0, dry = 0;
    const char *config = NULL;
    zt_flag flags[] = {
        {"num_processes", ZT_FLAG_INT, &num, "ranks to start (default: the config's num_processes, else 1)", 1, 1 << 16, 0},
        {"threads_per_process", ZT_FLAG_INT, &tpp, "threads per rank (default: cores / ranks, at least 1)", 1, 4096, 0},
        {"config_file", ZT_FLAG_STR, &config, "Accelerate config YAML, passed on to the command", 1, 0, 0},
        {"dry_run", ZT_FLAG_BOOL, &dry, "print the mpirun command instead of running it", 1, 0, 0},
    };
    if (split == argc && zt_flags_wants_help(argc, argv)) {
        zt_flags_usage(flags, 4, "usage: ztrain launch [--num_processes N] [--config_file F] <command> [args]");
        return ZT_OK;
    }
    if (split > argc)
        split = argc;
    int rc = zt_flags_parse(flags, 4, split, argv, "ztrain launch", err);
    if (rc)
        return rc;
    if (split >= argc)
        return zt_fail(err, ZT_EINPUT, "ztrain launch: no command given (e.g. ztrain launch --num_processes 2 train ...)");
    if (!num && config) {
        zt_accel_config ac;
        zt_accel_config_init(&ac);
        if ((rc = zt_accel_config_read(config, &ac, err)))
            return rc;
        num = ac.num_processes > 0 ? ac.num_processes : 1;
    }
    if (!num)
        num = 1;
    int cores = usable_cores();
    if (!tpp)
        tpp = cores / num > 0 ? cores / num : 1;

    char self[4096];
    ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
    if (len <= 0)
        return zt_fail(err, ZT_EFAIL, "cannot find the ztrain binary (/proc/self/exe)");
    self[len] = '\0';

    char np[16], tp[16], pe[32];
    snprintf(np, sizeof np, "%d", num);
    snprintf(tp, sizeof tp, "%d", tpp);
    snprintf(pe, sizeof pe, "slot:PE=%d", tpp);
    char **args = calloc((size_t)argc + 24, sizeof *args);
    if (!args)
        return zt_fail(err, ZT_EFAIL, "out of memory");
    int n = 0;
    args[n++] = "mpirun";
    args[n++] = "-np";
    args[n++] = np;
    if (geteuid() == 0)
        args[n++] = "--allow-run-as-root";
    if ((long)num * tpp <= cores) {
        args[n++] = "--map-by";
        args[n++] = pe;
        args[n++] = "--bind-to";
        args[n++] = "core";
    } else {
        args[n++] = "--oversubscribe";
        args[n++] = "--bind-to";
        args[n++] = "none";
    }
    args[n++] = self;
    args[n++] = argv[split];
    int has_threads = 0;
    for (int i = split + 1; i < argc; i++)
        has_threads |= !strncmp(argv[i], "--threads", 9) && (argv[i][9] == '\0' || argv[i][9] == '=');
    if (config) {
        args[n++] = "--config_file";
        args[n++] = (char *)config;
    }
    if (!has_threads) {
        args[n++] = "--threads";
        args[n++] = tp;
    }
    for (int i = split + 1; i < argc; i++)
        args[n++] = argv[i];
    args[n] = NULL;
    if (dry) {
        for (int i = 0; i < n; i++)
            printf("%s%s", i ? " " : "", args[i]);
        printf("\n");
        free(args);
        return ZT_OK;
    }
    fflush(stdout);
    execvp("mpirun", args);
    free(args);
    return zt_fail(err, ZT_EFAIL, "cannot run mpirun (is openmpi-bin installed?)");
}
