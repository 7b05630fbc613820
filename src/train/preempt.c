/* preempt.c — SIGTERM / SIGINT / SIGUSR2 as a request to stop (see preempt.h). */
#include "preempt.h"

#include <signal.h>
#include <string.h>
#include <unistd.h>

static const int stop_signals[] = {SIGTERM, SIGINT, SIGUSR2};
#define NSTOP (int)(sizeof stop_signals / sizeof stop_signals[0])
static volatile sig_atomic_t requested;
static struct sigaction old_actions[NSTOP];
static int depth; /* nested installs */

static void on_signal(int sig)
{
    if (requested) {
        /* the second signal: no clean-up, no save; only async-signal-safe calls */
        static const char msg[] = "ztrain: second signal: stopping at once\n";
        ssize_t w = write(STDERR_FILENO, msg, sizeof msg - 1);
        (void)w;
        _exit(128 + sig);
    }
    requested = sig;
}

void zt_preempt_install(void)
{
    if (depth++ > 0)
        return;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART; /* a signal must not fail a write or a collective with EINTR */
    requested = 0;
    for (int i = 0; i < NSTOP; i++)
        sigaction(stop_signals[i], &sa, &old_actions[i]);
}

void zt_preempt_restore(void)
{
    if (depth == 0 || --depth > 0)
        return;
    for (int i = 0; i < NSTOP; i++)
        sigaction(stop_signals[i], &old_actions[i], NULL);
}

int zt_preempt_requested(void)
{
    return requested;
}
