/* text_data_cli.c — `train`/`eval --data FILE --tokenizer DIR` for text (.txt,
 * JSON Lines records: .jsonl, .json, or tables: .parquet, .arrow and
 * save_to_disk directories): the text is tokenized once into the
 * content-addressed cache (src/text/text_data.h) and the run reads the cached
 * ids, so contract §4's data order applies to them; and `train --data A B ...`,
 * several files read as one stream, in the order given. */
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "../comm/comm.h"
#include "../core/fs.h"
#include "../core/mem.h"
#include "../core/sha256.h"
#include "../io/table.h"
#include "../io/tokens.h"
#include "../text/chat_data.h"
#include "../text/records.h"
#include "../text/text_data.h"
#include "../train/trainer.h"
#include "commands.h"

int zt_cli_is_text(const char *path)
{
    const char *dot = strrchr(path, '.');
    return zt_records_is_jsonl(path) || zt_table_is_table(path) || (dot && !strcasecmp(dot, ".txt"));
}

static int g_assistant_only; /* train --assistant_only_loss */

void zt_cli_set_assistant_only(int on) { g_assistant_only = on; }

/* The cached ids of one text file: TRL's conversational records (JSON Lines of
 * messages, or of prompt and completion lists) through the chat template, with
 * their loss mask; any other text as text_data.h makes it. */
static int cached(const char *path, const zt_text_opts *o, const char *tok_dir, const char *cache, int threads,
                  char *buf, size_t cap, int *hit, int *vocab, int *has_mask, zt_err *err)
{
    zt_text_file f = {0};
    char *rows = NULL; /* a table's conversational rows as JSON Lines */
    size_t rows_len = 0, rows_cap = 0;
    int rc = ZT_OK, kind = 0;
    if (zt_records_is_jsonl(path) && !(rc = zt_text_file_open(path, &f, err)))
        kind = zt_chat_data_kind(f.data, f.len);
    else if (zt_table_is_table(path) && !(rc = zt_chat_table_records(path, &rows, &rows_len, &rows_cap, err)))
        kind = rows != NULL;
    if (!rc && g_assistant_only && !kind)
        rc = zt_fail(err, ZT_EINPUT, "--assistant_only_loss: %s is not conversational (records with \"messages\", "
                     "or \"prompt\" and \"completion\" lists of messages), as TRL requires", path);
    if (!rc && !kind)
        rc = zt_text_cached_tokens(path, o, tok_dir, cache, threads, buf, cap, hit, vocab, has_mask, err);
    else if (!rc) {
        *has_mask = 1;
        rc = zt_chat_cached_tokens(path, rows ? rows : f.data, rows ? rows_len : f.len, tok_dir, cache,
                                   g_assistant_only, threads, buf, cap, hit, vocab, err);
    }
    zt_text_file_close(&f);
    zt_free(ZT_MEM_OTHER, rows, rows_cap);
    return rc;
}

int zt_cli_text_data(const char **data, const zt_text_opts *o, const char *tok_dir, int model_vocab, zt_comm *comm,
                     int rank, int threads, char *buf, size_t cap, char *mask_buf, zt_err *err)
{
    if (!zt_cli_is_text(*data))
        return zt_fail(err, ZT_EINPUT, "--tokenizer: --data %s must be a .txt file or JSON Lines records (.jsonl, "
                       ".json) or a table (.parquet, .arrow, a save_to_disk directory) (ids in .npy/.bin are "
                       "already tokens)", *data);
    char cache[4096];
    int rc = zt_text_cache_dir(cache, sizeof cache, err), hit = 0, vocab = 0, has_mask = 0;
    /* rank 0 fills the cache first; the others then find it (or, on another
     * machine with its own cache, tokenize for themselves: same ids) */
    if (!rc && rank == 0)
        rc = cached(*data, o, tok_dir, cache, threads, buf, cap, &hit, &vocab, &has_mask, err);
    if (comm && zt_comm_max_int(comm, rc) != ZT_OK && rc == ZT_OK)
        return zt_fail(err, ZT_EINPUT, "rank 0 could not tokenize %s (its error is printed above)", *data);
    if (!rc && rank != 0)
        rc = cached(*data, o, tok_dir, cache, threads, buf, cap, &hit, &vocab, &has_mask, err);
    if (rc)
        return rc;
    if (has_mask && !mask_buf)
        return zt_fail(err, ZT_EINPUT, "%s: prompt/completion records are not supported here (nothing "
                       "would read their loss mask)", *data);
    if (mask_buf)
        mask_buf[0] = '\0';
    if (has_mask && zt_text_mask_path(buf, mask_buf, cap) != 0)
        return zt_fail(err, ZT_EINPUT, "%s: path too long", buf);
    if (vocab > model_vocab)
        return zt_fail(err, ZT_EINPUT, "--tokenizer %s: its vocabulary has %d tokens, more than the model's vocab_size %d",
                       tok_dir, vocab, model_vocab);
    if (rank == 0)
        printf("data: %s tokenized with %s (%d tokens in the vocabulary)%s: %s%s\n", *data, tok_dir, vocab,
               hit ? ", from the cache" : "", buf,
               has_mask ? "; prompt/completion or conversational records, with their loss mask beside" : "");
    *data = buf;
    return ZT_OK;
}

