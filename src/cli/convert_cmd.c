/* convert_cmd.c — `ztrain convert --from gguf FILE.gguf --output_dir DIR`: a GGUF
 * model (llama.cpp's format) as a Hugging Face directory, the one transformers'
 * GGUF loader builds from the same file: config.json and model.safetensors (the
 * tensors dequantized to fp32, q and k rows in HF's order, then stored in
 * --dtype), tokenizer.json and tokenizer_config.json (with the chat template),
 * generation_config.json.  One tensor is held at a time. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../core/dtype.h"
#include "../core/mem.h"
#include "../io/gguf.h"
#include "../io/hf_carry.h"
#include "../io/hf_model.h"
#include "../text/gguf_tokenizer.h"
#include "commands.h"
#include "flags.h"

#define NFLAGS(a) ((int)(sizeof(a) / sizeof((a)[0])))

typedef struct convert_ctx {
    const zt_gguf *g;
    const zt_llama_config *cfg;
    const zt_layout *lay;
    zt_dtype dtype;
} convert_ctx;

/* Parameter i, dequantized to fp32 and rounded (to nearest even) to the dtype. */
static int fill_param(void *vctx, int i, void *dst, zt_err *err)
{
    const convert_ctx *c = vctx;
    const zt_param *p = &c->lay->params[i];
    int64_t rows = p->shape[0], cols = p->ndim == 2 ? p->shape[1] : 0;
    size_t n = (size_t)rows * (size_t)(cols ? cols : 1);
    if (c->dtype == ZT_F32)
        return zt_gguf_read_param(c->g, c->cfg, p->name, rows, cols, dst, err);
    float *tmp = zt_alloc(ZT_MEM_OTHER, n * sizeof(float));
    if (!tmp)
        return zt_fail(err, ZT_EFAIL, "out of memory for %s", p->name);
    int rc = zt_gguf_read_param(c->g, c->cfg, p->name, rows, cols, tmp, err);
    uint16_t *out = dst;
    for (size_t k = 0; rc == ZT_OK && k < n; k++)
        out[k] = c->dtype == ZT_BF16 ? zt_f32_to_bf16(tmp[k]) : zt_f32_to_f16(tmp[k]);
    zt_free(ZT_MEM_OTHER, tmp, n * sizeof(float));
    return rc;
}

/* The weights and config.json, then the tokenizer's files and the special token
 * ids in config.json. */
static int convert_gguf(const char *file, const char *out, zt_dtype dtype, size_t max_shard, zt_err *err)
{
    zt_gguf *g = NULL;
    zt_llama_config cfg;
    zt_layout lay = {0};
    int rc = zt_gguf_open(file, &g, err), have_lay = 0;
    if (rc == ZT_OK)
        rc = zt_gguf_config(g, &cfg, err);
    if (rc == ZT_OK && (rc = zt_layout_build(&lay, &cfg, ZT_WRAP_TRANSFORMER, 0, 1, err)) == ZT_OK)
        have_lay = 1;
    if (rc == ZT_OK) {
        convert_ctx c = {g, &cfg, &lay, dtype};
        rc = zt_hf_save_streamed(out, &cfg, &lay, dtype, max_shard, fill_param, &c, err);
    }
    zt_hf_token_ids ids = ZT_HF_TOKEN_IDS_NONE;
    if (rc == ZT_OK)
        rc = zt_gguf_tokenizer_save(g, out, &ids.bos, &ids.eos, &ids.pad, err);
    if (rc == ZT_OK)
        rc = zt_hf_carry(out, NULL, NULL, NULL, &ids, err);
    if (rc == ZT_OK)
        printf("converted %s (GGUF v%u, %d tensors) into %s: %d layers, hidden %d, vocab %d, %s\n", file,
               zt_gguf_version(g), zt_gguf_tensor_count(g), out, cfg.num_hidden_layers, cfg.hidden_size,
               cfg.vocab_size, zt_dtype_name(dtype));
    if (have_lay)
        zt_layout_free(&lay);
    zt_gguf_close(g);
    return rc;
}

