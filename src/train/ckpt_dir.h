/* ckpt_dir.h — the output directory's side of checkpoints: the checkpoint-N entries
 * (their numbers, newest first), the litter an interrupted save leaves, putting a
 * finished checkpoint in place atomically, and rotating old ones out.  What is
 * inside a checkpoint is checkpoint.c's. */
#ifndef ZT_TRAIN_CKPT_DIR_H
#define ZT_TRAIN_CKPT_DIR_H

#include "../core/status.h"

/* rm -rf, not following symlinks; 0 or -1. */
int zt_ckpt_remove_tree(const char *path);

/* Removes the leftovers of interrupted saves in output_dir (best effort). */
void zt_ckpt_remove_litter(const char *output_dir);

typedef struct zt_ckpt_numbered {
    long n;          /* N of checkpoint-N */
    char name[256];  /* the entry's name */
} zt_ckpt_numbered;

/* The checkpoint-N entries of dir, newest first; *n gets the count.  The caller
 * frees the array with free(); NULL when dir cannot be read or memory ran out. */
zt_ckpt_numbered *zt_ckpt_list(const char *dir, int *n);

/* Puts the finished tmpdir in place as final (output_dir's checkpoint-step),
 * replacing one already there without ever showing a mixed one. */
int zt_ckpt_publish(const char *tmpdir, const char *final, const char *output_dir, long step, zt_err *err);

/* Keeps the newest keep checkpoint-N entries of output_dir, and checkpoint-best
 * (0: none). */
void zt_ckpt_rotate(const char *output_dir, long keep, long best);

#endif
