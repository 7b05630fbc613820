/* preempt.c — SIGTERM / SIGINT as a request to stop (see preempt.h). */
#include "preempt.h"

#include <signal.h>
#include <string.h>
#include <unistd.h>

static volatile sig_atomic_t requested;
static struct sigaction old_term, old_int;
static int installed;

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
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART; /* a signal must not fail a write or a collective with EINTR */
    requested = 0;
    sigaction(SIGTERM, &sa, &old_term);
    sigaction(SIGINT, &sa, &old_int);
    installed = 1;
}

void zt_preempt_restore(void)
{
    if (!installed)
        return;
    sigaction(SIGTERM, &old_term, NULL);
    sigaction(SIGINT, &old_int, NULL);
    installed = 0;
}

int zt_preempt_requested(void)
{
    return requested;
}
