/* safetensors.c — safetensors files, read (mmap, validated) and written (weights_dir.c joins a directory of them).
 *
 * Promise: zt_st_open either returns a file whose every tensor lies inside the
 * mapping, with a known dtype, a shape whose byte size equals its span, and spans
 * that tile the data section exactly; or it returns ZT_EINPUT naming the file and
 * the fault.  No input, however malformed, makes it read outside the file or
 * crash.  (As with any mapping, the file must not be truncated while it is open:
 * the kernel would answer a read past the new end with SIGBUS.)  Writers never
 * leave a half-written file (zt_write_atomic).
 *
 * Deliberately stricter than the reference in three corners ztrain cannot
 * represent: more than ZT_ST_MAX_DIMS dimensions, a dimension past 2^63 (only
 * possible in an empty tensor), and "\u0000" inside a name.
 *
 * The JSON header goes through the strict front end in core/json.h, as every
 * JSON file ztrain reads does. */
#include "safetensors.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../core/fs.h"
#include "../core/input.h"
#include "../core/json.h"
#include "../core/mem.h"
#include "../core/text.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "safetensors data is little-endian and ztrain maps it directly: little-endian hosts only"
#endif

/* The reference parser's limit: bounds the JSON work any file can demand. */
#define ST_MAX_HEADER 100000000ull
/* A header above this must be smaller than the data it describes: a Llama
 * layer's 9 tensors take about 1.4 KB of header, so 8 MB describe ~5700 layers. */
#define ST_SANE_HEADER 8000000ull

#include "safetensors_impl.h"

/* A growable string in accounted memory, for headers built before writing.
 * The first failed allocation sets oom and turns later appends into no-ops. */
typedef struct strbuf {
    char *p;
    size_t len, cap;
    int oom;
} strbuf;

static void sb_put(strbuf *b, const char *s, size_t n)
{
    if (b->oom)
        return;
    if (n > SIZE_MAX / 2 - b->len - 1) {
        b->oom = 1;
        return;
    }
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1)
            cap *= 2;
        char *p = xalloc(cap);
        if (!p) {
            b->oom = 1;
            return;
        }
        if (b->len)
            memcpy(p, b->p, b->len);
        if (b->p)
            xfree(b->p, b->cap);
        b->p = p, b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0;
}
static void sb_str(strbuf *b, const char *s) { sb_put(b, s, strlen(s)); }

static void sb_printf(strbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(strbuf *b, const char *fmt, ...)
{
    char tmp[64]; /* only used for numbers */
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof tmp)
        b->oom = 1;
    else
        sb_put(b, tmp, (size_t)n);
}

/* s as a JSON string literal; s is valid UTF-8, so only '"', '\\' and control
 * bytes need escaping. */
static void sb_json_string(strbuf *b, const char *s)
{
    sb_put(b, "\"", 1);
    for (const char *q = s; *q; q++) {
        unsigned char c = (unsigned char)*q;
        if (c == '"' || c == '\\') {
            char e[2] = {'\\', (char)c};
            sb_put(b, e, 2);
        } else if (c < 0x20) {
            sb_printf(b, "\\u%04x", c);
        } else {
            sb_put(b, q, 1);
        }
    }
    sb_put(b, "\"", 1);
}

static void sb_free(strbuf *b)
{
    if (b->p)
        xfree(b->p, b->cap);
    memset(b, 0, sizeof *b);
}

/* ----------------------------------------------------------- reading a file */

/* The reference's dtypes, sized in bits because F4 and F6 pack several
 * elements into a byte (a tensor of them must fill whole bytes). */
static const struct st_dtype {
    const char *name;
    int bits;
} st_dtypes[] = {
    {"BOOL", 8},    {"F4", 4},      {"F6_E2M3", 6}, {"F6_E3M2", 6}, {"U8", 8},
    {"I8", 8},      {"F8_E5M2", 8}, {"F8_E4M3", 8}, {"F8_E8M0", 8}, {"I16", 16},
    {"U16", 16},    {"F16", 16},    {"BF16", 16},   {"I32", 32},    {"U32", 32},
    {"F32", 32},    {"C64", 64},    {"F64", 64},    {"I64", 64},    {"U64", 64},
};
#define ST_DTYPE_LIST "BOOL, F4, F6_E2M3, F6_E3M2, U8, I8, F8_E5M2, F8_E4M3, F8_E8M0, I16, U16, " \
                      "F16, BF16, I32, U32, F32, C64, F64, I64, U64"

