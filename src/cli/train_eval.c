/* train_eval.c — `train`'s evaluation flags (see train_eval.h). */
#include "train_eval.h"

#include <string.h>
#include <strings.h>

#include "commands.h"

int zt_cli_eval_apply(const zt_cli_eval *e, zt_train_args *a, zt_err *err)
{
    if (!e->data && e->steps > 0)
        return zt_fail(err, ZT_EINPUT, "--eval_steps %ld needs --eval_data FILE (the held-out tokens to evaluate)",
                       e->steps);
    a->eval_data_path = e->data;
    a->eval_steps = e->steps;
    a->eval_batch_size = e->batch;
    return ZT_OK;
}

int zt_cli_eval_tokenize(zt_cli_eval *e, zt_train_args *a, const char *tokenizer, const zt_text_opts *o,
                         int model_vocab, zt_comm *comm, int rank, int threads, zt_err *err)
{
    if (!tokenizer || !a->eval_data_path || !zt_cli_is_text(a->eval_data_path))
        return ZT_OK;
    int rc = zt_cli_text_data(&a->eval_data_path, o, tokenizer, model_vocab, comm, rank, threads,
                              e->tokenized, sizeof e->tokenized, e->mask, err);
    if (rc)
        return zt_wrap(err, "--eval_data: ");
    a->eval_mask_path = e->mask[0] ? e->mask : NULL;
    return ZT_OK;
}
