/* launch_run.c — `ztrain launch` runs mpirun as its child and relays the
 * signals a user or a scheduler sends to the launcher.
 *
 * Open MPI's mpirun answers a SIGTERM or SIGINT by sending SIGTERM to every
 * rank and SIGKILL one second later (odls_base_sigkill_timeout), which is too
 * soon for a rank to finish its step and write a checkpoint.  It forwards
 * SIGUSR2 untouched, though (ess_base_forward_signals: SIGUSR1, SIGUSR2, ...).
 * So for `launch train`, the first SIGTERM or SIGINT becomes a SIGUSR2 to
 * mpirun, which every rank takes as a stop request (train/preempt.h): the job
 * finishes the step, saves a checkpoint, says where, and the launcher exits 0
 * (SIGTERM) or 130 (SIGINT) when the ranks did.  A second SIGTERM or SIGINT is
 * forwarded as it is, and mpirun ends the job at once.  SIGHUP, and every
 * signal for a command other than train, is forwarded as it is; the launcher
 * then exits 128 + the signal, as a shell reports a job ended by it.  Without a
 * signal the launcher's exit is mpirun's.
 *
 * mpirun runs in a process group of its own, so a Ctrl-C at the terminal
 * (SIGINT to the whole foreground group) reaches the launcher alone and takes
 * the path above, instead of reaching mpirun directly.  (Open MPI does not read
 * a terminal's stdin from a background group, so mpirun is not stopped by
 * SIGTTIN there.) */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "commands.h"

static const int relayed[] = {SIGINT, SIGTERM, SIGHUP};
#define NRELAYED (int)(sizeof relayed / sizeof relayed[0])
/* the ranks' stop request: forwarded by mpirun, and not the flight recorder's SIGUSR1 */
#define STOP_REQUEST SIGUSR2

static volatile sig_atomic_t g_first, g_second; /* the signals received: first, and one after it */
static volatile pid_t g_child;
static int g_graceful; /* the command stops cleanly on STOP_REQUEST */
static int g_exit = -1;

int zt_launch_exit_code(void) { return g_exit; }

static int is_stop(int sig) { return sig == SIGTERM || sig == SIGINT; }

/* Only async-signal-safe calls: kill, write. */
static void relay(int sig)
{
    static const char asked[] = "ztrain launch: stop requested; the ranks finish the step and save a checkpoint "
                                "(a second SIGTERM or SIGINT ends the job at once)\n";
    if (!g_first) {
        g_first = sig;
        if (g_graceful && is_stop(sig)) {
            ssize_t w = write(STDERR_FILENO, asked, sizeof asked - 1);
            (void)w;
            sig = STOP_REQUEST;
        }
    } else if (!g_second) {
        g_second = sig;
    }
    if (g_child > 0)
        kill(g_child, sig);
}

static const char *signal_name(int sig)
{
    return sig == SIGINT ? "SIGINT" : sig == SIGTERM ? "SIGTERM" : sig == SIGHUP ? "SIGHUP" : "a signal";
}

/* What the launcher says and returns once mpirun has ended after a signal. */
static int report_signal(pid_t pid, int status, int nranks, zt_err *err)
{
    int first = g_first, second = g_second;
    char how[64], ranks[32] = "ranks";
    if (WIFEXITED(status))
        snprintf(how, sizeof how, "mpirun exited with %d", WEXITSTATUS(status));
    else
        snprintf(how, sizeof how, "mpirun was ended by signal %d", WTERMSIG(status));
    if (nranks > 0)
        snprintf(ranks, sizeof ranks, "%d rank%s", nranks, nranks == 1 ? "" : "s");
    if (g_graceful && is_stop(first) && !second) {
        if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
            fprintf(stderr, "ztrain launch: %s received; the job's %s stopped after a step (SIGUSR2 through mpirun, "
                    "pid %d)\n", signal_name(first), ranks, (int)pid);
            g_exit = first == SIGINT ? 130 : 0;
            return first == SIGINT ? zt_fail(err, ZT_EFAIL, "%s", "") : ZT_OK;
        }
        fprintf(stderr, "ztrain launch: %s received; asked the job's %s to stop (SIGUSR2 through mpirun, pid %d), "
                "but %s\n", signal_name(first), ranks, (int)pid, how);
        g_exit = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        return zt_fail(err, ZT_EFAIL, "%s", "");
    }
    int sig = second ? second : first;
    fprintf(stderr, "ztrain launch: %s%s received; forwarded to mpirun (pid %d), which forwarded it to the job's %s; "
            "the job has ended (%s)\n", second ? "second signal " : "", signal_name(sig), (int)pid, ranks, how);
    g_exit = 128 + sig;
    return zt_fail(err, ZT_EFAIL, "%s", ""); /* said above */
}

int zt_launch_run(char **args, int nranks, int graceful, zt_err *err)
{
    sigset_t block, old;
    sigemptyset(&block);
    for (int i = 0; i < NRELAYED; i++)
        sigaddset(&block, relayed[i]);
    /* blocked until the handlers know the child, so no signal is lost in between */
    sigprocmask(SIG_BLOCK, &block, &old);
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) {
        int e = errno;
        sigprocmask(SIG_SETMASK, &old, NULL);
        return zt_fail(err, ZT_EFAIL, "cannot start mpirun: fork: %s", strerror(e));
    }
    if (pid == 0) {
        /* a group of its own, out of the terminal's reach; the default dispositions
         * (a background shell job inherits SIGINT ignored) and the caller's mask */
        setpgid(0, 0);
        for (int i = 0; i < NRELAYED; i++)
            signal(relayed[i], SIG_DFL);
        sigprocmask(SIG_SETMASK, &old, NULL);
        execvp("mpirun", args);
        fprintf(stderr, "ztrain: error: cannot run mpirun (is openmpi-bin installed?): %s\n", strerror(errno));
        _exit(127);
    }
    setpgid(pid, pid); /* also here: a signal may come before the child has run */
    g_child = pid;
    g_graceful = graceful;
    struct sigaction sa, saved[NRELAYED];
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = relay;
    sigemptyset(&sa.sa_mask);
    for (int i = 0; i < NRELAYED; i++)
        sigaddset(&sa.sa_mask, relayed[i]); /* one handler at a time: first and second stay ordered */
    for (int i = 0; i < NRELAYED; i++)
        sigaction(relayed[i], &sa, &saved[i]);
    sigprocmask(SIG_SETMASK, &old, NULL);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        continue;
    for (int i = 0; i < NRELAYED; i++)
        sigaction(relayed[i], &saved[i], NULL);
    g_child = 0;
    if (g_first)
        return report_signal(pid, status, nranks, err);
    g_exit = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    return g_exit == 0 ? ZT_OK : zt_fail(err, ZT_EFAIL, "%s", ""); /* mpirun and the ranks said why */
}