static const char *st_name_of(zt_dtype dt)
{
    switch (dt) {
    case ZT_F32: return "F32";
    case ZT_BF16: return "BF16";
    case ZT_F16: return "F16";
    }
    return NULL;
}

struct zt_st_file {
    char *path;
    void *map;
    size_t map_bytes;
    int n;
    zt_st_tensor *tensors;          /* in data-section order */
    const zt_st_tensor **by_name;   /* sorted by name, for zt_st_find */
    char *names;                    /* all names, NUL-separated */
    size_t names_bytes;
    char *meta;                     /* __metadata__ as key NUL value NUL ..., in document order */
    size_t meta_bytes;
};

/* Where a tensor's bytes are, before the tensors are put in data order. */
typedef struct st_span {
    uint64_t begin, end;
    int idx;
} st_span;

static int cmp_span(const void *a, const void *b)
{
    const st_span *x = a, *y = b;
    if (x->begin != y->begin)
        return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end)
        return x->end < y->end ? -1 : 1;
    return x->idx - y->idx;
}
static int cmp_tensor_name(const void *a, const void *b)
{
    const zt_st_tensor *const *x = a, *const *y = b;
    return strcmp((*x)->name, (*y)->name);
}

void zt_st_drop_pages(zt_st_file *f)
{
    if (f && f->map && f->map_bytes)
        (void)madvise(f->map, f->map_bytes, MADV_DONTNEED);
}

void zt_st_close(zt_st_file *f)
{
    if (!f)
        return;
    if (f->map)
        munmap(f->map, f->map_bytes);
    if (f->tensors)
        xfree(f->tensors, (size_t)f->n * sizeof *f->tensors);
    if (f->by_name)
        xfree(f->by_name, (size_t)f->n * sizeof *f->by_name);
    if (f->names)
        xfree(f->names, f->names_bytes);
    if (f->meta)
        xfree(f->meta, f->meta_bytes);
    xstrfree(f->path);
    xfree(f, sizeof *f);
}

/* Entry `name`'s dtype: its safetensors name in t, its bits per element in *bits,
 * and its zt_dtype where ztrain computes in it. */
static int entry_dtype(const char *path, const char *name, const cJSON *dtype, zt_st_tensor *t, int *bits_out,
                       zt_err *err)
{
    int bits = 0;
    if (cJSON_IsString(dtype))
        for (size_t d = 0; d < sizeof st_dtypes / sizeof st_dtypes[0]; d++)
            if (strcmp(dtype->valuestring, st_dtypes[d].name) == 0) {
                bits = st_dtypes[d].bits;
                strcpy(t->st_dtype, st_dtypes[d].name);
            }
    if (!bits)
        return zt_fail(err, ZT_EINPUT, "%s: tensor \"%s\": unknown dtype %s%s%s (expected one of " ST_DTYPE_LIST ")",
                       path, name, cJSON_IsString(dtype) ? "\"" : "",
                       cJSON_IsString(dtype) ? dtype->valuestring : "(not a string)",
                       cJSON_IsString(dtype) ? "\"" : "");
    t->has_zt_dtype = 1;
    if (strcmp(t->st_dtype, "F32") == 0)
        t->dtype = ZT_F32;
    else if (strcmp(t->st_dtype, "BF16") == 0)
        t->dtype = ZT_BF16;
    else if (strcmp(t->st_dtype, "F16") == 0)
        t->dtype = ZT_F16;
    else
        t->has_zt_dtype = 0;
    *bits_out = bits;
    return ZT_OK;
}

/* The shape and data_offsets of entry `name` into t and sp.  k is the index in
 * j->nums of the first number inside e. */
