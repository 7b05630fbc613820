/* launch_run.c — `ztrain launch` runs mpirun as its child and forwards the
 * signals a user or a scheduler sends to the launcher.
 *
 * With exec, a SIGINT, SIGTERM or SIGHUP to the launcher reached mpirun alone,
 * which ended the job after about 3 s with exit 1 and Open MPI's words only.
 * Here the launcher forwards the signal to mpirun (which forwards it to every
 * rank and ends the job), waits for it, and says what happened; it exits with
 * 128 + the signal, as a shell reports a job ended by it.  Without a signal the
 * launcher's exit is mpirun's.  (What a rank does on SIGTERM -- a checkpoint --
 * belongs to the trainer.) */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "commands.h"

static const int forwarded[] = {SIGINT, SIGTERM, SIGHUP};
#define NFORWARDED (int)(sizeof forwarded / sizeof forwarded[0])
static volatile sig_atomic_t g_signal;
static volatile pid_t g_child;
static int g_exit = -1;

int zt_launch_exit_code(void) { return g_exit; }

static void forward(int sig)
{
    g_signal = sig;
    if (g_child > 0)
        kill(g_child, sig); /* async-signal-safe */
}

static const char *signal_name(int sig)
{
    return sig == SIGINT ? "SIGINT" : sig == SIGTERM ? "SIGTERM" : sig == SIGHUP ? "SIGHUP" : "a signal";
}

int zt_launch_run(char **args, int nranks, zt_err *err)
{
    sigset_t block, old;
    sigemptyset(&block);
    for (int i = 0; i < NFORWARDED; i++)
        sigaddset(&block, forwarded[i]);
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
        /* mpirun gets the default dispositions (a background shell job inherits
         * SIGINT ignored) and the caller's mask */
        for (int i = 0; i < NFORWARDED; i++)
            signal(forwarded[i], SIG_DFL);
        sigprocmask(SIG_SETMASK, &old, NULL);
        execvp("mpirun", args);
        fprintf(stderr, "ztrain: error: cannot run mpirun (is openmpi-bin installed?): %s\n", strerror(errno));
        _exit(127);
    }
    g_child = pid;
    struct sigaction sa, saved[NFORWARDED];
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = forward;
    sigemptyset(&sa.sa_mask);
    for (int i = 0; i < NFORWARDED; i++)
        sigaction(forwarded[i], &sa, &saved[i]);
    sigprocmask(SIG_SETMASK, &old, NULL);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        continue;
    for (int i = 0; i < NFORWARDED; i++)
        sigaction(forwarded[i], &saved[i], NULL);
    g_child = 0;
    int sig = g_signal;
    if (sig) {
        char how[64];
        if (WIFEXITED(status))
            snprintf(how, sizeof how, "mpirun exited with %d", WEXITSTATUS(status));
        else
            snprintf(how, sizeof how, "mpirun was ended by signal %d", WTERMSIG(status));
        char ranks[32] = "ranks";
        if (nranks > 0)
            snprintf(ranks, sizeof ranks, "%d rank%s", nranks, nranks == 1 ? "" : "s");
        fprintf(stderr, "ztrain launch: %s received; forwarded to mpirun (pid %d), which forwarded it to the "
                "job's %s; the job has ended (%s)\n", signal_name(sig), (int)pid, ranks, how);
        g_exit = 128 + sig;
        return zt_fail(err, ZT_EFAIL, "%s", ""); /* said above */
    }
    g_exit = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    return g_exit == 0 ? ZT_OK : zt_fail(err, ZT_EFAIL, "%s", ""); /* mpirun and the ranks said why */
}
