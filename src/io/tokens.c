/* tokens.c — token streams from .npy, .bin and .txt files (see tokens.h).
 *
 * Promise: zt_tokens_load returns a non-empty stream of ids in [0, 2^31), in an
 * accounted buffer, or ZT_EINPUT naming the file and the fault (with the index of
 * an out-of-range token).  The file is mapped, not copied, while it is converted,
 * so the only resident copy is the int32 stream.  A malformed file never makes
 * the loader read outside it. */
#include "tokens.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../core/fs.h"
#include "../core/input.h"
#include "../core/mem.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "token files are little-endian and read with memcpy: little-endian hosts only"
#endif

/* ------------------------------------------------------------- .npy header */

/* The header is a Python dict literal as numpy writes it:
 *   {'descr': '<u2', 'fortran_order': False, 'shape': (1000,), }
 * padded with spaces and ended by '\n'.  This parser accepts exactly that
 * language (no eval): quoted keys, a quoted descr, True/False, a tuple of ints. */
typedef struct npy_cursor {
    const char *s;
    size_t i, n;
} npy_cursor;

static void npy_ws(npy_cursor *c)
{
    while (c->i < c->n && (c->s[c->i] == ' ' || c->s[c->i] == '\t' || c->s[c->i] == '\n' || c->s[c->i] == '\r'))
        c->i++;
}
static int npy_eat(npy_cursor *c, char ch)
{
    npy_ws(c);
    if (c->i < c->n && c->s[c->i] == ch) {
        c->i++;
        return 1;
    }
    return 0;
}
/* A quoted string with printable ASCII and no escapes (numpy never needs them). */
static int npy_str(npy_cursor *c, char *buf, size_t cap)
{
    npy_ws(c);
    if (c->i >= c->n || (c->s[c->i] != '\'' && c->s[c->i] != '"'))
        return 0;
    char q = c->s[c->i++];
    size_t len = 0;
    while (c->i < c->n && c->s[c->i] != q) {
        char ch = c->s[c->i++];
        if (ch < 0x20 || ch > 0x7e || ch == '\\' || len + 1 >= cap)
            return 0;
        buf[len++] = ch;
    }
    if (c->i >= c->n)
        return 0;
    c->i++;
    buf[len] = 0;
    return 1;
}
static int npy_word(npy_cursor *c, const char *w)
{
    npy_ws(c);
    size_t l = strlen(w);
    if (c->n - c->i >= l && memcmp(c->s + c->i, w, l) == 0) {
        c->i += l;
        return 1;
    }
    return 0;
}

typedef struct npy_header {
    char descr[16];
    int fortran;
    int ndim;            /* dimensions seen (only the first is kept) */
    uint64_t dim0;
    int have_descr, have_fortran, have_shape;
} npy_header;

/* Returns NULL on success, or a short description of what was wrong. */
static const char *npy_parse_dict(npy_cursor *c, npy_header *h)
{
    if (!npy_eat(c, '{'))
        return "header does not start with '{'";
    for (;;) {
        if (npy_eat(c, '}'))
            break;
        char key[32];
        if (!npy_str(c, key, sizeof key))
            return "expected a quoted key";
        if (!npy_eat(c, ':'))
            return "expected ':' after a key";
        if (strcmp(key, "descr") == 0) {
            if (h->have_descr++)
                return "duplicate key 'descr'";
            if (!npy_str(c, h->descr, sizeof h->descr))
                return "'descr' is not a simple dtype string (structured dtypes are not token ids)";
        } else if (strcmp(key, "fortran_order") == 0) {
            if (h->have_fortran++)
                return "duplicate key 'fortran_order'";
            if (npy_word(c, "True"))
                h->fortran = 1;
            else if (!npy_word(c, "False"))
                return "'fortran_order' is not True or False";
        } else if (strcmp(key, "shape") == 0) {
            if (h->have_shape++)
                return "duplicate key 'shape'";
            if (!npy_eat(c, '('))
                return "'shape' is not a tuple";
            int commas = 0;
            for (;;) {
                npy_ws(c);
                if (npy_eat(c, ')'))
                    break;
                if (c->i >= c->n || c->s[c->i] < '0' || c->s[c->i] > '9')
                    return "'shape' holds something other than non-negative integers";
                uint64_t v = 0;
                while (c->i < c->n && c->s[c->i] >= '0' && c->s[c->i] <= '9') {
                    if (v > ((uint64_t)1 << 60))
                        return "'shape' entry is too large";
                    v = v * 10 + (uint64_t)(c->s[c->i++] - '0');
                }
                if (c->i < c->n && c->s[c->i] == 'L') /* written by Python 2 */
                    c->i++;
                if (h->ndim++ == 0)
                    h->dim0 = v;
                if (npy_eat(c, ','))
                    commas++;
                else if (npy_eat(c, ')'))
                    break;
                else
                    return "'shape' is not a tuple of integers";
            }
            /* "(5)" is the int 5 in Python, not a tuple: numpy never writes it. */
            if (h->ndim == 1 && commas == 0)
                return "'shape' is not a tuple (missing the trailing comma)";
        } else {
            return "unexpected key (expected 'descr', 'fortran_order', 'shape')";
        }
        if (npy_eat(c, ','))
            continue;
        if (npy_eat(c, '}'))
            break;
        return "expected ',' or '}'";
    }
    npy_ws(c);
    if (c->i != c->n)
        return "unexpected text after the dict";
    if (!h->have_descr || !h->have_fortran || !h->have_shape)
        return "missing 'descr', 'fortran_order' or 'shape'";
    return NULL;
}

