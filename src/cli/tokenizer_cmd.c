/* tokenizer_cmd.c — `ztrain tokenizer train`: a byte-level BPE tokenizer from
 * text files, written as Hugging Face files (src/text/bpe_train.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../text/bpe_train.h"
#include "commands.h"
#include "flags.h"

static int tokenizer_train(int argc, char **argv, zt_err *err)
{
    const char *out = NULL;
    int vocab = 0;
    zt_flag flags[] = {
        {"input", ZT_FLAG_STR, NULL, "training text files (UTF-8): --input A.txt B.txt ...", 1, 0, 0},
        {"vocab_size", ZT_FLAG_INT, &vocab, "tokens in the vocabulary, <|endoftext|> and the 256 bytes included (>= 257)", 1, 1 << 24, 0},
        {"output_dir", ZT_FLAG_STR, &out, "where tokenizer.json, tokenizer_config.json, special_tokens_map.json go", 1, 0, 0},
    };
    if (zt_flags_wants_help(argc, argv)) {
        zt_flags_usage(flags, 3, "usage: ztrain tokenizer train --input FILE... --vocab_size N --output_dir DIR\n"
                                 "Byte-level BPE with Llama-3's split pattern; <|endoftext|> (id 0) is bos and eos.");
        return ZT_OK;
    }
    const char **inputs = NULL;
    int n_in = zt_cli_take_list("--input", &argc, argv, &inputs);
    if (n_in < 0)
        return zt_fail(err, ZT_EFAIL, "out of memory");
    int rc = zt_flags_parse(flags + 1, 2, argc, argv, "ztrain tokenizer train", err);
    if (!rc && (n_in == 0 || !vocab || !out))
        rc = zt_fail(err, ZT_EINPUT, "ztrain tokenizer train: --input (one or more files), --vocab_size and --output_dir are required");
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    zt_bpe_train_report rep;
    if (!rc)
        rc = zt_bpe_train(inputs, n_in, vocab, out, &rep, err);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    if (!rc) {
        double dt = (double)(t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) * 1e-9;
        printf("trained a byte-level BPE of %d tokens (%d merges) on %ld bytes, %ld distinct words, in %.2f s; wrote %s\n",
               rep.vocab_size, rep.merges, rep.bytes, rep.words, dt, out);
        if (rep.vocab_size < vocab)
            printf("note: the text ran out of pairs to merge before --vocab_size %d\n", vocab);
    }
    free(inputs);
    return rc;
}

int zt_cmd_tokenizer(int argc, char **argv, zt_err *err)
{
    if (argc >= 1 && !strcmp(argv[0], "train"))
        return tokenizer_train(argc - 1, argv + 1, err);
    if (argc >= 1 && (!strcmp(argv[0], "--help") || !strcmp(argv[0], "-h"))) {
        printf("usage: ztrain tokenizer train --input FILE... --vocab_size N --output_dir DIR\n");
        return ZT_OK;
    }
    return zt_fail(err, ZT_EINPUT, "ztrain tokenizer: expected the subcommand 'train', got '%s'", argc ? argv[0] : "");
}
