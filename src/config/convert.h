/* convert.h — the concept guide as a tool: write the Accelerate config of the
 * other backend that runs the same plan (contract §6, `ztrain config convert`).
 *
 *   FSDP NO_SHARD / SHARD_GRAD_OP / FULL_SHARD  <->  DeepSpeed ZeRO 0 / 2 / 3
 *   FSDP aligned (bf16 load, mixed precision)    <->  DeepSpeed bf16 (fp32 master)
 * Some plans have no counterpart and are refused with the reason: ZeRO-1 (FSDP
 * cannot shard only the optimizer), hybrid sharding (ZeRO++ hpZ is not part of
 * Accelerate's DeepSpeed keys), and FSDP's memory-constrained mode (DeepSpeed
 * always keeps an fp32 master). */
#ifndef ZT_CONVERT_H
#define ZT_CONVERT_H

#include <stdio.h>

#include "settings.h"

/* Write to f the YAML for face `to` (ZT_FACE_FSDP or ZT_FACE_DEEPSPEED) running
 * plan p, resolved from settings s.  notes (may be NULL) receives advice lines. */
int zt_config_convert(FILE *f, FILE *notes, const zt_settings *s, const zt_plan *p, zt_face to,
                      zt_err *err);

#endif
