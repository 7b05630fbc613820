/* text_data.c — text files, documents and the token cache (see text_data.h). */
#include "text_data.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../core/fs.h"
#include "../core/input.h"
#include "../core/mem.h"
#include "../core/sha256.h"
#include "../io/table.h"
#include "../io/tokens.h"
#include "post_processor.h"
#include "records.h"

int zt_text_file_open(const char *path, zt_text_file *f, zt_err *err)
{
    memset(f, 0, sizeof *f);
    int fd;
    struct stat st;
    int rc = zt_open_input(path, "text", &fd, &st, err); /* regular files only: never blocks */
    if (rc)
        return rc;
    if (st.st_size > 0) {
        void *m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (m == MAP_FAILED)
            rc = zt_fail(err, ZT_EFAIL, "%s: mmap failed: %s", path, strerror(errno));
        else
            f->map = m, f->data = m, f->len = (size_t)st.st_size;
    }
    close(fd);
    return rc;
}

void zt_text_file_close(zt_text_file *f)
{
    if (f->map)
        munmap(f->map, f->len);
    memset(f, 0, sizeof *f);
}

int zt_text_encode_document(const zt_tokenizer *t, const zt_text_opts *o, const char *text, size_t len, int threads,
                            zt_ids *out, zt_err *err)
{
    const zt_post_processor *pp = zt_tok_post_processor(t);
    if (o->add_special_tokens && pp->unsupported[0])
        return zt_fail(err, ZT_EINPUT, "tokenizer.json: %s; give --add_special_tokens false to tokenize without it",
                       pp->unsupported);
    int rc = ZT_OK;
    size_t start = out->n;
    if (o->add_special_tokens && zt_ids_append(out, pp->prefix, (size_t)pp->n_prefix))
        rc = zt_fail(err, ZT_EFAIL, "out of memory");
    if (rc == ZT_OK)
        rc = zt_tok_encode(t, text, len, threads, out, err);
    if (rc == ZT_OK && o->add_special_tokens && zt_ids_append(out, pp->suffix, (size_t)pp->n_suffix))
        rc = zt_fail(err, ZT_EFAIL, "out of memory");
    int32_t eos = zt_tok_eos_id(t);
    /* TRL: `if not text.endswith(eos_token): text += eos_token`, on this document's ids */
    if (rc == ZT_OK && o->eos_between_documents && eos >= 0 && (out->n == start || out->v[out->n - 1] != eos) &&
        zt_ids_push(out, eos))
        rc = zt_fail(err, ZT_EFAIL, "out of memory");
    return rc;
}

void zt_text_describe_documents(const zt_tokenizer *t, const zt_text_opts *o, char *buf, size_t cap)
{
    const zt_post_processor *pp = zt_tok_post_processor(t);
    char pre[96] = "", suf[96] = "";
    for (int i = 0, k = 0; i < pp->n_prefix && k >= 0 && (size_t)k < sizeof pre; i++)
        k += snprintf(pre + k, sizeof pre - (size_t)k, "%d ", (int)pp->prefix[i]);
    for (int i = 0, k = 0; i < pp->n_suffix && k >= 0 && (size_t)k < sizeof suf; i++)
        k += snprintf(suf + k, sizeof suf - (size_t)k, " %d", (int)pp->suffix[i]);
    int32_t eos = zt_tok_eos_id(t);
    const char *post = !o->add_special_tokens ? "no post_processor tokens (--add_special_tokens false)"
                       : pp->n_prefix + pp->n_suffix ? "the post_processor's special tokens"
                                                     : "no post_processor tokens (the tokenizer's adds none)";
    char e[96];
    if (!o->eos_between_documents)
        snprintf(e, sizeof e, "no eos after it (--eos_between_documents false)");
    else if (eos < 0)
        snprintf(e, sizeof e, "no eos after it (the tokenizer names no eos_token)");
    else
        snprintf(e, sizeof e, "eos %d after it unless it already ends with eos", (int)eos);
    snprintf(buf, cap, "documents: each is [%s<ids>%s]: %s, %s", o->add_special_tokens ? pre : "", 
             o->add_special_tokens ? suf : "", post, e);
}

