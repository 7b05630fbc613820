/* preempt.h — a clean stop on SIGTERM, SIGINT and SIGUSR2 (preemption, Slurm's
 * time limit, Ctrl-C, and `ztrain launch`'s stop request).
 *
 * The first signal only records itself; the trainer asks at each step boundary,
 * all ranks agree on the answer (a max over ranks, so a signal that reached one
 * rank stops them all after the same step), and the run saves a checkpoint and
 * ends.  A second signal ends the process at once (exit 128 + signal), for when
 * the clean stop takes too long.
 *
 * SIGUSR2 is there for mpirun: Open MPI answers a SIGTERM to mpirun by killing
 * the ranks a second later, but forwards SIGUSR2 to every rank as it is, so
 * `ztrain launch` turns a SIGTERM or SIGINT into a SIGUSR2 (cli/launch_run.c),
 * and a user of plain mpirun can send one (`kill -USR2 MPIRUN_PID`).  A rank
 * stopped by it exits 0, as for SIGTERM. */
#ifndef ZT_PREEMPT_H
#define ZT_PREEMPT_H

/* Install the handlers (saving the previous ones) and clear any request.
 * Calls nest: an install inside another keeps the handlers and the request
 * (main installs them before MPI starts, so a signal in the start-up is kept;
 * the trainer installs them again), and only the outermost restore puts the
 * previous handlers back. */
void zt_preempt_install(void);
void zt_preempt_restore(void);
/* The signal received (SIGTERM, SIGINT or SIGUSR2), or 0. */
int zt_preempt_requested(void);

#endif