static int entry_numbers(const char *path, const zt_json *j, const cJSON *e, const char *name, size_t k,
                         const cJSON *shape, const cJSON *offs, zt_st_tensor *t, st_span *sp, zt_err *err)
{
    /* Numbers are consumed in document order, matching j->nums: walk e's members
     * as they appear, not in the order this function checks them. */
    for (const cJSON *m = e->child; m; m = m->next) {
        if (m != shape && m != offs) {
            k += zt_json_count_numbers(m);
            continue;
        }
        int is_shape = m == shape;
        if (!cJSON_IsArray(m))
            return zt_fail(err, ZT_EINPUT, "%s: tensor \"%s\": %s is not an array", path, name,
                           m->string);
        int len = cJSON_GetArraySize(m);
        if (is_shape && len > ZT_ST_MAX_DIMS)
            return zt_fail(err, ZT_EINPUT, "%s: tensor \"%s\": shape has %d dimensions, at most %d are supported",
                           path, name, len, ZT_ST_MAX_DIMS);
        if (!is_shape && len != 2)
            return zt_fail(err, ZT_EINPUT, "%s: tensor \"%s\": data_offsets must be [begin, end], got %d entries",
                           path, name, len);
        int i = 0;
        for (const cJSON *v = m->child; v; v = v->next, i++) {
            int64_t x = 0;
            int r = cJSON_IsNumber(v) ? zt_json_int(j, k++, &x) : 1;
            if (r == 1 || (r == 0 && x < 0))
                return zt_fail(err, ZT_EINPUT, "%s: tensor \"%s\": %s[%d] is not a non-negative integer",
                               path, name, m->string, i);
            /* Values past 2^63 cannot describe bytes of a real file. */
            if (r == 2)
                return zt_fail(err, ZT_EINPUT, "%s: tensor \"%s\": %s[%d] is too large (overflow)",
                               path, name, m->string, i);
            if (is_shape)
                t->shape[i] = x;
            else if (i == 0)
                sp->begin = (uint64_t)x;
            else
                sp->end = (uint64_t)x;
        }
        if (is_shape)
            t->ndim = len;
    }
    return ZT_OK;
}

/* Fill t (and its span) from the header entry e for tensor name.  k is the
 * index in j->nums of the first number inside e. */
static int parse_entry(const char *path, const zt_json *j, const cJSON *e, const char *name,
                       size_t k, zt_st_tensor *t, st_span *sp, zt_err *err)
{
    if (!cJSON_IsObject(e))
        return zt_fail(err, ZT_EINPUT, "%s: tensor \"%s\": entry is not an object", path, name);
    /* Other keys are ignored, as the reference (serde without
     * deny_unknown_fields) ignores them. */
    const cJSON *dtype = NULL, *shape = NULL, *offs = NULL;
    for (const cJSON *m = e->child; m; m = m->next) {
        const cJSON **slot = strcmp(m->string, "dtype") == 0          ? &dtype
                             : strcmp(m->string, "shape") == 0        ? &shape
                             : strcmp(m->string, "data_offsets") == 0 ? &offs
                                                                      : NULL;
        if (!slot)
            continue;
        if (*slot)
            return zt_fail(err, ZT_EINPUT, "%s: tensor \"%s\": duplicate key \"%s\"", path, name,
                           m->string);
        *slot = m;
    }
    if (!dtype || !shape || !offs)
        return zt_fail(err, ZT_EINPUT, "%s: tensor \"%s\": missing \"%s\"", path, name,
                       !dtype ? "dtype" : !shape ? "shape" : "data_offsets");

    int bits = 0, rc;
    if ((rc = entry_dtype(path, name, dtype, t, &bits, err)) ||
        (rc = entry_numbers(path, j, e, name, k, shape, offs, t, sp, err)))
        return rc;

    int64_t numel = 1;
    for (int d = 0; d < t->ndim; d++) {
        if (t->shape[d] != 0 && numel > INT64_MAX / t->shape[d])
            return zt_fail(err, ZT_EINPUT, "%s: tensor \"%s\": shape product overflows 64 bits", path, name);
        numel *= t->shape[d];
    }
    if (numel > INT64_MAX / bits)
        return zt_fail(err, ZT_EINPUT, "%s: tensor \"%s\": byte size of shape overflows 64 bits", path, name);
    t->numel = numel;
    if ((uint64_t)numel * (uint64_t)bits % 8 != 0)
        return zt_fail(err, ZT_EINPUT, "%s: tensor \"%s\": %lld elements of %s do not fill a whole number of bytes",
                       path, name, (long long)numel, t->st_dtype);
    if (sp->begin > sp->end)
        return zt_fail(err, ZT_EINPUT, "%s: tensor \"%s\": data_offsets [%llu, %llu] has begin > end",
                       path, name, (unsigned long long)sp->begin, (unsigned long long)sp->end);
    uint64_t nbytes = (uint64_t)numel * (uint64_t)bits / 8;
    if (nbytes != sp->end - sp->begin)
        return zt_fail(err, ZT_EINPUT,
                       "%s: tensor \"%s\": shape/size mismatch: %lld elements of %s need %llu bytes but data_offsets [%llu, %llu] span %llu",
                       path, name, (long long)numel, t->st_dtype, (unsigned long long)nbytes,
                       (unsigned long long)sp->begin, (unsigned long long)sp->end,
                       (unsigned long long)(sp->end - sp->begin));
    t->nbytes = (size_t)nbytes;
    return ZT_OK;
}

/* Pass 1 over the header: the tensors' count and name bytes, and __metadata__
 * (an object of strings, at most once; NULL when absent). */
