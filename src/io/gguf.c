/* gguf.c — the GGUF reader: header parse with every bound checked once (gguf.h). */
#include "gguf.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../core/input.h"
#include "../core/mem.h"
#include "../core/text.h"

/* Limits beyond the file's size: a header that claims more is refused before any
 * allocation sized by it.  A real model has a few hundred tensors and a few dozen
 * keys; a vocabulary array has at most a few hundred thousand strings. */
#define GGUF_MAX_TENSORS (1u << 20)
#define GGUF_MAX_KVS (1u << 16)
#define GGUF_MAX_NAME 65536u

struct zt_gguf {
    char *path;
    size_t path_bytes;
    uint8_t *map;
    size_t size;
    uint32_t version;
    uint64_t nkv, ntensors;
    zt_gguf_kv *kvs;
    zt_gguf_tensor *tensors;
    size_t data_start;
};

/* A cursor over the header: every read checks that its bytes are inside the file. */
typedef struct cur {
    const zt_gguf *g;
    size_t pos;
    zt_err *err;
} cur;

static int need(cur *c, uint64_t n, const char *field)
{
    if (n > c->g->size - c->pos)
        return zt_fail(c->err, ZT_EINPUT, "%s: %s at byte %zu needs %" PRIu64 " bytes but the file ends at %zu "
                       "(truncated, or a length beyond the file)", c->g->path, field, c->pos, n, c->g->size);
    return ZT_OK;
}