/* ------------------------------------------------------------ conversion */

static int out_of_range(const char *path, size_t i, int64_t sv, uint64_t uv, int negative, zt_err *err)
{
    if (negative)
        return zt_fail(err, ZT_EINPUT, "%s: token at index %zu is negative (%lld)", path, i, (long long)sv);
    return zt_fail(err, ZT_EINPUT, "%s: token at index %zu is %llu, out of range (>= 2^31)", path, i,
                   (unsigned long long)uv);
}

static int alloc_ids(const char *path, size_t n, zt_tokens *out, zt_err *err)
{
    if (n > SIZE_MAX / sizeof(int32_t) || !(out->ids = zt_alloc(ZT_MEM_OTHER, n * sizeof(int32_t))))
        return zt_fail(err, ZT_EFAIL, "%s: out of memory for %zu tokens", path, n);
    out->n = n;
    return ZT_OK;
}

/* Convert n little-endian integers of `size` bytes at p, checking each fits. */
static int convert(const char *path, const unsigned char *p, size_t n, int size, int is_signed,
                   zt_tokens *out, zt_err *err)
{
    int rc = alloc_ids(path, n, out, err);
    if (rc)
        return rc;
    int32_t max = 0;
    /* One loop per element type keeps the per-token work to a load and a
     * compare; the value is widened to 64 bits first so one range check serves
     * every width. */
#define ZT_CONVERT(T, W, LOW_OK)                                                           \
    for (size_t i = 0; i < n; i++) {                                                       \
        T raw;                                                                             \
        memcpy(&raw, p + i * sizeof(T), sizeof(T));                                        \
        W v = raw;                                                                         \
        if (!(LOW_OK) || v > (W)INT32_MAX) {                                               \
            rc = out_of_range(path, i, (int64_t)v, (uint64_t)v, !(LOW_OK), err);           \
            break;                                                                         \
        }                                                                                  \
        out->ids[i] = (int32_t)v;                                                          \
        if ((int32_t)v > max)                                                              \
            max = (int32_t)v;                                                              \
    }
    switch (size * (is_signed ? -1 : 1)) {
    case 1: ZT_CONVERT(uint8_t, uint64_t, 1) break;
    case 2: ZT_CONVERT(uint16_t, uint64_t, 1) break;
    case 4: ZT_CONVERT(uint32_t, uint64_t, 1) break;
    case 8: ZT_CONVERT(uint64_t, uint64_t, 1) break;
    case -1: ZT_CONVERT(int8_t, int64_t, v >= 0) break;
    case -2: ZT_CONVERT(int16_t, int64_t, v >= 0) break;
    case -4: ZT_CONVERT(int32_t, int64_t, v >= 0) break;
    case -8: ZT_CONVERT(int64_t, int64_t, v >= 0) break;
    default: rc = zt_fail(err, ZT_EFAIL, "%s: internal: element size %d", path, size);
    }
#undef ZT_CONVERT
    if (rc) {
        zt_tokens_free(out);
        return rc;
    }
    out->max_id = max;
    return ZT_OK;
}

/* ------------------------------------------------------------ the formats */

