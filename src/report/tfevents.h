/* tfevents.h — TensorBoard event files, written by ztrain itself (`train
 * --report_to tensorboard`), so that `tensorboard --logdir OUTPUT_DIR/runs` shows
 * a run as it shows a Trainer's.
 *
 * The file is a sequence of TFRecords, each
 *     uint64 length (little-endian), uint32 masked_crc32c(length bytes),
 *     length bytes of data, uint32 masked_crc32c(data),
 * with masked_crc(x) = ((c >> 15) | (c << 17)) + 0xa282ead8 over CRC-32C
 * (Castagnoli).  Each record's data is a tensorflow.Event protocol buffer,
 * encoded by hand (proto3 wire format, only the fields written here):
 *     Event   { double wall_time = 1; int64 step = 2; string file_version = 3; Summary summary = 5; }
 *     Summary { repeated Value value = 1; }
 *     Value   { string tag = 1; float simple_value = 2; }
 * The first record holds file_version "brain.Event:2", as every writer's does.
 * Records are appended one by one with a single write each (TensorBoard reads a
 * file that grows), so a run that stops early leaves every scalar written before;
 * a write that fails (a full disk, a file size limit) is an error, and the record
 * it cut short is cut off again (core/fs.h zt_write_record), so the file ends with
 * its last whole record. */
#ifndef ZT_TFEVENTS_H
#define ZT_TFEVENTS_H

#include <stddef.h>
#include <stdint.h>

#include "../core/status.h"

typedef struct zt_tfevents {
    int fd; /* -1: closed */
    char path[4096];
} zt_tfevents;

/* CRC-32C of n bytes, and its masked form as TFRecord stores it. */
uint32_t zt_crc32c(const void *data, size_t n);
uint32_t zt_crc32c_masked(const void *data, size_t n);

/* mkdir -p dir and open dir/events.out.tfevents.<seconds>.<host>.<pid>.0 (the
 * name TensorBoard globs for; a special file there is refused, as for every
 * output: zt_open_output), writing the file_version record. */
int zt_tfevents_open(zt_tfevents *w, const char *dir, zt_err *err);
/* One Event with one scalar: tag (e.g. "train/loss") at step, stamped with the time
 * now.  ZT_EFAIL naming the file when it cannot be written whole. */
int zt_tfevents_scalar(zt_tfevents *w, const char *tag, long step, float value, zt_err *err);
void zt_tfevents_close(zt_tfevents *w);

#endif