static uint64_t le(const uint8_t *p, int n)
{
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

static int rd_u32(cur *c, uint32_t *v, const char *field)
{
    if (need(c, 4, field))
        return ZT_EINPUT;
    *v = (uint32_t)le(c->g->map + c->pos, 4);
    c->pos += 4;
    return ZT_OK;
}

static int rd_u64(cur *c, uint64_t *v, const char *field)
{
    if (need(c, 8, field))
        return ZT_EINPUT;
    *v = le(c->g->map + c->pos, 8);
    c->pos += 8;
    return ZT_OK;
}

/* A string: u64 length, then that many bytes inside the file; utf8 asks that
 * they be valid UTF-8 (keys and names: JSON and messages carry them). */
static int rd_str(cur *c, zt_gguf_str *s, const char *field, int utf8)
{
    uint64_t n;
    if (rd_u64(c, &n, field) || need(c, n, field))
        return ZT_EINPUT;
    s->s = (const char *)c->g->map + c->pos;
    s->len = n;
    if (utf8) {
        size_t bad = zt_utf8_invalid_at((const unsigned char *)s->s, (size_t)n);
        if (bad < n)
            return zt_fail(c->err, ZT_EINPUT, "%s: %s at byte %zu is not valid UTF-8 (at its byte %zu)",
                           c->g->path, field, c->pos, bad);
    }
    c->pos += n;
    return ZT_OK;
}

/* A NUL-terminated accounted copy of a name (keys, tensor names). */
static int dup_name(cur *c, const zt_gguf_str *s, const char *field, const char **out)
{
    if (s->len > GGUF_MAX_NAME)
        return zt_fail(c->err, ZT_EINPUT, "%s: %s is %" PRIu64 " bytes long (limit %u)", c->g->path, field,
                       s->len, GGUF_MAX_NAME);
    char *p = zt_alloc(ZT_MEM_OTHER, s->len + 1);
    if (!p)
        return zt_fail(c->err, ZT_EFAIL, "%s: out of memory", c->g->path);
    memcpy(p, s->s, s->len);
    if (memchr(p, 0, s->len)) {
        zt_free(ZT_MEM_OTHER, p, s->len + 1);
        return zt_fail(c->err, ZT_EINPUT, "%s: %s contains a NUL byte", c->g->path, field);
    }
    *out = p;
    return ZT_OK;
}

/* The value of kv (its type already read): scalars, strings, arrays of either
 * (arrays of arrays are refused: no llama metadata uses them). */
static int rd_value(cur *c, zt_gguf_kv *kv)
{
    char field[300];
    snprintf(field, sizeof field, "value of key \"%.200s\"", kv->key);
    kv->count = 1;
    kv->elem = kv->type;
    if (kv->type == ZT_GGUF_ARRAY) {
        if (rd_u32(c, &kv->elem, field) || rd_u64(c, &kv->count, field))
            return ZT_EINPUT;
        if (kv->elem == ZT_GGUF_ARRAY)
            return zt_fail(c->err, ZT_EINPUT, "%s: %s is an array of arrays (not supported)", c->g->path, field);
    }
    int es = zt_gguf_vtype_size(kv->elem);
    if (!es && kv->elem != ZT_GGUF_STRING)
        return zt_fail(c->err, ZT_EINPUT, "%s: %s has unknown value type %u", c->g->path, field, kv->elem);
    /* each element takes at least es bytes (a string its 8-byte length): a count
     * the rest of the file cannot hold is refused before anything is allocated */
    uint64_t min = es ? (uint64_t)es : 8;
    if (kv->count > (c->g->size - c->pos) / min)
        return zt_fail(c->err, ZT_EINPUT, "%s: %s claims %" PRIu64 " elements, more than the %zu bytes left "
                       "can hold (a huge count, or the file is truncated)", c->g->path, field, kv->count, c->g->size - c->pos);
    kv->val = c->g->map + c->pos;
    if (es) {
        c->pos += (size_t)kv->count * (size_t)es;
        return ZT_OK;
    }
    if (kv->count && !(kv->strs = zt_alloc(ZT_MEM_OTHER, kv->count * sizeof *kv->strs)))
        return zt_fail(c->err, ZT_EFAIL, "%s: out of memory", c->g->path);
    for (uint64_t i = 0; i < kv->count; i++)
        if (rd_str(c, &kv->strs[i], field, 1))
            return ZT_EINPUT;
    return ZT_OK;
}

static int rd_kvs(cur *c, zt_gguf *g)
{
    for (uint64_t i = 0; i < g->nkv; i++) {
        zt_gguf_kv *kv = &g->kvs[i];
        zt_gguf_str k;
        char field[64];
        snprintf(field, sizeof field, "key %" PRIu64, i);
        if (rd_str(c, &k, field, 1) || dup_name(c, &k, field, &kv->key))
            return ZT_EINPUT;
        for (uint64_t j = 0; j < i; j++)
            if (!strcmp(g->kvs[j].key, kv->key))
                return zt_fail(c->err, ZT_EINPUT, "%s: key \"%s\" appears twice", g->path, kv->key);
        snprintf(field, sizeof field, "type of key %" PRIu64, i);
        if (rd_u32(c, &kv->type, field) || rd_value(c, kv))
            return ZT_EINPUT;
    }
    return ZT_OK;
}

/* One tensor's description; its bytes are placed once the data section is known. */
static int rd_tensor_info(cur *c, zt_gguf *g, zt_gguf_tensor *t, uint64_t *offset, uint64_t i)
{
    zt_gguf_str name;
    char field[320];
    snprintf(field, sizeof field, "tensor %" PRIu64 "'s name", i);
    if (rd_str(c, &name, field, 1) || dup_name(c, &name, field, &t->name))
        return ZT_EINPUT;
    snprintf(field, sizeof field, "tensor \"%.200s\"", t->name);
    uint32_t nd;
    if (rd_u32(c, &nd, field))
        return ZT_EINPUT;
    if (nd < 1 || nd > ZT_GGUF_MAX_DIMS)
        return zt_fail(c->err, ZT_EINPUT, "%s: %s has %u dimensions (1 to %d)", g->path, field, nd,
                       ZT_GGUF_MAX_DIMS);
    t->ndim = (int)nd;
    uint64_t numel = 1;
    for (int d = 0; d < t->ndim; d++) {
        uint64_t n;
        if (rd_u64(c, &n, field))
            return ZT_EINPUT;
        /* the product is bounded by 2^62 so that it and its byte count fit */
        if (n == 0 || n > (UINT64_C(1) << 62) / numel)
            return zt_fail(c->err, ZT_EINPUT, "%s: %s dimension %d is %" PRIu64 " (zero, or the element count "
                           "overflows)", g->path, field, d, n);
        t->dims[d] = (int64_t)n;
        numel *= n;
    }
    t->numel = (int64_t)numel;
    if (rd_u32(c, &t->type, field) || rd_u64(c, offset, field))
        return ZT_EINPUT;
    const zt_ggml_type_info *ti = zt_ggml_type_get(t->type);
    if (!ti)
        return zt_fail(c->err, ZT_EINPUT, "%s: %s has unknown tensor type %u", g->path, field, t->type);
    if (t->dims[0] % ti->block)
        return zt_fail(c->err, ZT_EINPUT, "%s: %s row length %" PRId64 " is not a multiple of %s's block of %d",
                       g->path, field, t->dims[0], ti->name, ti->block);
    t->nbytes = (size_t)(numel / (uint64_t)ti->block * (uint64_t)ti->bytes);
    for (uint64_t j = 0; j < i; j++)
        if (!strcmp(g->tensors[j].name, t->name))
            return zt_fail(c->err, ZT_EINPUT, "%s: tensor \"%s\" appears twice", g->path, t->name);
    return ZT_OK;
}

typedef struct span {
    uint64_t begin, end;
    uint64_t i;
} span;

static int span_cmp(const void *a, const void *b)
{
    const span *x = a, *y = b;
    return x->begin < y->begin ? -1 : x->begin > y->begin;
}

static int alignment(cur *c, const zt_gguf *g, uint64_t *align)
{
    *align = ZT_GGUF_DEFAULT_ALIGNMENT;
    const zt_gguf_kv *kv = zt_gguf_find(g, "general.alignment");
    if (!kv)
        return ZT_OK;
    if (kv->type != ZT_GGUF_UINT32)
        return zt_fail(c->err, ZT_EINPUT, "%s: key \"general.alignment\" must be a uint32", g->path);
    *align = le(kv->val, 4);
    if (*align == 0 || (*align & (*align - 1)))
        return zt_fail(c->err, ZT_EINPUT, "%s: key \"general.alignment\" is %" PRIu64 ", not a power of two",
                       g->path, *align);
    return ZT_OK;
}

/* The data section starts at the header's end rounded up to the alignment; each
 * tensor's offset is aligned, its bytes inside the file, and, sorted by offset,
 * no tensor overlaps the next. */
static int place_tensors(cur *c, zt_gguf *g, const uint64_t *offsets, span *spans)
{
    uint64_t align;
    if (alignment(c, g, &align))
        return ZT_EINPUT;
    uint64_t start = (c->pos + align - 1) / align * align;
    if (start > g->size)
        return zt_fail(c->err, ZT_EINPUT, "%s: the data section would start at byte %" PRIu64 ", past the end of "
                       "the file (%zu bytes): truncated", g->path, start, g->size);
    g->data_start = (size_t)start;
    uint64_t avail = g->size - start;
    for (uint64_t i = 0; i < g->ntensors; i++) {
        zt_gguf_tensor *t = &g->tensors[i];
        if (offsets[i] % align)
            return zt_fail(c->err, ZT_EINPUT, "%s: tensor \"%s\" offset %" PRIu64 " is not a multiple of the "
                           "alignment %" PRIu64, g->path, t->name, offsets[i], align);
        if (offsets[i] > avail || t->nbytes > avail - offsets[i])
            return zt_fail(c->err, ZT_EINPUT, "%s: tensor \"%s\" bytes [%" PRIu64 ", %" PRIu64 ") of the data "
                           "section run past its end (%" PRIu64 " bytes): offset out of range or file truncated",
                           g->path, t->name, offsets[i], offsets[i] + (uint64_t)t->nbytes, avail);
        t->data = g->map + start + offsets[i];
        spans[i] = (span){offsets[i], offsets[i] + t->nbytes, i};
    }
    if (g->ntensors)
        qsort(spans, g->ntensors, sizeof *spans, span_cmp);
    for (uint64_t i = 1; i < g->ntensors; i++)
        if (spans[i].begin < spans[i - 1].end)
            return zt_fail(c->err, ZT_EINPUT, "%s: tensors \"%s\" and \"%s\" overlap in the data section", g->path,
                           g->tensors[spans[i - 1].i].name, g->tensors[spans[i].i].name);
    return ZT_OK;
}

static int rd_counts(cur *c, zt_gguf *g)
{
    uint32_t magic;
    if (rd_u32(c, &magic, "magic"))
        return ZT_EINPUT;
    if (magic != ZT_GGUF_MAGIC)
        return zt_fail(c->err, ZT_EINPUT, "%s: magic is not \"GGUF\" (not a GGUF file)", g->path);
    if (rd_u32(c, &g->version, "version"))
        return ZT_EINPUT;
    if (g->version != 2 && g->version != 3)
        return zt_fail(c->err, ZT_EINPUT, "%s: version %u is not supported (2 and 3 are; a big-endian file "
                       "reads as a huge version)", g->path, g->version);
    if (rd_u64(c, &g->ntensors, "tensor_count") || rd_u64(c, &g->nkv, "kv_count"))
        return ZT_EINPUT;
    /* a tensor's description takes at least 28 bytes, a key's 13 */
    uint64_t left = g->size - c->pos;
    if (g->ntensors > GGUF_MAX_TENSORS || g->ntensors > left / 28)
        return zt_fail(c->err, ZT_EINPUT, "%s: tensor_count %" PRIu64 " is more than the file can hold (a huge "
                       "count, or the file is truncated)", g->path,
                       g->ntensors);
    if (g->nkv > GGUF_MAX_KVS || g->nkv > left / 13)
        return zt_fail(c->err, ZT_EINPUT, "%s: kv_count %" PRIu64 " is more than the file can hold (a huge "
                       "count, or the file is truncated)", g->path,
                       g->nkv);
    if ((g->nkv && !(g->kvs = zt_alloc(ZT_MEM_OTHER, g->nkv * sizeof *g->kvs))) ||
        (g->ntensors && !(g->tensors = zt_alloc(ZT_MEM_OTHER, g->ntensors * sizeof *g->tensors))))
        return zt_fail(c->err, ZT_EFAIL, "%s: out of memory", g->path);
    return ZT_OK;
}

static int parse(zt_gguf *g, zt_err *err)
{
    cur c = {g, 0, err};
    int rc = rd_counts(&c, g);
    if (rc || (rc = rd_kvs(&c, g)))
        return rc;
    size_t tbytes = (size_t)g->ntensors * (sizeof(uint64_t) + sizeof(span));
    uint8_t *scratch = tbytes ? zt_alloc(ZT_MEM_OTHER, tbytes) : NULL;
    if (tbytes && !scratch)
        return zt_fail(err, ZT_EFAIL, "%s: out of memory", g->path);
    uint64_t *offsets = (uint64_t *)scratch;
    span *spans = (span *)(scratch + g->ntensors * sizeof(uint64_t));
    for (uint64_t i = 0; i < g->ntensors && rc == ZT_OK; i++)
        rc = rd_tensor_info(&c, g, &g->tensors[i], &offsets[i], i);
    if (rc == ZT_OK)
        rc = place_tensors(&c, g, offsets, spans);
    if (scratch)
        zt_free(ZT_MEM_OTHER, scratch, tbytes);
    return rc;
}

int zt_gguf_is_file(const char *path)
{
    /* only a regular file is opened: a FIFO would block the open */
    struct stat sb;
    if (stat(path, &sb) != 0 || !S_ISREG(sb.st_mode))
        return 0;
    FILE *f = fopen(path, "rb");
    uint8_t m[4];
    int yes = f && fread(m, 1, 4, f) == 4 && le(m, 4) == ZT_GGUF_MAGIC;
    if (f)
        fclose(f);
    return yes;
}

int zt_gguf_open(const char *path, zt_gguf **out, zt_err *err)
{
    *out = NULL;
    zt_gguf *g = zt_alloc(ZT_MEM_OTHER, sizeof *g);
    size_t pb = strlen(path) + 1;
    if (!g || !(g->path = zt_alloc(ZT_MEM_OTHER, pb))) {
        if (g)
            zt_free(ZT_MEM_OTHER, g, sizeof *g);
        return zt_fail(err, ZT_EFAIL, "%s: out of memory", path);
    }
    memcpy(g->path, path, pb);
    g->path_bytes = pb;
    int fd = -1, rc;
    struct stat st;
    if ((rc = zt_open_input(path, NULL, &fd, &st, err)) == ZT_OK) {
        if (st.st_size < 24) {
            rc = zt_fail(err, ZT_EINPUT, "%s: file is %lld bytes, too short for a GGUF header (truncated)", path,
                         (long long)st.st_size);
        } else {
            g->size = (size_t)st.st_size;
            g->map = mmap(NULL, g->size, PROT_READ, MAP_PRIVATE, fd, 0);
            if (g->map == MAP_FAILED) {
                g->map = NULL;
                rc = zt_fail(err, ZT_EFAIL, "%s: mmap of %zu bytes failed: %s", path, g->size, strerror(errno));
            }
        }
        close(fd);
    }
    if (rc == ZT_OK)
        rc = parse(g, err);
    if (rc) {
        zt_gguf_close(g);
        return rc;
    }
    *out = g;
    return ZT_OK;
}

void zt_gguf_close(zt_gguf *g)
{
    if (!g)
        return;
    for (uint64_t i = 0; g->kvs && i < g->nkv; i++) {
        zt_gguf_kv *kv = &g->kvs[i];
        if (kv->key)
            zt_free(ZT_MEM_OTHER, (void *)kv->key, strlen(kv->key) + 1);
        if (kv->strs)
            zt_free(ZT_MEM_OTHER, kv->strs, kv->count * sizeof *kv->strs);
    }
    for (uint64_t i = 0; g->tensors && i < g->ntensors; i++)
        if (g->tensors[i].name)
            zt_free(ZT_MEM_OTHER, (void *)g->tensors[i].name, strlen(g->tensors[i].name) + 1);
    if (g->kvs)
        zt_free(ZT_MEM_OTHER, g->kvs, g->nkv * sizeof *g->kvs);
    if (g->tensors)
        zt_free(ZT_MEM_OTHER, g->tensors, g->ntensors * sizeof *g->tensors);
    if (g->map)
        munmap(g->map, g->size);
    zt_free(ZT_MEM_OTHER, g->path, g->path_bytes);
    zt_free(ZT_MEM_OTHER, g, sizeof *g);
}

const char *zt_gguf_path(const zt_gguf *g) { return g->path; }
uint32_t zt_gguf_version(const zt_gguf *g) { return g->version; }
int zt_gguf_kv_count(const zt_gguf *g) { return (int)g->nkv; }
const zt_gguf_kv *zt_gguf_kv_at(const zt_gguf *g, int i) { return &g->kvs[i]; }
int zt_gguf_tensor_count(const zt_gguf *g) { return (int)g->ntensors; }
const zt_gguf_tensor *zt_gguf_tensor_at(const zt_gguf *g, int i) { return &g->tensors[i]; }

const zt_gguf_kv *zt_gguf_find(const zt_gguf *g, const char *key)
{
    for (uint64_t i = 0; i < g->nkv; i++)
        if (g->kvs[i].key && !strcmp(g->kvs[i].key, key))
            return &g->kvs[i];
    return NULL;
}

const zt_gguf_tensor *zt_gguf_tensor_find(const zt_gguf *g, const char *name)
{
    for (uint64_t i = 0; i < g->ntensors; i++)
        if (!strcmp(g->tensors[i].name, name))
            return &g->tensors[i];
    return NULL;
}

/* Element i of a numeric value of type t at p, as int64 (*is_int 1) or double. */
static void num_at(uint32_t t, const uint8_t *p, int64_t *iv, double *fv, int *is_int)
{
    *is_int = 1;
    switch (t) {
    case ZT_GGUF_UINT8: case ZT_GGUF_BOOL: *iv = p[0]; break;
    case ZT_GGUF_INT8: *iv = (int8_t)p[0]; break;
    case ZT_GGUF_UINT16: *iv = (uint16_t)le(p, 2); break;
    case ZT_GGUF_INT16: *iv = (int16_t)le(p, 2); break;
    case ZT_GGUF_UINT32: *iv = (uint32_t)le(p, 4); break;
    case ZT_GGUF_INT32: *iv = (int32_t)le(p, 4); break;
    case ZT_GGUF_INT64: *iv = (int64_t)le(p, 8); break;
    case ZT_GGUF_UINT64: { /* above INT64_MAX reads as -1: callers refuse negatives */
        uint64_t u = le(p, 8);
        *iv = u > INT64_MAX ? -1 : (int64_t)u;
        break;
    }
    case ZT_GGUF_FLOAT32: {
        uint32_t u = (uint32_t)le(p, 4);
        float f;
        memcpy(&f, &u, 4);
        *fv = f, *is_int = 0;
        break;
    }
    case ZT_GGUF_FLOAT64: {
        uint64_t u = le(p, 8);
        memcpy(fv, &u, 8);
        *is_int = 0;
        break;
    }
    default: *is_int = -1;
    }
}

double zt_gguf_arr_float(const zt_gguf_kv *kv, uint64_t i)
{
    int64_t iv = 0;
    double fv = 0;
    int is_int;
    num_at(kv->elem, kv->val + i * (uint64_t)zt_gguf_vtype_size(kv->elem), &iv, &fv, &is_int);
    return is_int == 1 ? (double)iv : fv;
}

int64_t zt_gguf_arr_int(const zt_gguf_kv *kv, uint64_t i)
{
    int64_t iv = 0;
    double fv = 0;
    int is_int;
    num_at(kv->elem, kv->val + i * (uint64_t)zt_gguf_vtype_size(kv->elem), &iv, &fv, &is_int);
    return is_int == 1 ? iv : (int64_t)fv;
}

static const zt_gguf_kv *scalar(const zt_gguf *g, const char *key, int *present)
{
    const zt_gguf_kv *kv = zt_gguf_find(g, key);
    if (present)
        *present = kv != NULL;
    return kv;
}

int zt_gguf_get_int(const zt_gguf *g, const char *key, int64_t *out, int *present, zt_err *err)
{
    const zt_gguf_kv *kv = scalar(g, key, present);
    if (!kv)
        return ZT_OK;
    int64_t iv = 0;
    double fv;
    int is_int;
    num_at(kv->type, kv->val, &iv, &fv, &is_int);
    if (is_int != 1 || kv->type == ZT_GGUF_BOOL || iv < 0)
        return zt_fail(err, ZT_EINPUT, "%s: key \"%s\" must be a non-negative integer below 2^63", g->path, key);
    *out = iv;
    return ZT_OK;
}

int zt_gguf_get_float(const zt_gguf *g, const char *key, double *out, int *present, zt_err *err)
{
    const zt_gguf_kv *kv = scalar(g, key, present);
    if (!kv)
        return ZT_OK;
    int64_t iv = 0;
    double fv = 0;
    int is_int;
    num_at(kv->type, kv->val, &iv, &fv, &is_int);
    if (is_int < 0 || kv->type == ZT_GGUF_BOOL)
        return zt_fail(err, ZT_EINPUT, "%s: key \"%s\" must be a number", g->path, key);
    *out = is_int ? (double)iv : fv;
    return ZT_OK;
}

int zt_gguf_get_bool(const zt_gguf *g, const char *key, int *out, int *present, zt_err *err)
{
    const zt_gguf_kv *kv = scalar(g, key, present);
    if (!kv)
        return ZT_OK;
    if (kv->type != ZT_GGUF_BOOL || kv->val[0] > 1)
        return zt_fail(err, ZT_EINPUT, "%s: key \"%s\" must be a bool (0 or 1)", g->path, key);
    *out = kv->val[0];
    return ZT_OK;
}

int zt_gguf_get_str(const zt_gguf *g, const char *key, zt_gguf_str *out, int *present, zt_err *err)
{
    const zt_gguf_kv *kv = scalar(g, key, present);
    if (!kv)
        return ZT_OK;
    if (kv->type != ZT_GGUF_STRING)
        return zt_fail(err, ZT_EINPUT, "%s: key \"%s\" must be a string", g->path, key);
    *out = kv->strs[0];
    return ZT_OK;
}
