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

#include "../core/input.h"
#include "../core/sha256.h"
#include "../io/tokens.h"
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

/* One document: its ids, then eos when asked. */
typedef struct doc_sink {
    const zt_tokenizer *t;
    int threads;
    int32_t eos; /* -1: none after each document */
    zt_ids *out;
} doc_sink;

static int encode_doc(void *ctx, const char *text, size_t len, zt_err *err)
{
    doc_sink *d = ctx;
    int rc = zt_tok_encode(d->t, text, len, d->threads, d->out, err);
    if (rc == ZT_OK && d->eos >= 0 && zt_ids_push(d->out, d->eos))
        rc = zt_fail(err, ZT_EFAIL, "out of memory");
    return rc;
}

/* A text file is one document; a JSON Lines file is one document a record. */
static int encode_file(doc_sink *d, const char *path, const zt_text_file *f, const char *text_field, zt_err *err)
{
    if (zt_records_is_jsonl(path))
        return zt_records_each(path, f->data, f->len, text_field ? text_field : "text", encode_doc, d, err);
    int rc = encode_doc(d, f->data, f->len, err);
    return rc ? zt_wrap(err, "%s: ", path) : ZT_OK;
}

int zt_text_tokenize_files(const zt_tokenizer *t, const char *const *paths, int n, const char *text_field,
                           int append_eos, int threads, zt_ids *out, zt_err *err)
{
    int32_t eos = zt_tok_eos_id(t);
    if (append_eos && eos < 0)
        return zt_fail(err, ZT_EINPUT, "--append_eos: the tokenizer names no eos_token (tokenizer_config.json or "
                                       "special_tokens_map.json)");
    doc_sink d = {t, threads, append_eos ? eos : -1, out};
    for (int i = 0; i < n; i++) {
        zt_text_file f;
        int rc = zt_text_file_open(paths[i], &f, err);
        if (rc)
            return rc;
        rc = encode_file(&d, paths[i], &f, text_field, err);
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

int zt_text_cached_tokens(const char *text_path, const char *text_field, const char *tok_dir, const char *cache_dir,
                          int threads, char *out_path, size_t cap, int *hit, int *vocab_size, zt_err *err)
{
    *hit = 0;
    char tok_json[4096];
    if (snprintf(tok_json, sizeof tok_json, "%s/tokenizer.json", tok_dir) >= (int)sizeof tok_json)
        return zt_fail(err, ZT_EINPUT, "%s: path too long", tok_dir);
    zt_tokenizer *t = NULL;
    int rc = zt_tok_load(tok_dir, &t, err);
    if (rc)
        return rc;
    *vocab_size = zt_tok_vocab_size(t);
    zt_text_file tj, tx;
    if ((rc = zt_text_file_open(tok_json, &tj, err))) {
        zt_tok_free(t);
        return rc;
    }
    if ((rc = zt_text_file_open(text_path, &tx, err))) {
        zt_text_file_close(&tj);
        zt_tok_free(t);
        return rc;
    }
    /* key = SHA-256(tag, |tokenizer.json|, tokenizer.json, text); a JSON Lines
     * file's tag names its text field, so another field is another entry */
    zt_sha256 h;
    zt_sha256_init(&h);
    static const char tag[] = "ztrain token cache v1: int32 ids of one document, no eos";
    static const char jsonl_tag[] = "ztrain token cache v1: int32 ids of JSON Lines records, no eos; field ";
    const char *field = text_field ? text_field : "text";
    uint64_t tl = tj.len, fl = strlen(field);
    if (zt_records_is_jsonl(text_path)) {
        zt_sha256_update(&h, jsonl_tag, sizeof jsonl_tag);
        zt_sha256_update(&h, &fl, sizeof fl);
        zt_sha256_update(&h, field, fl);
    } else {
        zt_sha256_update(&h, tag, sizeof tag);
    }
    zt_sha256_update(&h, &tl, sizeof tl);
    zt_sha256_update(&h, tj.data, tj.len);
    zt_sha256_update(&h, tx.data, tx.len);
    uint8_t d[32];
    char hex[65];
    zt_sha256_final(&h, d);
    zt_sha256_hex(d, hex);
    zt_text_file_close(&tj);
    if (snprintf(out_path, cap, "%s/%s.npy", cache_dir, hex) >= (int)cap)
        rc = zt_fail(err, ZT_EINPUT, "%s: path too long", cache_dir);
    if (!rc && access(out_path, R_OK) == 0) {
        *hit = 1;
    } else if (!rc && !(rc = make_dirs(cache_dir, err))) {
        zt_ids ids = {0};
        doc_sink d = {t, threads, -1, &ids};
        rc = encode_file(&d, text_path, &tx, text_field, err);
        if (rc == ZT_OK && ids.n == 0)
            rc = zt_fail(err, ZT_EINPUT, "%s: no tokens (the file is empty)", text_path);
        if (rc == ZT_OK)
            rc = zt_tokens_write_npy(out_path, ids.v, ids.n, err);
        zt_ids_free(&ids);
    }
    zt_text_file_close(&tx);
    zt_tok_free(t);
    return rc;
}