/* One document a record, bounded as o says. */
typedef struct doc_sink {
    const zt_tokenizer *t;
    const zt_text_opts *o;
    int threads;
    zt_ids *out;
} doc_sink;

static int encode_doc(void *ctx, const char *text, size_t len, zt_err *err)
{
    doc_sink *d = ctx;
    return zt_text_encode_document(d->t, d->o, text, len, d->threads, d->out, err);
}

/* TRL's prompt-completion tokenization: prompt + completion is one document
 * (one string, so the pieces merge at the seam as the tokenizer merges them,
 * then eos: TRL appends eos_token to the completion); the loss mask is 0 over
 * the post_processor's prefix and the prompt's own ids, 1 after, eos included. */
typedef struct sft_sink {
    doc_sink d;
    zt_ids *mask;
    zt_ids prompt;      /* scratch: the prompt's own ids */
    char *joined;       /* scratch: prompt + completion */
    size_t joined_cap;
} sft_sink;

static int encode_pair(void *ctx, const char *prompt, size_t plen, const char *completion, size_t clen, zt_err *err)
{
    sft_sink *s = ctx;
    if (plen + clen > s->joined_cap) {
        zt_free(ZT_MEM_OTHER, s->joined, s->joined_cap);
        s->joined_cap = plen + clen;
        if (!(s->joined = zt_alloc(ZT_MEM_OTHER, s->joined_cap)))
            return zt_fail(err, ZT_EFAIL, "out of memory for a record of %zu bytes", plen + clen);
    }
    if (plen + clen) {
        memcpy(s->joined, prompt, plen);
        memcpy(s->joined + plen, completion, clen);
    }
    s->prompt.n = 0;
    size_t start = s->d.out->n;
    size_t masked = s->d.o->add_special_tokens ? (size_t)zt_tok_post_processor(s->d.t)->n_prefix : 0;
    int rc = zt_tok_encode(s->d.t, prompt, plen, s->d.threads, &s->prompt, err);
    if (rc == ZT_OK)
        rc = encode_doc(&s->d, s->joined, plen + clen, err);
    masked += s->prompt.n;
    for (size_t i = start; rc == ZT_OK && i < s->d.out->n; i++)
        if (zt_ids_push(s->mask, i - start >= masked))
            rc = zt_fail(err, ZT_EFAIL, "out of memory");
    return rc;
}

/* A table's rows as documents (one column) or prompt-completion pairs (two). */
static int table_doc(void *ctx, const char *const *vals, const size_t *lens, zt_err *err)
{
    return encode_doc(ctx, vals[0], lens[0], err);
}

static int table_pair(void *ctx, const char *const *vals, const size_t *lens, zt_err *err)
{
    return encode_pair(ctx, vals[0], lens[0], vals[1], lens[1], err);
}

static const char *const sft_columns[2] = {"prompt", "completion"};

/* TRL's prompt-completion records (records.h) of the JSON Lines text
 * data[0..len), or (table) the rows of the table at path (io/table.h): ids gets,
 * for each record, the document prompt + completion (encode_pair); mask gets
 * one value per id, 0 over the prefix and the prompt, 1 after (TRL's
 * completion_mask: the loss is on the completion and eos only). */
static int sft_encode(const zt_tokenizer *t, const zt_text_opts *o, const char *path, int table, const char *data,
                      size_t len, int threads, zt_ids *ids, zt_ids *mask, zt_err *err)
{
    sft_sink s = {{t, o, threads, ids}, mask, {0}, NULL, 0};
    int rc = table ? zt_table_each_row(path, sft_columns, 2, table_pair, &s, err)
                   : zt_records_each_pair(path, data, len, encode_pair, &s, err);
    zt_ids_free(&s.prompt);
    zt_free(ZT_MEM_OTHER, s.joined, s.joined_cap);
    return rc;
}

int zt_text_mask_path(const char *ids_path, char *buf, size_t cap)
{
    size_t n = strlen(ids_path);
    if (n < 4 || strcmp(ids_path + n - 4, ".npy") != 0)
        return -1;
    int k = snprintf(buf, cap, "%.*s.mask.npy", (int)(n - 4), ids_path);
    return k < 0 || (size_t)k >= cap ? -1 : 0;
}

