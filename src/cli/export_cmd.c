/* export_cmd.c — `ztrain export --format gguf --outtype TYPE MODEL_DIR OUT.gguf`:
 * a Hugging Face model directory as one GGUF file for llama.cpp and Ollama
 * (io/gguf_export.h says what the file holds). */
#include <stdio.h>
#include <string.h>

#include "../io/gguf_export.h"
#include "commands.h"
#include "flags.h"

#define NFLAGS(a) ((int)(sizeof(a) / sizeof((a)[0])))

int zt_cmd_export(int argc, char **argv, zt_err *err)
{
    const char *format = "gguf", *outtype = "f16", *tok_dir = NULL;
    zt_flag flags[] = {
        {"format", ZT_FLAG_STR, &format, "the output format: gguf (llama.cpp, Ollama)", 1, 0, 0},
        {"outtype", ZT_FLAG_STR, &outtype, "type of the weight matrices: f32 | f16 | bf16 | q8_0 (default f16; norms stay f32)", 1, 0, 0},
        {"tokenizer", ZT_FLAG_STR, &tok_dir, "take the tokenizer (tokenizer.json, tokenizer_config.json) from DIR (default: MODEL_DIR's)", 1, 0, 0},
    };
    const char *usage = "usage: ztrain export --format gguf --outtype f32|f16|bf16|q8_0 MODEL_DIR OUT.gguf";
    if (zt_flags_wants_help(argc, argv)) {
        zt_flags_usage(flags, NFLAGS(flags), usage);
        return ZT_OK;
    }
    /* the two paths come after the flags, as in the usage line */
    if (argc < 2 || !strncmp(argv[argc - 2], "--", 2) || !strncmp(argv[argc - 1], "--", 2))
        return zt_fail(err, ZT_EINPUT, "%s", usage);
    const char *model = argv[argc - 2], *out = argv[argc - 1];
    int rc = zt_flags_parse(flags, NFLAGS(flags), argc - 2, argv, "ztrain export", err);
    if (rc)
        return rc;
    if (strcmp(format, "gguf") != 0)
        return zt_fail(err, ZT_EINPUT, "--format: expected gguf, got '%s'", format);
    zt_gguf_outtype type;
    if (zt_gguf_outtype_parse(outtype, &type) != 0)
        return zt_fail(err, ZT_EINPUT, "--outtype: expected f32, f16, bf16 or q8_0, got '%s'", outtype);
    zt_gguf_export_info info;
    if ((rc = zt_gguf_export(model, tok_dir, out, type, &info, err)))
        return rc;
    if (info.f16_fallbacks)
        printf("%d matri%s with rows that are not a multiple of 32 written in f16 (q8_0 needs blocks of 32)\n",
               info.f16_fallbacks, info.f16_fallbacks == 1 ? "x" : "ces");
    printf("wrote %s: %d tensors (%s), %s, %.1f MB\n", out, info.ntensors, outtype,
           info.tokenizer ? "with the tokenizer" : "no tokenizer", (double)info.bytes / 1e6);
    return ZT_OK;
}