static int header_sizes(const char *path, const cJSON *root, size_t *n_out, size_t *names_out, const cJSON **meta_out,
                        zt_err *err)
{
    size_t n = 0, names_bytes = 0;
    const cJSON *meta = NULL;
    for (const cJSON *c = root->child; c; c = c->next) {
        if (strcmp(c->string, "__metadata__") == 0) {
            if (meta)
                return zt_fail(err, ZT_EINPUT, "%s: duplicate \"__metadata__\" in header", path);
            meta = c;
            if (cJSON_IsNull(c)) /* the reference reads it as an Option */
                continue;
            if (!cJSON_IsObject(c))
                return zt_fail(err, ZT_EINPUT, "%s: __metadata__ must be an object of strings", path);
            for (const cJSON *m = c->child; m; m = m->next)
                if (!cJSON_IsString(m))
                    return zt_fail(err, ZT_EINPUT,
                                   "%s: __metadata__ value for \"%s\" is not a string", path, m->string);
            continue;
        }
        n++;
        names_bytes += strlen(c->string) + 1;
    }
    if (n > INT_MAX)
        return zt_fail(err, ZT_EINPUT, "%s: too many tensors (%zu)", path, n);
    *n_out = n, *names_out = names_bytes, *meta_out = meta;
    return ZT_OK;
}

/* __metadata__'s pairs kept in f, key and value NUL-terminated in turn, for zt_st_metadata. */
static int keep_metadata(zt_st_file *f, const cJSON *meta, zt_err *err)
{
    if (!cJSON_IsObject(meta) || !meta->child)
        return ZT_OK;
    size_t bytes = 0;
    for (const cJSON *m = meta->child; m; m = m->next)
        bytes += strlen(m->string) + strlen(m->valuestring) + 2;
    if (!(f->meta = xalloc(bytes)))
        return zt_fail(err, ZT_EFAIL, "%s: out of memory for __metadata__", f->path);
    f->meta_bytes = bytes;
    char *w = f->meta;
    for (const cJSON *m = meta->child; m; m = m->next) {
        w = stpcpy(w, m->string) + 1;
        w = stpcpy(w, m->valuestring) + 1;
    }
    return ZT_OK;
}

/* Pass 2: every entry, in document order so number k stays in step. */
static int parse_entries(zt_st_file *f, const zt_json *j, const cJSON *meta, zt_st_tensor *doc, st_span *spans,
                         zt_err *err)
{
    int rc = ZT_OK;
    size_t i = 0, k = 0;
    char *np = f->names;
    for (const cJSON *c = j->root->child; c && rc == ZT_OK; c = c->next) {
        size_t nk = zt_json_count_numbers(c);
        if (c != meta) {
            size_t len = strlen(c->string) + 1;
            memcpy(np, c->string, len);
            doc[i].name = np;
            np += len;
            spans[i].idx = (int)i;
            rc = parse_entry(f->path, j, c, doc[i].name, k, &doc[i], &spans[i], err);
            i++;
        }
        k += nk;
    }
    return rc;
}

/* Duplicates first: two entries with one name would otherwise be reported
 * as the overlap or gap they also cause. */
static int check_duplicates(zt_st_file *f, zt_st_tensor *doc, size_t n, zt_err *err)
{
    for (size_t t = 0; t < n; t++)
        f->by_name[t] = &doc[t];
    if (!n)
        return ZT_OK;
    qsort(f->by_name, n, sizeof *f->by_name, cmp_tensor_name);
    for (size_t t = 1; t < n; t++)
        if (strcmp(f->by_name[t - 1]->name, f->by_name[t]->name) == 0)
            return zt_fail(err, ZT_EINPUT, "%s: duplicate tensor name \"%s\"", f->path, f->by_name[t]->name);
    return ZT_OK;
}

