/* launch.c — `ztrain launch`: start the ranks through Open MPI's mpirun, as
 * `accelerate launch` starts them through torchrun.
 *
 *   ztrain launch [--num_processes N] [--hostfile FILE | --hosts h1:n,h2:n]
 *                 [--threads_per_process T] [--config_file F] [--dry_run] CMD [ARGS]
 * runs  mpirun -np N [--hostfile FILE | --host LIST] [--allow-run-as-root] [binding]
 *              BIN CMD [--config_file F] [--threads T] ARGS
 *
 * Machines.  With a hostfile (Open MPI's format: `host slots=N` per line) or a
 * host list, mpirun starts the remote ranks itself (ssh, or the agent that
 * OMPI_MCA_plm_rsh_agent names) and fills each host's slots in order, so each
 * machine holds a block of consecutive ranks — the layout HYBRID_SHARD's shard
 * groups follow.  The Accelerate YAML's num_machines, num_processes and
 * mpirun_config.mpirun_hostfile are read and checked against the hosts; a
 * machine_rank other than 0 is refused, since mpirun runs once, on the first
 * machine, and main_process_ip/port are shown but unused (MPI has its own
 * rendezvous).  Open MPI's own settings in the environment (OMPI_MCA_*) reach
 * mpirun untouched; a mapping or binding set there replaces launch's.
 *
 * Inside a Slurm allocation (SLURM_JOB_NUM_NODES set, no hosts given) mpirun
 * finds the nodes itself; launch takes SLURM_NTASKS as the default rank count.
 *
 * Binding is per machine: T = (this machine's cores) / (ranks per machine),
 * assuming the machines are alike.  Ranks are bound to T cores each when they
 * fit, and left unbound (and oversubscribed) when they outnumber the cores, so
 * two ranks on a two-core machine, or four for a test, still run. */
#include <ctype.h>
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../config/accelerate.h"
#include "../core/mem.h"
#include "commands.h"
#include "flags.h"

extern char **environ;

static int usable_cores(void)
{
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0)
        return CPU_COUNT(&set);
    return 1;
}

/* ---- hosts -------------------------------------------------------------------- */

enum { MAX_HOSTS = 1024, HOST_NAME_CAP = 256 };

typedef struct host {
    char name[HOST_NAME_CAP];
    int slots; /* 0: not given (Open MPI then decides, from the host's cores) */
} host;

typedef struct host_set {
    host *hosts;     /* MAX_HOSTS entries, ZT_MEM_OTHER */
    int n;
    char source[600]; /* "hostfile FILE", "--hosts" */
} host_set;

/* Add `slots` to host `name` (a host listed twice gets both counts, as in Open MPI). */
static int add_host(host_set *hs, const char *name, size_t len, int slots, const char *where, zt_err *err)
{
    if (len == 0 || len >= HOST_NAME_CAP)
        return zt_fail(err, ZT_EINPUT, "%s: a host name must have 1 to %d characters", where, HOST_NAME_CAP - 1);
    for (size_t i = 0; i < len; i++)
        if (!isalnum((unsigned char)name[i]) && !strchr(".-_:[]", name[i]))
            return zt_fail(err, ZT_EINPUT, "%s: '%.*s' is not a host name (letters, digits, '.', '-', '_')",
                           where, (int)len, name);
    for (int i = 0; i < hs->n; i++)
        if (strlen(hs->hosts[i].name) == len && !memcmp(hs->hosts[i].name, name, len)) {
            if (!hs->hosts[i].slots != !slots)
                return zt_fail(err, ZT_EINPUT, "%s: host %.*s is listed with and without slots=", where,
                               (int)len, name);
            hs->hosts[i].slots += slots;
            return ZT_OK;
        }
    if (hs->n == MAX_HOSTS)
        return zt_fail(err, ZT_EINPUT, "%s: more than %d hosts", where, MAX_HOSTS);
    memcpy(hs->hosts[hs->n].name, name, len);
    hs->hosts[hs->n].name[len] = '\0';
    hs->hosts[hs->n++].slots = slots;
    return ZT_OK;
}