int zt_cmd_convert(int argc, char **argv, zt_err *err)
{
    const char *from = NULL, *out = NULL, *dtype_name = "fp32", *max_shard = "5GB";
    zt_flag flags[] = {
        {"from", ZT_FLAG_STR, &from, "the input's format: gguf (required)", 1, 0, 0},
        {"output_dir", ZT_FLAG_STR, &out, "the Hugging Face directory to write (required)", 1, 0, 0},
        {"dtype", ZT_FLAG_STR, &dtype_name, "fp32 | bf16 | fp16: the saved weights' dtype", 1, 0, 0},
        {"max_shard_size", ZT_FLAG_STR, &max_shard, "split the weights into shards above this size, e.g. 200MB", 1, 0, 0},
    };
    const char *usage = "usage: ztrain convert --from gguf FILE.gguf --output_dir DIR [--dtype fp32|bf16|fp16]";
    if (zt_flags_wants_help(argc, argv)) {
        zt_flags_usage(flags, NFLAGS(flags), usage);
        return ZT_OK;
    }
    const char *file = NULL;
    char *rest[64];
    int nrest = 0;
    for (int i = 0; i < argc; i++) { /* the one positional argument, anywhere among the flags */
        int is_flag = !strncmp(argv[i], "--", 2);
        if (!is_flag && (i == 0 || strncmp(argv[i - 1], "--", 2) || strchr(argv[i - 1], '='))) {
            if (file)
                return zt_fail(err, ZT_EINPUT, "convert: one input file expected, got '%s' and '%s'\n%s", file,
                               argv[i], usage);
            file = argv[i];
        } else if (nrest < 64) {
            rest[nrest++] = argv[i];
        } else {
            return zt_fail(err, ZT_EINPUT, "convert: too many arguments\n%s", usage);
        }
    }
    int rc = zt_flags_parse(flags, NFLAGS(flags), nrest, rest, "ztrain convert", err);
    if (rc)
        return rc;
    if (!from || strcmp(from, "gguf"))
        return zt_fail(err, ZT_EINPUT, "--from: expected gguf (the only format convert reads), got '%s'\n%s",
                       from ? from : "nothing", usage);
    if (!file || !out)
        return zt_fail(err, ZT_EINPUT, "convert: %s missing\n%s", !file ? "the input FILE.gguf is" : "--output_dir is",
                       usage);
    zt_dtype dtype;
    if (zt_dtype_parse(dtype_name, &dtype))
        return zt_fail(err, ZT_EINPUT, "--dtype: expected fp32, bf16 or fp16, got '%s'", dtype_name);
    size_t max_shard_bytes = 0;
    if ((rc = zt_cli_parse_size("max_shard_size", max_shard, &max_shard_bytes, err)))
        return rc;
    return convert_gguf(file, out, dtype, max_shard_bytes, err);
}

/* The directory zt_cli_gguf_tokenizer_dir made, removed when the process exits
 * (every return path of every command, without one cleanup call each). */
static char made_dir[64];

static void remove_made_dir(void)
{
    static const char *const files[] = {"tokenizer.json", "tokenizer_config.json", "generation_config.json"};
    if (!made_dir[0])
        return;
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        char path[128];
        snprintf(path, sizeof path, "%s/%s", made_dir, files[i]);
        unlink(path);
    }
    rmdir(made_dir);
    made_dir[0] = 0;
}

int zt_cli_gguf_tokenizer_dir(const char *model, char *dir, size_t cap, zt_err *err)
{
    dir[0] = 0;
    if (!model || !zt_gguf_is_file(model))
        return ZT_OK;
    if (!made_dir[0]) {
        snprintf(made_dir, sizeof made_dir, "/tmp/ztrain-gguf-tokenizer-XXXXXX");
        if (!mkdtemp(made_dir)) {
            made_dir[0] = 0;
            return zt_fail(err, ZT_EFAIL, "cannot create a temporary directory for %s's tokenizer", model);
        }
        atexit(remove_made_dir);
        zt_gguf *g = NULL;
        int bos, eos, pad, rc = zt_gguf_open(model, &g, err);
        if (rc == ZT_OK)
            rc = zt_gguf_tokenizer_save(g, made_dir, &bos, &eos, &pad, err);
        zt_gguf_close(g);
        if (rc) {
            remove_made_dir();
            return rc;
        }
    }
    if (snprintf(dir, cap, "%s", made_dir) >= (int)cap)
        return zt_fail(err, ZT_EFAIL, "path too long");
    return ZT_OK;
}