static int load_npy(const char *path, const unsigned char *p, size_t size, zt_tokens *out, zt_err *err)
{
    if (size < 6 || memcmp(p, "\x93NUMPY", 6) != 0)
        return zt_fail(err, ZT_EINPUT, "%s: not a .npy file (bad magic; expected \\x93NUMPY)", path);
    if (size < 10)
        return zt_fail(err, ZT_EINPUT, "%s: .npy file is %zu bytes, truncated inside the preamble", path, size);
    int major = p[6], minor = p[7];
    size_t hstart, hlen;
    if (minor != 0)
        major = -1; /* numpy has only ever written x.0 */
    if (major == 1) {
        hstart = 10, hlen = (size_t)p[8] | (size_t)p[9] << 8;
    } else if (major == 2 || major == 3) {
        if (size < 12)
            return zt_fail(err, ZT_EINPUT, "%s: .npy file is %zu bytes, truncated inside the preamble", path, size);
        hstart = 12, hlen = (size_t)p[8] | (size_t)p[9] << 8 | (size_t)p[10] << 16 | (size_t)p[11] << 24;
    } else {
        return zt_fail(err, ZT_EINPUT, "%s: unsupported .npy format version %d.%d (expected 1.0, 2.0 or 3.0)",
                       path, major, minor);
    }
    if (hlen > size - hstart)
        return zt_fail(err, ZT_EINPUT, "%s: .npy header length %zu runs past the end of the file (%zu bytes): truncated",
                       path, hlen, size);

    npy_header h = {0};
    npy_cursor c = {(const char *)p + hstart, 0, hlen};
    const char *bad = npy_parse_dict(&c, &h);
    if (bad)
        return zt_fail(err, ZT_EINPUT, "%s: bad .npy header: %s (at header byte %zu)", path, bad, c.i);
    if (h.fortran)
        return zt_fail(err, ZT_EINPUT, "%s: .npy array is in Fortran order; expected C order", path);
    if (h.ndim != 1)
        return zt_fail(err, ZT_EINPUT, "%s: .npy array is %d-D; expected a 1-D array of token ids", path, h.ndim);

    /* descr is <byte order><kind><size>: '<' little-endian, '|' not applicable
     * (one-byte types), kind 'i' or 'u'. */
    const char *d = h.descr;
    size_t dl = strlen(d);
    int size_b = dl == 3 && d[2] >= '1' && d[2] <= '8' ? d[2] - '0' : 0;
    int is_int = dl == 3 && (d[1] == 'i' || d[1] == 'u') &&
                 (size_b == 1 || size_b == 2 || size_b == 4 || size_b == 8);
    if (!is_int)
        return zt_fail(err, ZT_EINPUT, "%s: .npy dtype '%s' is not an integer type (expected one of "
                       "|u1 <u2 <u4 <u8 |i1 <i2 <i4 <i8)", path, d);
    if (d[0] == '>' || (d[0] == '|' && size_b != 1) || (d[0] != '<' && d[0] != '|'))
        return zt_fail(err, ZT_EINPUT, "%s: .npy dtype '%s' is not little-endian", path, d);

    size_t data = hstart + hlen, have = size - data;
    uint64_t n = h.dim0;
    if (n == 0)
        return zt_fail(err, ZT_EINPUT, "%s: .npy array is empty: no tokens", path);
    if (n > SIZE_MAX / (size_t)size_b)
        return zt_fail(err, ZT_EINPUT, "%s: .npy shape (%llu,) is too large", path, (unsigned long long)n);
    size_t need = (size_t)n * (size_t)size_b;
    if (have < need)
        return zt_fail(err, ZT_EINPUT, "%s: .npy data truncated: shape (%llu,) of '%s' needs %zu bytes, the file holds %zu",
                       path, (unsigned long long)n, d, need, have);
    if (have > need)
        return zt_fail(err, ZT_EINPUT, "%s: .npy has %zu trailing bytes after %llu tokens of '%s'",
                       path, have - need, (unsigned long long)n, d);
    return convert(path, p + data, (size_t)n, size_b, d[1] == 'i', out, err);
}

static int load_bin(const char *path, const unsigned char *p, size_t size, zt_tokens *out, zt_err *err)
{
    if (size % 2)
        return zt_fail(err, ZT_EINPUT, "%s: .bin holds little-endian uint16 tokens but has an odd length (%zu bytes)",
                       path, size);
    return convert(path, p, size / 2, 2, 0, out, err);
}