static int parse_count(const char *s, size_t len, int *out)
{
    if (len == 0 || len > 6 || strspn(s, "0123456789") < len)
        return -1;
    *out = atoi(s);
    return *out >= 1 ? 0 : -1;
}

/* Open MPI's hostfile: `host [slots=N] [max_slots=M]` per line, '#' comments. */
static int read_hostfile(const char *path, host_set *hs, zt_err *err)
{
    snprintf(hs->source, sizeof hs->source, "hostfile %s", path);
    FILE *f = fopen(path, "r");
    if (!f)
        return zt_fail(err, ZT_EINPUT, "hostfile %s: cannot open: %s", path, strerror(errno));
    char line[1024], where[600];
    int rc = ZT_OK;
    for (int ln = 1; rc == ZT_OK && fgets(line, sizeof line, f); ln++) {
        snprintf(where, sizeof where, "hostfile %s:%d", path, ln);
        if (!strchr(line, '\n') && !feof(f)) {
            rc = zt_fail(err, ZT_EINPUT, "%s: line longer than %zu characters", where, sizeof line - 2);
            break;
        }
        char *hash = strchr(line, '#');
        if (hash)
            *hash = '\0';
        const char *sep = " \t\r\n";
        char *save = NULL, *name = strtok_r(line, sep, &save);
        if (!name)
            continue;
        int slots = 0, max_slots = 0;
        for (char *tok = strtok_r(NULL, sep, &save); tok && rc == ZT_OK; tok = strtok_r(NULL, sep, &save)) {
            char *eq = strchr(tok, '=');
            int *dst = eq && (size_t)(eq - tok) == 5 && !strncmp(tok, "slots", 5) ? &slots
                     : eq && (!strncmp(tok, "max_slots=", 10) || !strncmp(tok, "max-slots=", 10)) ? &max_slots
                                                                                                   : NULL;
            if (!dst || parse_count(eq + 1, strlen(eq + 1), dst))
                rc = zt_fail(err, ZT_EINPUT, "%s: '%s' not understood (expected: host [slots=N] [max_slots=N], "
                             "N >= 1)", where, tok);
        }
        if (rc == ZT_OK && max_slots && slots > max_slots)
            rc = zt_fail(err, ZT_EINPUT, "%s: slots=%d is more than max_slots=%d", where, slots, max_slots);
        if (rc == ZT_OK)
            rc = add_host(hs, name, strlen(name), slots, where, err);
    }
    if (rc == ZT_OK && ferror(f))
        rc = zt_fail(err, ZT_EINPUT, "hostfile %s: read error", path);
    fclose(f);
    if (rc == ZT_OK && hs->n == 0)
        rc = zt_fail(err, ZT_EINPUT, "hostfile %s: no hosts in it", path);
    return rc;
}

/* --hosts h1:2,h2:2 (mpirun's --host form; a host without :N has one slot). */
static int parse_host_list(const char *list, host_set *hs, zt_err *err)
{
    snprintf(hs->source, sizeof hs->source, "--hosts %.500s", list);
    for (const char *p = list;;) {
        size_t len = strcspn(p, ",");
        const char *colon = memchr(p, ':', len);
        int slots = 1;
        if (colon && parse_count(colon + 1, len - (size_t)(colon + 1 - p), &slots))
            return zt_fail(err, ZT_EINPUT, "--hosts: '%.*s': expected host or host:N with N >= 1", (int)len, p);
        int rc = add_host(hs, p, colon ? (size_t)(colon - p) : len, slots, "--hosts", err);
        if (rc)
            return rc;
        if (!p[len])
            return ZT_OK;
        p += len + 1;
    }
}