/* One file's ids: with a tokenizer, text's cached ids (ids files are refused:
 * one rule for every file); without one, the file itself (.txt: its bytes are the
 * tokens), JSON Lines and tables refused. */
static int one_file(const char **path, const zt_text_opts *o, const char *tok_dir, int model_vocab, zt_comm *comm,
                    int rank, int threads, char *buf, size_t cap, char *mask_buf, zt_err *err)
{
    if (tok_dir)
        return zt_cli_text_data(path, o, tok_dir, model_vocab, comm, rank, threads, buf, cap, mask_buf, err);
    if (zt_records_is_jsonl(*path))
        return zt_fail(err, ZT_EINPUT, "--data %s holds text records (JSON Lines): give --tokenizer DIR to tokenize "
                       "them", *path);
    if (zt_table_is_table(*path))
        return zt_fail(err, ZT_EINPUT, "--data %s holds text records (a Parquet or Arrow table): give --tokenizer DIR "
                       "to tokenize them", *path);
    return ZT_OK;
}

/* Load n token files and append them, in order, into one accounted buffer
 * (*all, *total entries): the ids of several files, or their loss masks. */
static int load_joined(const char *const *paths, int n, int32_t **all, size_t *total, zt_err *err)
{
    *all = NULL;
    *total = 0;
    zt_tokens *parts = zt_alloc(ZT_MEM_OTHER, (size_t)n * sizeof *parts);
    if (!parts)
        return zt_fail(err, ZT_EFAIL, "out of memory for %d data files", n);
    memset(parts, 0, (size_t)n * sizeof *parts);
    int rc = ZT_OK;
    for (int i = 0; i < n && rc == ZT_OK; i++)
        if ((rc = zt_tokens_load(paths[i], &parts[i], err)) == ZT_OK)
            *total += parts[i].n;
    if (!rc && !(*all = zt_alloc(ZT_MEM_OTHER, *total * sizeof **all)))
        rc = zt_fail(err, ZT_EFAIL, "out of memory for %zu tokens of %d data files", *total, n);
    for (size_t i = 0, at = 0; !rc && i < (size_t)n; at += parts[i].n, i++)
        memcpy(*all + at, parts[i].ids, parts[i].n * sizeof **all);
    for (int i = 0; i < n; i++)
        zt_tokens_free(&parts[i]);
    zt_free(ZT_MEM_OTHER, parts, (size_t)n * sizeof *parts);
    return rc;
}

/* Write the joined ids (and mask) where missing.  The mask first, so an entry
 * whose ids exist has its mask. */
static int write_joined(const char *path, const int32_t *ids, size_t n, const char *mask_path, const int32_t *mask,
                        zt_err *err)
{
    int rc = ZT_OK;
    if (mask_path && access(mask_path, R_OK) != 0)
        rc = zt_tokens_write_npy(mask_path, mask, n, err);
    if (!rc && access(path, R_OK) != 0)
        rc = zt_tokens_write_npy(path, ids, n, err);
    return rc;
}

/* The concatenation of n token files as one cached .npy, keyed by SHA-256 of
 * its ids: the same files in the same order are written once.  With masks
 * (prompt/completion records, one mask file per ids file) their concatenation
 * is written beside it as X.mask.npy (zt_text_mask_path), and the key covers
 * the mask too, under another tag: the same ids with another prompt/completion
 * split are another entry, and plain text keeps the key it always had. */
