/* text_data_cli.c — `train`/`eval --data FILE.txt --tokenizer DIR`: the text
 * is tokenized once into the content-addressed cache (src/text/text_data.h)
 * and the run reads the cached ids, so contract §4's data order applies to them. */
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "../comm/comm.h"
#include "../text/text_data.h"
#include "commands.h"

int zt_cli_text_data(const char **data, const char *tok_dir, int model_vocab, zt_comm *comm, int rank, int threads,
                     char *buf, size_t cap, zt_err *err)
{
    const char *dot = strrchr(*data, '.');
    if (!dot || strcasecmp(dot, ".txt"))
        return zt_fail(err, ZT_EINPUT, "--tokenizer: --data %s must be a .txt file (ids in .npy/.bin are already tokens)",
                       *data);
    char cache[4096];
    int rc = zt_text_cache_dir(cache, sizeof cache, err), hit = 0, vocab = 0;
    /* rank 0 fills the cache first; the others then find it (or, on another
     * machine with its own cache, tokenize for themselves: same ids) */
    if (!rc && rank == 0)
        rc = zt_text_cached_tokens(*data, tok_dir, cache, threads, buf, cap, &hit, &vocab, err);
    if (comm && zt_comm_max_int(comm, rc) != ZT_OK && rc == ZT_OK)
        return zt_fail(err, ZT_EINPUT, "rank 0 could not tokenize %s (its error is printed above)", *data);
    if (!rc && rank != 0)
        rc = zt_text_cached_tokens(*data, tok_dir, cache, threads, buf, cap, &hit, &vocab, err);
    if (rc)
        return rc;
    if (vocab > model_vocab)
        return zt_fail(err, ZT_EINPUT, "--tokenizer %s: its vocabulary has %d tokens, more than the model's vocab_size %d",
                       tok_dir, vocab, model_vocab);
    if (rank == 0)
        printf("data: %s tokenized with %s (%d tokens in the vocabulary)%s: %s\n", *data, tok_dir, vocab,
               hit ? ", from the cache" : "", buf);
    *data = buf;
    return ZT_OK;
}