/* ---- the command ---------------------------------------------------------------- */

/* Mapping and binding given through the environment, which mpirun reads itself. */
static int env_sets(const char *name) { return getenv(name) && getenv(name)[0]; }

typedef struct launch_opts {
    int num, tpp, dry, machines, machine_rank;
    int override_np;  /* --num_processes differs from the YAML's num_processes */
    int slurm_nodes;  /* nodes of the Slurm allocation launch runs in (no hosts given); 0: none */
    const char *config, *hostfile, *hosts;
    char yaml_hostfile[512]; /* mpirun_config.mpirun_hostfile, when hostfile points here */
} launch_opts;

/* Settle the hosts and the counts from the flags and the YAML; contradictions are
 * refused naming both sides. */
static int settle(launch_opts *o, host_set *hs, zt_err *err)
{
    zt_accel_config ac;
    zt_accel_config_init(&ac);
    int rc = ZT_OK;
    if (o->config && (rc = zt_accel_config_read(o->config, &ac, err)))
        return rc;
    if (o->hostfile && o->hosts)
        return zt_fail(err, ZT_EINPUT, "ztrain launch: give --hostfile or --hosts, not both");
    char num_src[600] = "--num_processes", mach_src[600] = "--num_machines";
    if (o->num && ac.num_processes > 0 && o->num != ac.num_processes) {
        /* the flag wins, as with accelerate launch; the command is told to run on
         * the ranks it gets rather than refuse the YAML's count */
        fprintf(stderr, "ztrain launch: --num_processes %d overrides num_processes %d of %s\n", o->num,
                ac.num_processes, o->config);
        o->override_np = 1;
    }
    if (!o->num && ac.num_processes > 0) {
        o->num = ac.num_processes;
        snprintf(num_src, sizeof num_src, "num_processes in %s", o->config);
    }
    if (!o->machines && ac.num_machines > 0) {
        o->machines = ac.num_machines;
        snprintf(mach_src, sizeof mach_src, "num_machines in %s", o->config);
    }
    if (o->machine_rank < 0 && ac.machine_rank >= 0)
        o->machine_rank = ac.machine_rank;
    if (o->machine_rank > 0)
        return zt_fail(err, ZT_EINPUT, "ztrain launch: machine_rank %d: with MPI, launch runs once, on the first "
                       "machine (machine_rank 0), and mpirun starts the ranks of every machine itself; run it "
                       "there only", o->machine_rank);
    if (!o->hostfile && !o->hosts && ac.mpirun_hostfile[0]) {
        snprintf(o->yaml_hostfile, sizeof o->yaml_hostfile, "%s", ac.mpirun_hostfile);
        o->hostfile = o->yaml_hostfile;
    }
    if (o->hostfile)
        rc = read_hostfile(o->hostfile, hs, err);
    else if (o->hosts)
        rc = parse_host_list(o->hosts, hs, err);
    if (rc)
        return rc;
    /* inside a Slurm allocation mpirun takes the hosts from Slurm itself (Open MPI's
     * ras/plm slurm components); launch only needs their number, for the binding */
    const char *nodes_env = getenv("SLURM_JOB_NUM_NODES"), *tasks_env = getenv("SLURM_NTASKS");
    if (!hs->n && nodes_env && atoi(nodes_env) >= 1) {
        o->slurm_nodes = atoi(nodes_env);
        if (o->machines > 0 && o->machines != o->slurm_nodes)
            return zt_fail(err, ZT_EINPUT, "ztrain launch: %s is %d, but the Slurm allocation has %d nodes "
                           "(SLURM_JOB_NUM_NODES)", mach_src, o->machines, o->slurm_nodes);
        if (!o->num && tasks_env && atoi(tasks_env) >= 1)
            o->num = atoi(tasks_env);
    }
    if (!hs->n && !o->slurm_nodes && o->machines > 1)
        return zt_fail(err, ZT_EINPUT, "ztrain launch: %s is %d, but no hosts were given (--hostfile, --hosts or "
                       "mpirun_config.mpirun_hostfile) and this is not a Slurm allocation (docs/multinode.md)",
                       mach_src, o->machines);
    if (hs->n && o->machines > 0 && o->machines != hs->n)
        return zt_fail(err, ZT_EINPUT, "ztrain launch: %s is %d, but %s lists %d host%s", mach_src, o->machines,
                       hs->source, hs->n, hs->n == 1 ? "" : "s");
    long slots = 0;
    int known = 1;
    for (int i = 0; i < hs->n; i++) {
        slots += hs->hosts[i].slots;
        known &= hs->hosts[i].slots > 0;
    }
    if (hs->n && known && o->num && o->num != slots)
        return zt_fail(err, ZT_EINPUT, "ztrain launch: %s is %d, but %s has %ld slots", num_src, o->num,
                       hs->source, slots);
    if (hs->n && !o->num && !known)
        return zt_fail(err, ZT_EINPUT, "ztrain launch: %s does not give every host's slots=N; give them, or "
                       "--num_processes", hs->source);
    if (!o->num)
        o->num = hs->n ? (int)slots : 1;
    if (hs->n && o->num % hs->n != 0)
        return zt_fail(err, ZT_EINPUT, "ztrain launch: %d processes do not spread evenly over the %d hosts of %s",
                       o->num, hs->n, hs->source);
    if (o->slurm_nodes && o->num % o->slurm_nodes != 0)
        return zt_fail(err, ZT_EINPUT, "ztrain launch: %d processes do not spread evenly over the %d nodes of the "
                       "Slurm allocation (SLURM_JOB_NUM_NODES)", o->num, o->slurm_nodes);
    if (ac.main_process_ip[0] || ac.main_process_port > 0)
        fprintf(stderr, "ztrain launch: main_process_ip %s, main_process_port %d (from %s) are not used: Open "
                "MPI does its own rendezvous from mpirun's machine\n",
                ac.main_process_ip[0] ? ac.main_process_ip : "-", ac.main_process_port, o->config);
    if (ac.mpirun_ccl >= 0)
        fprintf(stderr, "ztrain launch: mpirun_config.mpirun_ccl %d (oneCCL worker threads) has no effect: "
                "ztrain's collectives run on Open MPI\n", ac.mpirun_ccl);
    return ZT_OK;
}

