/* merge_weights.c — `ztrain merge-weights CHECKPOINT_DIR OUTPUT_DIR` (the verb and
 * argument order of `accelerate merge-weights`): a checkpoint's shards become a
 * Hugging Face model directory, one parameter at a time (checkpoint.h,
 * zt_ckpt_merge), so the merge needs about one parameter of memory, not the
 * model.  The peak resident memory is reported. */
#include <stdio.h>
#include <string.h>

#include "../io/hf_carry.h"
#include "../train/checkpoint.h"
#include "commands.h"
#include "flags.h"

#define NFLAGS(a) ((int)(sizeof(a) / sizeof((a)[0])))

/* VmHWM of /proc/self/status: the peak resident set, in KiB (0 if unknown). */
static long peak_rss_kib(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long kib = 0;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "VmHWM: %ld kB", &kib) == 1)
            break;
    if (f)
        fclose(f);
    return kib;
}

int zt_cmd_merge_weights(int argc, char **argv, zt_err *err)
{
    const char *dtype_name = NULL, *max_shard = "5GB";
    zt_flag flags[] = {
        {"dtype", ZT_FLAG_STR, &dtype_name, "fp32 | bf16 (or float32, bfloat16; default: the checkpoint's save dtype, config.json's torch_dtype)", 1, 0, 0},
        {"max_shard_size", ZT_FLAG_STR, &max_shard, "split the weights into shards above this size, e.g. 5GB, 200MB (default 5GB, as HF)", 1, 0, 0},
    };
    const char *usage = "usage: ztrain merge-weights CHECKPOINT_DIR OUTPUT_DIR [--dtype float32|bfloat16] [--max_shard_size SIZE]";
    if (zt_flags_wants_help(argc, argv)) {
        zt_flags_usage(flags, NFLAGS(flags), usage);
        return ZT_OK;
    }
    if (argc < 2 || !strncmp(argv[0], "--", 2) || !strncmp(argv[1], "--", 2))
        return zt_fail(err, ZT_EINPUT, "%s", usage);
    const char *dir = argv[0], *out = argv[1];
    int rc = zt_flags_parse(flags, NFLAGS(flags), argc - 2, argv + 2, "ztrain merge-weights", err);
    if (rc)
        return rc;
    zt_dtype dtype = ZT_F32;
    if (dtype_name && (zt_dtype_parse(dtype_name, &dtype) != 0 || dtype == ZT_F16))
        return zt_fail(err, ZT_EINPUT, "--dtype: expected fp32 or bf16 (float32, bfloat16), got '%s'", dtype_name);
    size_t max_shard_bytes = 0;
    if ((rc = zt_cli_parse_size("max_shard_size", max_shard, &max_shard_bytes, err)))
        return rc;
    if ((rc = zt_ckpt_merge(dir, out, dtype_name ? &dtype : NULL, max_shard_bytes, err)) ||
        (rc = zt_hf_carry_model(out, dir, NULL, err))) /* the config keys, generation config, tokenizer it carried */
        return rc;
    printf("merged %s into %s (peak resident memory %.1f MiB)\n", dir, out, (double)peak_rss_kib() / 1024.0);
    return ZT_OK;
}