static int concat_files(const char *const *paths, const char *const *masks, int n, int rank, zt_comm *comm, char *buf,
                        size_t cap, char *mask_buf, zt_err *err)
{
    int32_t *all = NULL, *mall = NULL;
    size_t total = 0, mtotal = 0;
    int rc = load_joined(paths, n, &all, &total, err);
    if (!rc && masks && (rc = load_joined(masks, n, &mall, &mtotal, err)) == ZT_OK && mtotal != total)
        rc = zt_fail(err, ZT_EINPUT, "the joined --data files have %zu ids and %zu loss-mask values", total, mtotal);
    char cache[4096];
    if (!rc) {
        static const char tag[] = "ztrain token cache v1: int32 ids of several files, in order";
        static const char mtag[] = "ztrain token cache v1: int32 ids, then int32 loss masks, of several files, in order";
        zt_sha256 h;
        uint8_t d[32];
        char hex[65];
        zt_sha256_init(&h);
        if (masks)
            zt_sha256_update(&h, mtag, sizeof mtag);
        else
            zt_sha256_update(&h, tag, sizeof tag);
        zt_sha256_update(&h, all, total * sizeof *all);
        if (masks)
            zt_sha256_update(&h, mall, mtotal * sizeof *mall);
        zt_sha256_final(&h, d);
        zt_sha256_hex(d, hex);
        rc = zt_text_cache_dir(cache, sizeof cache, err);
        if (!rc && (rc = zt_mkdirs(cache, err)) == ZT_OK && snprintf(buf, cap, "%s/%s.npy", cache, hex) >= (int)cap)
            rc = zt_fail(err, ZT_EINPUT, "%s: path too long", cache);
        if (!rc && masks && zt_text_mask_path(buf, mask_buf, cap) != 0)
            rc = zt_fail(err, ZT_EINPUT, "%s: path too long", buf);
    }
    /* rank 0 writes; the others write only where it is still missing (a cache
     * of their own on another machine): the same bytes either way */
    if (!rc && rank == 0)
        rc = write_joined(buf, all, total, masks ? mask_buf : NULL, mall, err);
    if (comm && zt_comm_max_int(comm, rc) != ZT_OK && rc == ZT_OK)
        rc = zt_fail(err, ZT_EINPUT, "rank 0 could not write the joined --data files (its error is printed above)");
    if (!rc && rank != 0)
        rc = write_joined(buf, all, total, masks ? mask_buf : NULL, mall, err);
    if (!rc && rank == 0)
        printf("data: %d files, %zu tokens in all, joined in the order given%s: %s\n", n, total,
               masks ? " (prompt/completion records, their loss masks joined beside)" : "", buf);
    zt_free(ZT_MEM_OTHER, all, all ? total * sizeof *all : 0);
    zt_free(ZT_MEM_OTHER, mall, mall ? mtotal * sizeof *mall : 0);
    return rc;
}

/* The start-up line that says what each document gets around its ids.  A
 * tokenizer that does not load prints nothing here: the tokenization that
 * follows reports it, on every rank alike. */
static void print_document_bounds(const char *tok_dir, const zt_text_opts *o)
{
    zt_tokenizer *t = NULL;
    zt_err quiet;
    if (zt_tok_load(tok_dir, &t, &quiet) == ZT_OK) {
        char line[400];
        zt_text_describe_documents(t, o, line, sizeof line);
        printf("%s\n", line);
    }
    zt_tok_free(t);
}

int zt_cli_packing_mode(int on, const char *strategy, int say, int *mode, zt_err *err)
{
    static const char *const names[] = {"wrapped", "bfd", "bfd_split"}; /* index: ZT_PACK_* */
    *mode = on ? ZT_PACK_BFD : 0;
    if (!strategy)
        return ZT_OK;
    if (!on)
        return zt_fail(err, ZT_EINPUT, "--packing_strategy %s: packing is off; add --packing true", strategy);
    *mode = 0;
    while (*mode < 3 && strcmp(strategy, names[*mode]))
        ++*mode;
    if (*mode == 3)
        return zt_fail(err, ZT_EINPUT, "--packing_strategy: unknown \"%s\" (expected bfd, bfd_split or wrapped)",
                       strategy);
    if (say && *mode == 0)
        printf("packing: wrapped: windows cut from the stream across documents (ztrain's default)\n");
    return ZT_OK;
}