static int build_and_run(const launch_opts *o, const host_set *hs, int argc, char **argv, int split, zt_err *err)
{
    /* binding is per machine: this machine's cores over the ranks each machine holds */
    int machines = hs->n ? hs->n : o->slurm_nodes ? o->slurm_nodes : 1, per_machine = o->num / machines;
    int cores = usable_cores(), tpp = o->tpp;
    if (!tpp)
        tpp = cores / per_machine > 0 ? cores / per_machine : 1;

    char self[4096];
    ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
    if (len <= 0)
        return zt_fail(err, ZT_EFAIL, "cannot find the ztrain binary (/proc/self/exe)");
    self[len] = '\0';

    char np[16], tp[16], pe[32], hostlist[8192] = "";
    snprintf(np, sizeof np, "%d", o->num);
    snprintf(tp, sizeof tp, "%d", tpp);
    snprintf(pe, sizeof pe, "slot:PE=%d", tpp);
    for (int i = 0; o->hosts && i < hs->n; i++) {
        size_t at = strlen(hostlist);
        snprintf(hostlist + at, sizeof hostlist - at, "%s%s:%d", i ? "," : "", hs->hosts[i].name, hs->hosts[i].slots);
    }
    size_t cap = (size_t)argc + 32;
    char **args = zt_alloc(ZT_MEM_OTHER, cap * sizeof *args);
    if (!args)
        return zt_fail(err, ZT_EFAIL, "out of memory");
    int n = 0;
    args[n++] = "mpirun";
    args[n++] = "-np";
    args[n++] = np;
    if (o->hostfile) {
        args[n++] = "--hostfile";
        args[n++] = (char *)o->hostfile;
    } else if (o->hosts) {
        args[n++] = "--host";
        args[n++] = hostlist;
    }
    if (geteuid() == 0)
        args[n++] = "--allow-run-as-root";
    /* the user's own mapping or binding (OMPI_MCA_*) replaces ours */
    int fits = (long)per_machine * tpp <= cores;
    if (!env_sets("OMPI_MCA_rmaps_base_mapping_policy") && !env_sets("OMPI_MCA_hwloc_base_binding_policy")) {
        if (fits) {
            args[n++] = "--map-by";
            args[n++] = pe;
            args[n++] = "--bind-to";
            args[n++] = "core";
        } else {
            args[n++] = "--bind-to";
            args[n++] = "none";
        }
    }
    if (!fits && !env_sets("OMPI_MCA_rmaps_base_oversubscribe"))
        args[n++] = "--oversubscribe";
    args[n++] = self;
    args[n++] = argv[split];
    int has_threads = 0;
    for (int i = split + 1; i < argc; i++)
        has_threads |= !strncmp(argv[i], "--threads", 9) && (argv[i][9] == '\0' || argv[i][9] == '=');
    if (o->config) {
        args[n++] = "--config_file";
        args[n++] = (char *)o->config;
    }
    if (!has_threads) {
        args[n++] = "--threads";
        args[n++] = tp;
    }
    if (o->override_np && !strcmp(argv[split], "train"))
        args[n++] = "--ignore_num_processes";
    for (int i = split + 1; i < argc; i++)
        args[n++] = argv[i];
    args[n] = NULL;
    if (o->dry) {
        /* the command line on stdout; the OMPI_MCA_* settings mpirun will read itself, on stderr */
        for (char **e = environ; *e; e++)
            if (!strncmp(*e, "OMPI_MCA_", 9))
                fprintf(stderr, "ztrain launch: from the environment: %s\n", *e);
        for (int i = 0; i < n; i++)
            printf("%s%s", i ? " " : "", args[i]);
        printf("\n");
        zt_free(ZT_MEM_OTHER, args, cap * sizeof *args);
        return ZT_OK;
    }
    /* launch_run.c: relays SIGINT, SIGTERM, SIGHUP; train takes a SIGTERM or SIGINT as a clean stop */
    int rc = zt_launch_run(args, o->num, !strcmp(argv[split], "train"), err);
    zt_free(ZT_MEM_OTHER, args, cap * sizeof *args);
    return rc;
}