/* The spans, in offset order, must tile [0, data_bytes) exactly. */
static int check_tiling(const char *path, st_span *spans, const zt_st_tensor *doc, size_t n, uint64_t data_bytes,
                        zt_err *err)
{
    if (n)
        qsort(spans, n, sizeof *spans, cmp_span);
    uint64_t prev_end = 0;
    const char *prev_name = NULL;
    for (size_t t = 0; t < n; t++) {
        const st_span *s = &spans[t];
        const char *name = doc[s->idx].name;
        if (s->end > data_bytes)
            return zt_fail(err, ZT_EINPUT,
                           "%s: tensor \"%s\": data_offsets end %llu is past the end of the data section (%llu bytes; truncated file?)",
                           path, name, (unsigned long long)s->end, (unsigned long long)data_bytes);
        else if (s->begin < prev_end)
            return zt_fail(err, ZT_EINPUT,
                           "%s: tensor \"%s\": data_offsets [%llu, %llu] overlap tensor \"%s\" ending at %llu",
                           path, name, (unsigned long long)s->begin, (unsigned long long)s->end,
                           prev_name, (unsigned long long)prev_end);
        else if (s->begin > prev_end)
            return zt_fail(err, ZT_EINPUT,
                           "%s: gap in the data section: bytes [%llu, %llu) before tensor \"%s\" belong to no tensor",
                           path, (unsigned long long)prev_end, (unsigned long long)s->begin, name);
        prev_end = s->end;
        prev_name = name;
    }
    if (prev_end != data_bytes)
        return zt_fail(err, ZT_EINPUT,
                       "%s: %llu trailing bytes after the last tensor (data section is %llu bytes, tensors cover %llu)",
                       path, (unsigned long long)(data_bytes - prev_end),
                       (unsigned long long)data_bytes, (unsigned long long)prev_end);
    return ZT_OK;
}

/* Validate the header tree against a data section of data_bytes starting at
 * data, and fill f's tensor tables. */
static int st_load_header(zt_st_file *f, const zt_json *j, const unsigned char *data,
                          uint64_t data_bytes, zt_err *err)
{
    const char *path = f->path;
    const cJSON *root = j->root;
    if (!cJSON_IsObject(root))
        return zt_fail(err, ZT_EINPUT, "%s: header JSON is not an object", path);
    size_t n = 0, names_bytes = 0;
    const cJSON *meta = NULL;
    int rc;
    if ((rc = header_sizes(path, root, &n, &names_bytes, &meta, err)) || (rc = keep_metadata(f, meta, err)))
        return rc;
    f->n = (int)n;
    if (n) {
        f->tensors = xalloc(n * sizeof *f->tensors);
        f->by_name = xalloc(n * sizeof *f->by_name);
        f->names = xalloc(names_bytes);
        f->names_bytes = names_bytes;
        if (!f->tensors || !f->by_name || !f->names)
            return zt_fail(err, ZT_EFAIL, "%s: out of memory for %zu tensors", path, n);
    }
    st_span *spans = n ? xalloc(n * sizeof *spans) : NULL;
    zt_st_tensor *doc = n ? xalloc(n * sizeof *doc) : NULL; /* document order */
    if (n && (!spans || !doc)) {
        if (spans)
            xfree(spans, n * sizeof *spans);
        if (doc)
            xfree(doc, n * sizeof *doc);
        return zt_fail(err, ZT_EFAIL, "%s: out of memory for %zu tensors", path, n);
    }
    if ((rc = parse_entries(f, j, meta, doc, spans, err)) == ZT_OK &&
        (rc = check_duplicates(f, doc, n, err)) == ZT_OK &&
        (rc = check_tiling(path, spans, doc, n, data_bytes, err)) == ZT_OK) {
        for (size_t t = 0; t < n; t++) {
            f->tensors[t] = doc[spans[t].idx];
            f->tensors[t].data = data + spans[t].begin;
        }
        for (size_t t = 0; t < n; t++)
            f->by_name[t] = &f->tensors[t];
        if (n)
            qsort(f->by_name, n, sizeof *f->by_name, cmp_tensor_name);
    }
    if (n) {
        xfree(spans, n * sizeof *spans);
        xfree(doc, n * sizeof *doc);
    }
    return rc;
}