int zt_cli_padding_free_eos(const char *tok_dir, const zt_text_opts *o, int say, int packing, int32_t *eos,
                            zt_err *err)
{
    const char *flag = packing ? "--packing" : "--padding_free";
    if (!tok_dir)
        return zt_fail(err, ZT_EINPUT, "%s needs --tokenizer DIR and text data: documents are found by "
                       "the eos the tokenizer puts after each", flag);
    if (!o->eos_between_documents)
        return zt_fail(err, ZT_EINPUT, "%s with --eos_between_documents false: documents are found by "
                       "the eos after each; keep it on", flag);
    zt_tokenizer *t = NULL;
    int rc = zt_tok_load(tok_dir, &t, err);
    if (rc == ZT_OK && (*eos = zt_tok_eos_id(t)) < 0)
        rc = zt_fail(err, ZT_EINPUT, "%s: the tokenizer in %s names no eos_token (tokenizer_config.json), "
                     "so documents have no end", flag, tok_dir);
    zt_tok_free(t);
    if (rc == ZT_OK && say && packing)
        printf("packing: documents (each ends at eos id %d) are packed best-fit decreasing into the windows "
               "(%s), positions restart at each and attention stays inside it\n", (int)*eos,
               packing == ZT_PACK_BFD_SPLIT ? "bfd_split: a longer one cut into pieces" : "bfd: a longer one truncated");
    else if (rc == ZT_OK && say)
        printf("padding-free: positions restart after each eos (id %d) and attention stays inside each document\n",
               (int)*eos);
    return rc;
}

int zt_cli_data_files(const char *const *files, int n, const zt_text_opts *o, const char *tok_dir, int model_vocab,
                      zt_comm *comm, int rank, int threads, const char **data, char *buf, size_t cap,
                      const char **mask, char *mask_buf, zt_err *err)
{
    *data = files[0];
    if (tok_dir && rank == 0)
        print_document_bounds(tok_dir, o);
    if (mask) {
        *mask = NULL;
        mask_buf[0] = '\0';
    }
    if (n == 1) {
        int rc = one_file(data, o, tok_dir, model_vocab, comm, rank, threads, buf, cap, mask ? mask_buf : NULL,
                          err);
        if (rc == ZT_OK && mask && mask_buf[0])
            *mask = mask_buf;
        return rc;
    }
    size_t each = 4096;
    char *resolved = zt_alloc(ZT_MEM_OTHER, (size_t)n * each), *masks = zt_alloc(ZT_MEM_OTHER, (size_t)n * each);
    const char **paths = zt_alloc(ZT_MEM_OTHER, 2 * (size_t)n * sizeof *paths), **mpaths = paths ? paths + n : NULL;
    int rc = resolved && masks && paths ? ZT_OK : zt_fail(err, ZT_EFAIL, "out of memory for %d data files", n);
    int sft = -1, plain = -1; /* the first file of each kind, to name them */
    for (int i = 0; i < n && rc == ZT_OK; i++) {
        paths[i] = files[i];
        mpaths[i] = masks + (size_t)i * each;
        masks[(size_t)i * each] = '\0';
        rc = one_file(&paths[i], o, tok_dir, model_vocab, comm, rank, threads, resolved + (size_t)i * each,
                      each, mask ? masks + (size_t)i * each : NULL, err);
        if (rc == ZT_OK && mpaths[i][0] && sft < 0)
            sft = i;
        if (rc == ZT_OK && !mpaths[i][0] && plain < 0)
            plain = i;
    }
    /* Several prompt/completion files are one set of records, their masks
     * joined as their ids are.  Beside plain text, which has no prompt, the
     * loss mask would be a guess (every token? none?), and `datasets` itself
     * cannot concatenate a text column with prompt/completion columns: refused. */
    if (rc == ZT_OK && sft >= 0 && plain >= 0)
        rc = zt_fail(err, ZT_EINPUT, "--data: %s holds prompt/completion records and %s plain text: they cannot be "
                     "joined (plain text has no prompt to keep out of the loss); give --data files of one kind, all "
                     "prompt/completion records or all text", files[sft], files[plain]);
    if (rc == ZT_OK)
        rc = concat_files(paths, sft >= 0 ? mpaths : NULL, n, rank, comm, buf, cap, mask_buf, err);
    if (rc == ZT_OK) {
        *data = buf;
        if (sft >= 0)
            *mask = mask_buf;
    }
    zt_free(ZT_MEM_OTHER, resolved, resolved ? (size_t)n * each : 0);
    zt_free(ZT_MEM_OTHER, masks, masks ? (size_t)n * each : 0);
    zt_free(ZT_MEM_OTHER, paths, paths ? 2 * (size_t)n * sizeof *paths : 0);
    return rc;
}