/* Accelerate's default config, which `accelerate launch` reads when no
 * --config_file is given: $HF_HOME/accelerate/default_config.yaml, HF_HOME
 * defaulting to $XDG_CACHE_HOME/huggingface, and that to ~/.cache/huggingface.
 * 1 and the path in buf when that file exists. */
static int default_config(char *buf, size_t cap)
{
    const char *hf = getenv("HF_HOME"), *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    int n;
    if (hf && *hf)
        n = snprintf(buf, cap, "%s/accelerate/default_config.yaml", hf);
    else if (xdg && *xdg)
        n = snprintf(buf, cap, "%s/huggingface/accelerate/default_config.yaml", xdg);
    else if (home && *home)
        n = snprintf(buf, cap, "%s/.cache/huggingface/accelerate/default_config.yaml", home);
    else
        return 0;
    return n > 0 && (size_t)n < cap && access(buf, F_OK) == 0;
}

int zt_cmd_launch(int argc, char **argv, zt_err *err)
{
    /* launch's own flags come before the command name (--help and -h among them:
     * after the command they are the command's) */
    int split = 0;
    while (split < argc && (!strncmp(argv[split], "--", 2) || !strcmp(argv[split], "-h"))) {
        int is_bool = !strcmp(argv[split], "--dry_run") || !strcmp(argv[split], "--help") ||
                      !strcmp(argv[split], "-h");
        split += strchr(argv[split], '=') || is_bool ? 1 : 2;
    }
    launch_opts o = {.machine_rank = -1};
    zt_flag flags[] = {
        {"num_processes", ZT_FLAG_INT, &o.num, "ranks to start, on all machines together (default: the config's "
         "num_processes, else the hosts' slots, else 1)", 1, 1 << 16, 0},
        {"hostfile", ZT_FLAG_STR, &o.hostfile, "Open MPI hostfile, `host slots=N` per line (default: the config's "
         "mpirun_config.mpirun_hostfile)", 1, 0, 0},
        {"hosts", ZT_FLAG_STR, &o.hosts, "host list h1:2,h2:2 (host:slots)", 1, 0, 0},
        {"num_machines", ZT_FLAG_INT, &o.machines, "machines, checked against the hosts (default: the config's)",
         1, 1 << 16, 0},
        {"machine_rank", ZT_FLAG_INT, &o.machine_rank, "this machine's rank: 0 (mpirun starts the others; default: the config's machine_rank, else 0)", 0,
         1 << 16, 0},
        {"threads_per_process", ZT_FLAG_INT, &o.tpp, "threads per rank (default: this machine's cores / its "
         "ranks, at least 1)", 1, 4096, 0},
        {"config_file", ZT_FLAG_STR, &o.config, "Accelerate config YAML, passed on to the command (default: "
         "Accelerate's default config, $HF_HOME/accelerate/default_config.yaml, when it exists)", 1, 0, 0},
        {"dry_run", ZT_FLAG_BOOL, &o.dry, "print the mpirun command instead of running it", 1, 0, 0},
    };
    const int nflags = (int)(sizeof flags / sizeof flags[0]);
    if (zt_flags_wants_help(split < argc ? split : argc, argv)) {
        zt_flags_usage(flags, nflags, "usage: ztrain launch [--num_processes N] [--hostfile F | --hosts h1:n,h2:n] "
                       "[--config_file F] <command> [args]");
        return ZT_OK;
    }
    if (split > argc)
        split = argc;
    int rc = zt_flags_parse(flags, nflags, split, argv, "ztrain launch", err);
    if (rc)
        return rc;
    if (split >= argc)
        return zt_fail(err, ZT_EINPUT, "ztrain launch: no command given (e.g. ztrain launch --num_processes 2 train ...)");
    char default_cfg[4096];
    int cmd_has_config = 0; /* `launch train --config_file F`: the command's own file wins */
    for (int i = split + 1; i < argc; i++)
        cmd_has_config |= !strncmp(argv[i], "--config_file", 13) && (argv[i][13] == '\0' || argv[i][13] == '=');
    if (!o.config && !cmd_has_config && default_config(default_cfg, sizeof default_cfg)) {
        o.config = default_cfg;
        fprintf(stderr, "ztrain launch: using Accelerate's default config %s (no --config_file given)\n", o.config);
    }
    host_set hs = {.hosts = zt_alloc(ZT_MEM_OTHER, MAX_HOSTS * sizeof(host))};
    if (!hs.hosts)
        return zt_fail(err, ZT_EFAIL, "out of memory");
    rc = settle(&o, &hs, err);
    if (rc == ZT_OK && hs.n)
        fprintf(stderr, "ztrain launch: %d rank%s on %d machine%s x %d (%s)\n", o.num, o.num == 1 ? "" : "s", hs.n, hs.n == 1 ? "" : "s",
                o.num / hs.n, hs.source);
    if (rc == ZT_OK)
        rc = build_and_run(&o, &hs, argc, argv, split, err);
    zt_free(ZT_MEM_OTHER, hs.hosts, MAX_HOSTS * sizeof(host));
    return rc;
}