int zt_st_open(const char *path, zt_st_file **out, zt_err *err)
{
    *out = NULL;
    zt_st_file *f = xalloc(sizeof *f);
    if (!f || !(f->path = xstrdup(path))) {
        if (f)
            xfree(f, sizeof *f);
        return zt_fail(err, ZT_EFAIL, "%s: out of memory", path);
    }
    int rc = ZT_OK;
    int fd = -1;
    struct stat st;
    if ((rc = zt_open_input(path, NULL, &fd, &st, err))) {
        /* the message names the path and the kind */
    } else if (st.st_size < 8) {
        rc = zt_fail(err, ZT_EINPUT,
                     "%s: file is %lld bytes, too short (truncated) for the 8-byte header length",
                     path, (long long)st.st_size);
    } else if ((unsigned long long)st.st_size > SIZE_MAX) {
        rc = zt_fail(err, ZT_EINPUT, "%s: file too large to map", path);
    } else {
        /* The mapping is the tensors' storage: nothing is copied, and the page
         * cache shares it between ranks on one machine. */
        f->map_bytes = (size_t)st.st_size;
        f->map = mmap(NULL, f->map_bytes, PROT_READ, MAP_PRIVATE, fd, 0);
        if (f->map == MAP_FAILED) {
            f->map = NULL;
            rc = zt_fail(err, ZT_EFAIL, "%s: mmap of %zu bytes failed: %s", path, f->map_bytes,
                         strerror(errno));
        }
    }
    if (fd >= 0)
        close(fd);

    if (rc == ZT_OK) {
        const unsigned char *m = f->map;
        uint64_t hlen = 0;
        for (int b = 7; b >= 0; b--)
            hlen = (hlen << 8) | m[b];
        if (hlen > ST_MAX_HEADER) {
            rc = zt_fail(err, ZT_EINPUT,
                         "%s: header length %llu exceeds the %llu-byte limit (oversized header)",
                         path, (unsigned long long)hlen, ST_MAX_HEADER);
        } else if (hlen > f->map_bytes - 8) {
            rc = zt_fail(err, ZT_EINPUT,
                         "%s: header length %llu runs past the end of the file (%zu bytes): truncated",
                         path, (unsigned long long)hlen, f->map_bytes);
        } else if (hlen > ST_SANE_HEADER && hlen > f->map_bytes - 8 - hlen) {
            /* checked before parsing: a header of tens of MB took 20 s and 2 GB per
             * rank to parse before it was found to be wrong */
            rc = zt_fail(err, ZT_EINPUT,
                         "%s: header length %llu is over %llu bytes and larger than the %llu bytes of tensor data "
                         "it describes (a real model's tensors outweigh their descriptions); refused unparsed",
                         path, (unsigned long long)hlen, ST_SANE_HEADER,
                         (unsigned long long)(f->map_bytes - 8 - hlen));
        } else {
            zt_json j;
            rc = zt_json_parse(path, "header", m + 8, (size_t)hlen, 8, &j, err);
            if (rc == ZT_OK) {
                rc = st_load_header(f, &j, m + 8 + hlen, f->map_bytes - 8 - hlen, err);
                zt_json_free(&j);
            }
        }
    }
    if (rc) {
        zt_st_close(f);
        return rc;
    }
    *out = f;
    return ZT_OK;
}

int zt_st_count(const zt_st_file *f) { return f->n; }
const zt_st_tensor *zt_st_get(const zt_st_file *f, int i)
{
    return i >= 0 && i < f->n ? &f->tensors[i] : NULL;
}
const char *zt_st_metadata(const zt_st_file *f, const char *key)
{
    /* the first of a repeated key, as cJSON's lookup and the tensor check do */
    for (const char *p = f->meta; p && p < f->meta + f->meta_bytes;) {
        const char *v = p + strlen(p) + 1;
        if (!strcmp(p, key))
            return v;
        p = v + strlen(v) + 1;
    }
    return NULL;
}

const char *zt_st_path(const zt_st_file *f) { return f->path; }

const zt_st_tensor *zt_st_find(const zt_st_file *f, const char *name)
{
    size_t lo = 0, hi = (size_t)f->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(name, f->by_name[mid]->name);
        if (c == 0)
            return f->by_name[mid];
        if (c < 0)
            hi = mid;
        else
            lo = mid + 1;
    }
    return NULL;
}

/* ----------------------------------------------------------- writing a file */


/* zt_st_write_fill's parts: the length, the header, then each tensor, filled
 * into one scratch buffer the size of the largest just before it is written. */
typedef struct fill_parts {
    const zt_wpart *parts;
    const size_t *nbytes;
    zt_st_fill_fn fill;
    void *ctx;
    void *scratch;
} fill_parts;

static int fill_part(void *ctx, int i, zt_wpart *part, zt_err *err)
{
    fill_parts *fp = ctx;
    if (i < 2 || !fp->fill) {
        *part = fp->parts[i];
        return ZT_OK;
    }
    *part = (zt_wpart){fp->scratch, fp->nbytes[i - 2]};
    return fp->nbytes[i - 2] ? fp->fill(fp->ctx, i - 2, fp->scratch, err) : ZT_OK;
}

static int st_write(const char *path, const zt_st_out *tensors, int n, const char *const *meta,
                    zt_st_fill_fn fill, void *fill_ctx, zt_err *err);

int zt_st_write(const char *path, const zt_st_out *tensors, int n, const char *metadata_format,
                zt_err *err)
{
    const char *meta[] = {"format", metadata_format, NULL};
    return st_write(path, tensors, n, metadata_format ? meta : NULL, NULL, NULL, err);
}