/* A text file is one document; a JSON Lines file or a table one document a
 * record (f is not used for a table: Arrow reads it). */
/* ZT_EINPUT when path holds TRL's prompt/completion records and no field to
 * read: `tokenize` writes ids alone, and a prompt/completion record is more
 * than its ids (the mask that keeps its prompt out of the loss), so it says
 * where such records are read whole instead of a bare "no text field".  An
 * explicit field the records do have (--text_field prompt) is read as asked. */
static int refuse_prompt_completion(const char *path, const zt_text_file *f, const char *field, zt_err *err)
{
    static const char *const pc[2] = {"prompt", "completion"};
    int sft = 0, has = 0, rc = ZT_OK;
    if (zt_table_is_table(path)) {
        if ((rc = zt_table_has_columns(path, &field, 1, &has, err)) == ZT_OK && !has)
            rc = zt_table_has_columns(path, pc, 2, &sft, err);
    } else if (zt_records_is_jsonl(path)) {
        has = zt_records_first_has(f->data, f->len, field);
        sft = !has && zt_records_are_prompt_completion(f->data, f->len);
    }
    if (rc || !sft)
        return rc;
    return zt_fail(err, ZT_EINPUT, "%s: prompt/completion records (\"prompt\" and \"completion\", no \"%s\"): "
                   "tokenize writes ids alone, without the mask that keeps each prompt out of the loss; give %s to "
                   "train --data (or --eval_data, or eval --data), which reads prompt and completion with that mask, "
                   "or choose one field with --text_field", path, field, path);
}

static int encode_file(doc_sink *d, const char *path, const zt_text_file *f, zt_err *err)
{
    const char *field = d->o->text_field ? d->o->text_field : "text";
    int rc = refuse_prompt_completion(path, f, field, err);
    if (rc)
        return rc;
    if (zt_table_is_table(path))
        return zt_table_each_row(path, &field, 1, table_doc, d, err);
    if (zt_records_is_jsonl(path))
        return zt_records_each(path, f->data, f->len, field, encode_doc, d, err);
    rc = encode_doc(d, f->data, f->len, err);
    return rc ? zt_wrap(err, "%s: ", path) : ZT_OK;
}

int zt_text_tokenize_files(const zt_tokenizer *t, const char *const *paths, int n, const zt_text_opts *o, int threads,
                           zt_ids *out, zt_err *err)
{
    doc_sink d = {t, o, threads, out};
    for (int i = 0; i < n; i++) {
        zt_text_file f = {0};
        int rc = zt_table_is_table(paths[i]) ? ZT_OK : zt_text_file_open(paths[i], &f, err);
        if (rc)
            return rc;
        rc = encode_file(&d, paths[i], &f, err);
        zt_text_file_close(&f);
        if (rc)
            return rc;
    }
    return ZT_OK;
}

int zt_text_cache_dir(char *buf, size_t cap, zt_err *err)
{
    const char *z = getenv("ZTRAIN_CACHE_DIR"), *x = getenv("XDG_CACHE_HOME"), *h = getenv("HOME");
    int n = z && *z   ? snprintf(buf, cap, "%s", z)
            : x && *x ? snprintf(buf, cap, "%s/ztrain/tokens", x)
            : h && *h ? snprintf(buf, cap, "%s/.cache/ztrain/tokens", h)
                      : -1;
    if (n < 0)
        return zt_fail(err, ZT_EINPUT, "no token cache directory: set ZTRAIN_CACHE_DIR (or HOME)");
    if ((size_t)n >= cap)
        return zt_fail(err, ZT_EINPUT, "token cache directory path is too long");
    return ZT_OK;
}


/* The SHA-256 of an entry's files (the ids, then the mask when there is one)
 * as 64 hex digits: what the entry's .sha256 file records when it is written
 * and what a read must find again.  0 ok, -1 when a file cannot be read. */
