/* preempt.h — a clean stop on SIGTERM and SIGINT (preemption, Slurm's time
 * limit, Ctrl-C).
 *
 * The first signal only records itself; the trainer asks at each step boundary,
 * all ranks agree on the answer (a max over ranks, so a signal that reached one
 * rank stops them all after the same step), and the run saves a checkpoint and
 * ends.  A second signal ends the process at once (exit 128 + signal), for when
 * the clean stop takes too long. */
#ifndef ZT_PREEMPT_H
#define ZT_PREEMPT_H

/* Install the handlers (saving the previous ones) and clear any request. */
void zt_preempt_install(void);
/* Put the previous handlers back. */
void zt_preempt_restore(void);
/* The signal received (SIGTERM or SIGINT), or 0. */
int zt_preempt_requested(void);

#endif