int zt_st_write_meta(const char *path, const zt_st_out *tensors, int n, const char *const *meta, zt_err *err)
{
    return st_write(path, tensors, n, meta && meta[0] ? meta : NULL, NULL, NULL, err);
}

int zt_st_write_fill_meta(const char *path, const zt_st_out *tensors, int n, const char *const *meta,
                          zt_st_fill_fn fill, void *ctx, zt_err *err)
{
    if (!fill)
        return zt_fail(err, ZT_EFAIL, "%s: write: no fill function", path);
    return st_write(path, tensors, n, meta && meta[0] ? meta : NULL, fill, ctx, err);
}

/* One tensor to write, checked: a name that is not empty, valid UTF-8 and not
 * __metadata__; a known dtype; 0..ZT_ST_MAX_DIMS dimensions, none negative; a byte
 * size (numel * dtype size) that fits; data, unless a fill function provides it.
 * Its byte size in *nbytes. */
static int check_tensor(const char *path, const zt_st_out *t, int i, int have_fill, size_t *nbytes, zt_err *err)
{
    if (!t->name || !*t->name || strcmp(t->name, "__metadata__") == 0 ||
        zt_utf8_invalid_at((const unsigned char *)t->name, strlen(t->name)) != strlen(t->name))
        return zt_fail(err, ZT_EINPUT, "%s: write: tensor %d has an invalid name (empty, not UTF-8, or __metadata__)",
                       path, i);
    if (!st_name_of(t->dtype) || t->ndim < 0 || t->ndim > ZT_ST_MAX_DIMS)
        return zt_fail(err, ZT_EINPUT, "%s: write: tensor \"%s\": bad dtype or ndim %d", path, t->name, t->ndim);
    uint64_t numel = 1;
    for (int d = 0; d < t->ndim; d++) {
        if (t->shape[d] < 0)
            return zt_fail(err, ZT_EINPUT, "%s: write: tensor \"%s\": negative shape[%d]", path, t->name, d);
        if (t->shape[d] != 0 && numel > (uint64_t)INT64_MAX / (uint64_t)t->shape[d])
            return zt_fail(err, ZT_EINPUT, "%s: write: tensor \"%s\": shape overflows", path, t->name);
        numel *= (uint64_t)t->shape[d];
    }
    size_t es = zt_dtype_size(t->dtype);
    if (numel > SIZE_MAX / es)
        return zt_fail(err, ZT_EINPUT, "%s: write: tensor \"%s\": byte size overflows", path, t->name);
    *nbytes = (size_t)numel * es;
    if (*nbytes && !t->data && !have_fill)
        return zt_fail(err, ZT_EINPUT, "%s: write: tensor \"%s\" has no data", path, t->name);
    return ZT_OK;
}

/* Every tensor checked (check_tensor, byte sizes into nbytes) and no name twice
 * (names: scratch for n names, sorted to find a repeat). */
static int check_tensors(const char *path, const zt_st_out *tensors, int n, int have_fill, size_t *nbytes,
                         const char **names, zt_err *err)
{
    for (int i = 0; i < n; i++) {
        int rc = check_tensor(path, &tensors[i], i, have_fill, &nbytes[i], err);
        if (rc)
            return rc;
        names[i] = tensors[i].name;
    }
    if (n > 1) {
        qsort(names, (size_t)n, sizeof *names, cmp_cstr_ptr);
        for (int i = 1; i < n; i++)
            if (strcmp(names[i - 1], names[i]) == 0)
                return zt_fail(err, ZT_EINPUT, "%s: write: duplicate tensor name \"%s\"", path, names[i]);
    }
    return ZT_OK;
}

/* The JSON header into h: {"__metadata__":{key:value, ...}, name:{dtype, shape,
 * data_offsets}, ...} with the tensors' data back to back in list order, padded
 * with spaces to a multiple of 8 bytes, at most ST_MAX_HEADER. */