static int entry_digest(const char *ids_path, const char *mask_path, char hex[65])
{
    zt_sha256 h;
    zt_sha256_init(&h);
    const char *paths[2] = {ids_path, mask_path};
    for (int i = 0; i < 2 && paths[i]; i++) {
        zt_text_file f;
        zt_err ignored = {0};
        if (zt_text_file_open(paths[i], &f, &ignored) != ZT_OK)
            return -1;
        uint64_t n = f.len; /* the length first: ids+mask cut elsewhere hash apart */
        zt_sha256_update(&h, &n, sizeof n);
        zt_sha256_update(&h, f.data, f.len);
        zt_text_file_close(&f);
    }
    uint8_t d[32];
    zt_sha256_final(&h, d);
    zt_sha256_hex(d, hex);
    return 0;
}

/* Is the cache entry what was written?  Its files hash to the digest recorded
 * beside them: a file overwritten, truncated or left by an older ztrain (no
 * digest) is not, and is built again. */
static int entry_sound(const char *ids_path, const char *mask_path, const char *sum_path)
{
    char want[65] = "", have[65];
    FILE *f = fopen(sum_path, "r");
    int ok = f && fscanf(f, "%64s", want) == 1;
    if (f)
        fclose(f);
    return ok && entry_digest(ids_path, mask_path, have) == 0 && strcmp(want, have) == 0;
}

static int write_digest(const char *ids_path, const char *mask_path, const char *sum_path, zt_err *err)
{
    char hex[66];
    if (entry_digest(ids_path, mask_path, hex) != 0)
        return zt_fail(err, ZT_EFAIL, "%s: cannot read the entry just written", ids_path);
    hex[64] = '\n';
    zt_wpart part = {hex, 65};
    return zt_write_atomic(sum_path, &part, 1, err);
}
/* mkdir -p */
static int make_dirs(const char *dir, zt_err *err)
{
    char p[4096];
    if (snprintf(p, sizeof p, "%s", dir) >= (int)sizeof p)
        return zt_fail(err, ZT_EINPUT, "%s: path too long", dir);
    for (char *s = p + 1;; s++) {
        if (*s == '/' || !*s) {
            char c = *s;
            *s = 0;
            if (mkdir(p, 0777) != 0 && errno != EEXIST)
                return zt_fail(err, ZT_EINPUT, "%s: cannot create the token cache directory: %s", p, strerror(errno));
            *s = c;
            if (!c)
                break;
        }
    }
    return ZT_OK;
}

/* The first part of a cache key: what kind of ids the entry holds.  v2: each
 * document bounded as o says (v1 entries, bare ids, are never read again), with
 * the eos id appended named, since it comes from tokenizer_config.json, which
 * the key's tokenizer.json bytes do not cover.  A JSON Lines file's or a table's
 * tag names its text field, so another field is another entry. */
static void hash_kind(zt_sha256 *h, const char *path, int table, int sft, const zt_tokenizer *t, const zt_text_opts *o)
{
    static const char tag[] = "ztrain token cache v2: int32 ids of one document";
    static const char jsonl_tag[] = "ztrain token cache v2: int32 ids of JSON Lines records; field ";
    static const char sft_tag[] = "ztrain token cache v2: prompt-completion records: int32 ids of prompt + "
                                  "completion, and the completion mask";
    static const char table_tag[] = "ztrain token cache v2: int32 ids of table rows (Parquet, Arrow); column ";
    static const char table_sft_tag[] = "ztrain token cache v2: prompt-completion table rows (Parquet, Arrow): "
                                        "int32 ids of prompt + completion, and the completion mask";
    const char *field = o->text_field ? o->text_field : "text";
    uint64_t fl = strlen(field);
    zt_sha256_init(h);
    if (sft) {
        zt_sha256_update(h, table ? table_sft_tag : sft_tag, table ? sizeof table_sft_tag : sizeof sft_tag);
    } else if (table || zt_records_is_jsonl(path)) {
        zt_sha256_update(h, table ? table_tag : jsonl_tag, table ? sizeof table_tag : sizeof jsonl_tag);
        zt_sha256_update(h, &fl, sizeof fl);
        zt_sha256_update(h, field, fl);
    } else {
        zt_sha256_update(h, tag, sizeof tag);
    }
    int32_t bounds[3] = {o->add_special_tokens != 0, o->eos_between_documents != 0, zt_tok_eos_id(t)};
    zt_sha256_update(h, bounds, sizeof bounds);
}