static int load_txt(const char *path, const unsigned char *p, size_t size, zt_tokens *out, zt_err *err)
{
    /* Bytes, not characters: multi-byte UTF-8 sequences become several tokens,
     * which is what a 256-entry vocabulary means. */
    return convert(path, p, size, 1, 0, out, err);
}

int zt_tokens_load(const char *path, zt_tokens *out, zt_err *err)
{
    memset(out, 0, sizeof *out);
    const char *slash = strrchr(path, '/');
    const char *dot = strrchr(slash ? slash : path, '.');
    int (*load)(const char *, const unsigned char *, size_t, zt_tokens *, zt_err *) =
        !dot                          ? NULL
        : strcasecmp(dot, ".npy") == 0 ? load_npy
        : strcasecmp(dot, ".bin") == 0 ? load_bin
        : strcasecmp(dot, ".txt") == 0 ? load_txt
                                       : NULL;
    if (!load)
        return zt_fail(err, ZT_EINPUT, "%s: unknown token file type (expected .npy, .bin or .txt)", path);

    int fd;
    struct stat st;
    int rc = zt_open_input(path, "the token file", &fd, &st, err);
    if (rc)
        return rc;
    void *map = NULL;
    size_t size = 0;
    if (st.st_size == 0) {
        rc = zt_fail(err, ZT_EINPUT, "%s: file is empty: no tokens", path);
    } else {
        size = (size_t)st.st_size;
        map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (map == MAP_FAILED) {
            map = NULL;
            rc = zt_fail(err, ZT_EFAIL, "%s: mmap of %zu bytes failed: %s", path, size, strerror(errno));
        }
    }
    close(fd);
    if (rc == ZT_OK)
        rc = load(path, map, size, out, err);
    if (map)
        munmap(map, size);
    return rc;
}

void zt_tokens_free(zt_tokens *t)
{
    if (!t)
        return;
    if (t->ids)
        zt_free(ZT_MEM_OTHER, t->ids, t->n * sizeof(int32_t));
    if (t->loss_mask)
        zt_free(ZT_MEM_OTHER, t->loss_mask, t->n);
    memset(t, 0, sizeof *t);
}

int zt_tokens_load_mask(const char *mask_path, zt_tokens *t, zt_err *err)
{
    zt_tokens m;
    int rc = zt_tokens_load(mask_path, &m, err);
    if (rc)
        return rc;
    if (m.n != t->n)
        rc = zt_fail(err, ZT_EINPUT, "%s: %zu loss-mask values for %zu tokens", mask_path, m.n, t->n);
    else if (m.max_id > 1)
        rc = zt_fail(err, ZT_EINPUT, "%s: a loss-mask value of %d (expected 0 or 1)", mask_path, m.max_id);
    else if (!(t->loss_mask = zt_alloc(ZT_MEM_OTHER, t->n)))
        rc = zt_fail(err, ZT_EFAIL, "%s: out of memory for %zu loss-mask values", mask_path, t->n);
    for (size_t i = 0; rc == ZT_OK && i < t->n; i++)
        t->loss_mask[i] = (uint8_t)m.ids[i];
    zt_tokens_free(&m);
    return rc;
}

int zt_tokens_write_npy(const char *path, const int32_t *ids, size_t n, zt_err *err)
{
    if (n && !ids)
        return zt_fail(err, ZT_EINPUT, "%s: write: no token data", path);
    if (n > SIZE_MAX / sizeof(int32_t))
        return zt_fail(err, ZT_EINPUT, "%s: write: %zu tokens is too many", path, n);
    /* Version 1.0, the header padded with spaces and ended with '\n' so the data
     * starts 64-byte aligned, as numpy writes it. */
    char h[128];
    int len = snprintf(h, sizeof h, "{'descr': '<i4', 'fortran_order': False, 'shape': (%zu,), }", n);
    if (len < 0 || (size_t)len + 1 > sizeof h - 10)
        return zt_fail(err, ZT_EFAIL, "%s: write: header does not fit", path);
    size_t total = ((size_t)len + 1 + 10 + 63) / 64 * 64;
    size_t hlen = total - 10;
    unsigned char pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, (unsigned char)(hlen & 0xff),
                             (unsigned char)(hlen >> 8)};
    memset(h + len, ' ', hlen - (size_t)len - 1);
    h[hlen - 1] = '\n';
    zt_wpart parts[3] = {{pre, 10}, {h, hlen}, {ids, n * sizeof(int32_t)}};
    return zt_write_atomic(path, parts, 3, err);
}