static int build_header(strbuf *h, const char *path, const zt_st_out *tensors, int n, const size_t *nbytes,
                        const char *const *meta, zt_err *err)
{
    sb_str(h, "{");
    if (meta) {
        sb_str(h, "\"__metadata__\":{");
        for (int i = 0; meta[i]; i += 2) {
            if (i)
                sb_str(h, ",");
            sb_json_string(h, meta[i]);
            sb_str(h, ":");
            sb_json_string(h, meta[i + 1]);
        }
        sb_str(h, "}");
    }
    uint64_t off = 0;
    for (int i = 0; i < n; i++) {
        const zt_st_out *t = &tensors[i];
        if (i || meta)
            sb_str(h, ",");
        sb_json_string(h, t->name);
        sb_printf(h, ":{\"dtype\":\"%s\",\"shape\":[", st_name_of(t->dtype));
        for (int d = 0; d < t->ndim; d++)
            sb_printf(h, d ? ",%lld" : "%lld", (long long)t->shape[d]);
        if (off > UINT64_MAX - nbytes[i])
            return zt_fail(err, ZT_EINPUT, "%s: write: total size overflows", path);
        sb_printf(h, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)off,
                  (unsigned long long)(off + nbytes[i]));
        off += nbytes[i];
    }
    sb_str(h, "}");
    /* Pad with spaces (valid trailing JSON whitespace) so the data section,
     * and with one dtype every tensor, starts 8-byte aligned. */
    while (!h->oom && h->len % 8)
        sb_str(h, " ");
    if (h->oom)
        return zt_fail(err, ZT_EFAIL, "%s: write: out of memory building the header", path);
    if (h->len > ST_MAX_HEADER)
        return zt_fail(err, ZT_EINPUT, "%s: write: header would be %zu bytes, over the limit", path, h->len);
    return ZT_OK;
}

/* The file, atomically: the header's length (8 bytes, little-endian), the header,
 * then each tensor's bytes (parts: scratch for n + 2 parts), from its data or, with
 * fill, filled into one scratch buffer the size of the largest tensor. */
static int write_file(const char *path, const zt_st_out *tensors, int n, const size_t *nbytes, const strbuf *h,
                      zt_st_fill_fn fill, void *fill_ctx, zt_wpart *parts, zt_err *err)
{
    unsigned char len8[8];
    for (int b = 0; b < 8; b++)
        len8[b] = (unsigned char)((uint64_t)h->len >> (8 * b));
    parts[0] = (zt_wpart){len8, 8};
    parts[1] = (zt_wpart){h->p, h->len};
    size_t largest = 0;
    for (int i = 0; i < n; i++) {
        parts[i + 2] = (zt_wpart){tensors[i].data, nbytes[i]};
        largest = nbytes[i] > largest ? nbytes[i] : largest;
    }
    fill_parts fp = {parts, nbytes, fill, fill_ctx, NULL};
    if (fill && largest && !(fp.scratch = xalloc(largest)))
        return zt_fail(err, ZT_EFAIL, "%s: out of memory for a %zu-byte tensor", path, largest);
    int rc = zt_write_atomic_fn(path, n + 2, fill_part, &fp, err);
    if (fp.scratch)
        xfree(fp.scratch, largest);
    return rc;
}

/* Everything is checked, and the header built, before the disk is touched. */
static int st_write(const char *path, const zt_st_out *tensors, int n, const char *const *meta,
                    zt_st_fill_fn fill, void *fill_ctx, zt_err *err)
{
    if (n < 0 || (n > 0 && !tensors))
        return zt_fail(err, ZT_EINPUT, "%s: write: bad tensor list (n = %d)", path, n);
    for (int i = 0; meta && meta[i]; i++)
        if (zt_utf8_invalid_at((const unsigned char *)meta[i], strlen(meta[i])) != strlen(meta[i]) ||
            (i % 2 == 0 && !meta[i + 1]))
            return zt_fail(err, ZT_EINPUT, "%s: write: metadata is not valid UTF-8 key/value pairs", path);

    size_t *nbytes = n ? xalloc((size_t)n * sizeof *nbytes) : NULL;
    const char **names = n ? xalloc((size_t)n * sizeof *names) : NULL;
    zt_wpart *parts = xalloc(((size_t)n + 2) * sizeof *parts);
    strbuf h = {0};
    int rc = ZT_OK;
    if ((n && (!nbytes || !names)) || !parts)
        rc = zt_fail(err, ZT_EFAIL, "%s: out of memory", path);
    if (rc == ZT_OK)
        rc = check_tensors(path, tensors, n, fill != NULL, nbytes, names, err);
    if (rc == ZT_OK)
        rc = build_header(&h, path, tensors, n, nbytes, meta, err);
    if (rc == ZT_OK)
        rc = write_file(path, tensors, n, nbytes, &h, fill, fill_ctx, parts, err);
    sb_free(&h);
    if (nbytes)
        xfree(nbytes, (size_t)n * sizeof *nbytes);
    if (names)
        xfree(names, (size_t)n * sizeof *names);
    if (parts)
        xfree(parts, ((size_t)n + 2) * sizeof *parts);
    return rc;
}