int zt_text_cached_tokens(const char *text_path, const zt_text_opts *o, const char *tok_dir, const char *cache_dir,
                          int threads, char *out_path, size_t cap, int *hit, int *vocab_size, int *has_mask,
                          zt_err *err)
{
    *hit = 0;
    *has_mask = 0;
    char tok_json[4096];
    if (snprintf(tok_json, sizeof tok_json, "%s/tokenizer.json", tok_dir) >= (int)sizeof tok_json)
        return zt_fail(err, ZT_EINPUT, "%s: path too long", tok_dir);
    zt_tokenizer *t = NULL;
    int rc = zt_tok_load(tok_dir, &t, err);
    if (rc)
        return rc;
    *vocab_size = zt_tok_vocab_size(t);
    zt_text_file tj, tx = {0};
    int table = zt_table_is_table(text_path), sft = 0;
    if ((rc = zt_text_file_open(tok_json, &tj, err))) {
        zt_tok_free(t);
        return rc;
    }
    /* a table is read through Arrow (its prompt and completion columns make it
     * prompt-completion records); other text is mapped */
    rc = table ? zt_table_has_columns(text_path, sft_columns, 2, &sft, err) : zt_text_file_open(text_path, &tx, err);
    if (rc) {
        zt_text_file_close(&tj);
        zt_tok_free(t);
        return rc;
    }
    zt_sha256 h;
    if (!table)
        sft = zt_records_is_jsonl(text_path) && zt_records_are_prompt_completion(tx.data, tx.len);
    hash_kind(&h, text_path, table, sft, t, o);
    uint64_t tl = tj.len;
    zt_sha256_update(&h, &tl, sizeof tl);
    zt_sha256_update(&h, tj.data, tj.len);
    if (table)
        rc = zt_table_hash(text_path, &h, err); /* the data files' bytes */
    else
        zt_sha256_update(&h, tx.data, tx.len);
    uint8_t d[32];
    char hex[65];
    zt_sha256_final(&h, d);
    zt_sha256_hex(d, hex);
    zt_text_file_close(&tj);
    if (!rc && snprintf(out_path, cap, "%s/%s.npy", cache_dir, hex) >= (int)cap)
        rc = zt_fail(err, ZT_EINPUT, "%s: path too long", cache_dir);
    char mask_path[4096];
    if (!rc && sft && zt_text_mask_path(out_path, mask_path, sizeof mask_path) != 0)
        rc = zt_fail(err, ZT_EINPUT, "%s: path too long", cache_dir);
    *has_mask = sft;
    char sum_path[4200];
    snprintf(sum_path, sizeof sum_path, "%s.sha256", out_path);
    if (!rc && access(out_path, R_OK) == 0 && entry_sound(out_path, sft ? mask_path : NULL, sum_path)) {
        *hit = 1;
    } else if (!rc && !(rc = make_dirs(cache_dir, err))) {
        if (access(out_path, F_OK) == 0)
            fprintf(stderr, "ztrain: note: the token cache entry %s does not match its digest (%s: damaged, "
                    "stale or from before digests): tokenizing %s again\n", out_path, sum_path, text_path);
        zt_ids ids = {0}, mask = {0};
        doc_sink d = {t, o, threads, &ids};
        rc = sft ? sft_encode(t, o, text_path, table, tx.data, tx.len, threads, &ids, &mask, err)
                 : encode_file(&d, text_path, &tx, err);
        if (rc == ZT_OK && ids.n == 0)
            rc = zt_fail(err, ZT_EINPUT, "%s: no tokens (the file is empty)", text_path);
        /* the mask first: an entry whose ids exist is whole (each file is atomic) */
        if (rc == ZT_OK && sft)
            rc = zt_tokens_write_npy(mask_path, mask.v, mask.n, err);
        if (rc == ZT_OK)
            rc = zt_tokens_write_npy(out_path, ids.v, ids.n, err);
        if (rc == ZT_OK) /* last: an entry is whole once its digest is there */
            rc = write_digest(out_path, sft ? mask_path : NULL, sum_path, err);
        zt_ids_free(&ids);
        zt_ids_free(&mask);
    }
    zt_text_file_close(&tx);
    zt_tok_free(t);
    return rc;
}
