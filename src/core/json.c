/* json.c — strict JSON (see json.h). */
#include "json.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fs.h"
#include "input.h"
#include "mem.h"
#include "text.h"

static int is_digit(int c) { return c >= '0' && c <= '9'; }
static int is_hex(int c) { return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }
/* Bytes cJSON's number scanner would swallow: a number token must not be
 * followed by one, or cJSON and this lexer would disagree on its extent. */
static int is_num_byte(int c) { return is_digit(c) || c == '+' || c == '-' || c == '.' || c == 'e' || c == 'E'; }

/* The string token starting at t[*at] (its opening quote): checked, *at moved past it. */
static int lex_string(const char *path, const char *what, const char *t, size_t len, size_t base, size_t *at,
                      zt_err *err)
{
    size_t i = *at;
    unsigned char c;
    size_t start = i++;
    for (;;) {
        if (i >= len)
            return zt_fail(err, ZT_EINPUT,
                           "%s: %s is not valid JSON: unterminated string starting at byte offset %zu",
                           path, what, base + start);
        c = (unsigned char)t[i];
        if (c == '"') {
            *at = i + 1;
            return ZT_OK;
        }
        if (c < 0x20)
            return zt_fail(err, ZT_EINPUT,
                           "%s: %s is not valid JSON: control byte 0x%02x inside a string at byte offset %zu",
                           path, what, c, base + i);
        if (c != '\\') {
            i++;
            continue;
        }
        int e = i + 1 < len ? (unsigned char)t[i + 1] : -1;
        if (e == 'u') {
            if (len - i < 6 || !is_hex(t[i + 2]) || !is_hex(t[i + 3]) || !is_hex(t[i + 4]) ||
                !is_hex(t[i + 5]))
                return zt_fail(err, ZT_EINPUT,
                               "%s: %s is not valid JSON: bad \\u escape at byte offset %zu",
                               path, what, base + i);
            /* cJSON's strings are C strings: an escaped NUL would cut a
             * name short and make distinct names compare equal. */
            if (memcmp(t + i + 2, "0000", 4) == 0)
                return zt_fail(err, ZT_EINPUT,
                               "%s: %s: \\u0000 (NUL) inside a string at byte offset %zu is not supported",
                               path, what, base + i);
            i += 6;
        } else if (e == '"' || e == '\\' || e == '/' || e == 'b' || e == 'f' || e == 'n' ||
                   e == 'r' || e == 't') {
            i += 2;
        } else {
            return zt_fail(err, ZT_EINPUT,
                           "%s: %s is not valid JSON: bad escape at byte offset %zu", path,
                           what, base + i);
        }
    }
}

/* The number token starting at t[*at]: checked against RFC 8259's grammar, *at moved past it. */
static int lex_number(const char *path, const char *what, const char *t, size_t len, size_t base, size_t *at,
                      zt_err *err)
{
    size_t i = *at;
    size_t start = i;
    int ok = 1;
    if (t[i] == '-')
        i++;
    if (i < len && t[i] == '0') {
        i++;
    } else if (i < len && is_digit(t[i])) {
        while (i < len && is_digit(t[i]))
            i++;
    } else {
        ok = 0;
    }
    if (ok && i < len && t[i] == '.') {
        i++;
        ok = i < len && is_digit(t[i]);
        while (i < len && is_digit(t[i]))
            i++;
    }
    if (ok && i < len && (t[i] == 'e' || t[i] == 'E')) {
        i++;
        if (i < len && (t[i] == '+' || t[i] == '-'))
            i++;
        ok = i < len && is_digit(t[i]);
        while (i < len && is_digit(t[i]))
            i++;
    }
    if (!ok || (i < len && is_num_byte((unsigned char)t[i])))
        return zt_fail(err, ZT_EINPUT,
                       "%s: %s is not valid JSON: malformed number at byte offset %zu", path,
                       what, base + start);
    *at = i;
    return ZT_OK;
}

/* Check every token of t against RFC 8259 and count number tokens, storing
 * their offsets in nums when nums is not NULL.  Grammar (nesting, commas) is
 * left to cJSON. */
static int json_lex(const char *path, const char *what, const char *t, size_t len, size_t base,
                    size_t *nums, size_t *nnum, zt_err *err)
{
    size_t i = 0, k = 0;
    while (i < len) {
        unsigned char c = (unsigned char)t[i];
        if (c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '{' || c == '}' || c == '[' ||
            c == ']' || c == ':' || c == ',') {
            i++;
        } else if (c == '"') {
            int rc = lex_string(path, what, t, len, base, &i, err);
            if (rc)
                return rc;
        } else if (c == '-' || is_digit(c)) {
            size_t start = i;
            int rc = lex_number(path, what, t, len, base, &i, err);
            if (rc)
                return rc;
            if (nums)
                nums[k] = start;
            k++;
        } else if (c == 't' && len - i >= 4 && memcmp(t + i, "true", 4) == 0) {
            i += 4;
        } else if (c == 'f' && len - i >= 5 && memcmp(t + i, "false", 5) == 0) {
            i += 5;
        } else if (c == 'n' && len - i >= 4 && memcmp(t + i, "null", 4) == 0) {
            i += 4;
        } else {
            return zt_fail(err, ZT_EINPUT,
                           "%s: %s is not valid JSON: unexpected byte 0x%02x at byte offset %zu",
                           path, what, c, base + i);
        }
    }
    *nnum = k;
    return ZT_OK;
}

void zt_json_free(zt_json *j)
{
    if (!j)
        return;
    if (j->root)
        cJSON_Delete(j->root);
    if (j->text)
        zt_free(ZT_MEM_OTHER, j->text, j->len + 1);
    if (j->nums)
        zt_free(ZT_MEM_OTHER, j->nums, j->nnum * sizeof *j->nums);
    memset(j, 0, sizeof *j);
}

/* j->text / j->len are set; validate and build the tree. */
static int json_parse_owned(const char *path, const char *what, size_t base, zt_json *j, zt_err *err)
{
    size_t bad = zt_utf8_invalid_at((const unsigned char *)j->text, j->len);
    if (bad != j->len)
        return zt_fail(err, ZT_EINPUT, "%s: %s is not valid UTF-8 (byte 0x%02x at byte offset %zu)",
                       path, what, (unsigned char)j->text[bad], base + bad);
    size_t nnum = 0;
    int rc = json_lex(path, what, j->text, j->len, base, NULL, &nnum, err);
    if (rc)
        return rc;
    if (nnum) {
        if (nnum > SIZE_MAX / sizeof *j->nums ||
            !(j->nums = zt_alloc(ZT_MEM_OTHER, nnum * sizeof *j->nums)))
            return zt_fail(err, ZT_EFAIL, "%s: out of memory reading %s", path, what);
        j->nnum = nnum;
        rc = json_lex(path, what, j->text, j->len, base, j->nums, &nnum, err);
        if (rc)
            return rc;
    }
    /* require_null_terminated makes cJSON insist that only whitespace follows
     * the value (the NUL we appended ends the buffer), and parse_end says where
     * it stopped: both ways the whole text must be one JSON value. */
    const char *end = NULL;
    j->root = cJSON_ParseWithLengthOpts(j->text, j->len + 1, &end, 1);
    if (!j->root) {
        size_t off = end && end >= j->text && end <= j->text + j->len ? (size_t)(end - j->text) : 0;
        return zt_fail(err, ZT_EINPUT, "%s: %s is not valid JSON (parse error near byte offset %zu)",
                       path, what, base + off);
    }
    if (end != j->text + j->len)
        return zt_fail(err, ZT_EINPUT, "%s: %s is not valid JSON: unexpected data at byte offset %zu",
                       path, what, base + (size_t)(end - j->text));
    return ZT_OK;
}

int zt_json_parse(const char *path, const char *what, const void *text, size_t len, size_t base,
                  zt_json *out, zt_err *err)
{
    memset(out, 0, sizeof *out);
    if (len >= SIZE_MAX || !(out->text = zt_alloc(ZT_MEM_OTHER, len + 1)))
        return zt_fail(err, ZT_EFAIL, "%s: out of memory reading %s", path, what);
    out->len = len;
    if (len)
        memcpy(out->text, text, len);
    out->text[len] = 0;
    int rc = json_parse_owned(path, what, base, out, err);
    if (rc)
        zt_json_free(out);
    return rc;
}

int zt_json_parse_file(const char *path, size_t max_bytes, zt_json *out, zt_err *err)
{
    memset(out, 0, sizeof *out);
    int fd;
    struct stat st;
    int rc = zt_open_input(path, NULL, &fd, &st, err);
    if (rc)
        return rc;
    if ((unsigned long long)st.st_size > max_bytes) {
        rc = zt_fail(err, ZT_EINPUT, "%s: file is %lld bytes, more than the %zu-byte limit", path,
                     (long long)st.st_size, max_bytes);
    } else if (!(out->text = zt_alloc(ZT_MEM_OTHER, (size_t)st.st_size + 1))) {
        rc = zt_fail(err, ZT_EFAIL, "%s: out of memory", path);
    } else {
        out->len = (size_t)st.st_size;
        rc = zt_read_full(fd, path, out->text, out->len, err);
        out->text[out->len] = 0;
    }
    close(fd);
    if (rc == ZT_OK)
        rc = json_parse_owned(path, "file", 0, out, err);
    if (rc)
        zt_json_free(out);
    return rc;
}

size_t zt_json_count_numbers(const cJSON *item)
{
    if (!item)
        return 0;
    if (cJSON_IsNumber(item))
        return 1;
    size_t n = 0;
    if (cJSON_IsArray(item) || cJSON_IsObject(item))
        for (const cJSON *c = item->child; c; c = c->next)
            n += zt_json_count_numbers(c);
    return n;
}

int zt_json_int(const zt_json *j, size_t k, int64_t *out)
{
    if (!j || k >= j->nnum)
        return 1;
    const char *s = j->text + j->nums[k];
    int neg = *s == '-';
    if (neg)
        s++;
    uint64_t v = 0;
    int big = 0;
    for (; is_digit(*s); s++) {
        unsigned d = (unsigned)(*s - '0');
        if (v > (UINT64_MAX - d) / 10)
            big = 1;
        else
            v = v * 10 + d;
    }
    if (*s == '.' || *s == 'e' || *s == 'E')
        return 1;
    if (big || v > (neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX))
        return 2;
    *out = neg ? (int64_t)(0 - v) : (int64_t)v;
    return 0;
}

/* The number token starting at text[off] as a raw node (its text is the token's
 * bytes: a number token ends at the first byte is_num_byte refuses). */
static cJSON *raw_token(zt_json *j, size_t off)
{
    size_t end = off;
    while (end < j->len && is_num_byte((unsigned char)j->text[end]))
        end++;
    char saved = j->text[end]; /* text is NUL-terminated, so end <= len is writable */
    j->text[end] = 0;
    cJSON *raw = cJSON_CreateRaw(j->text + off);
    j->text[end] = saved;
    return raw;
}

/* Pre-order over parent's children, k the index in nums of the next number. */
static int keep_children(zt_json *j, cJSON *parent, size_t *k)
{
    for (cJSON *c = parent->child; c; c = c->next) {
        if (cJSON_IsNumber(c)) {
            if (*k >= j->nnum)
                return -1; /* cannot happen: the lexer counted every number cJSON parsed */
            cJSON *raw = raw_token(j, j->nums[(*k)++]);
            if (!raw)
                return -1;
            raw->string = c->string; /* the key moves over (ReplaceItemViaPointer keeps none) */
            raw->type |= c->type & cJSON_StringIsConst;
            c->string = NULL;
            cJSON_ReplaceItemViaPointer(parent, c, raw); /* frees c */
            c = raw;
        } else if ((cJSON_IsArray(c) || cJSON_IsObject(c)) && keep_children(j, c, k)) {
            return -1;
        }
    }
    return 0;
}

int zt_json_keep_number_text(zt_json *j)
{
    size_t k = 0;
    if (!j->root)
        return 0;
    if (cJSON_IsNumber(j->root)) {
        cJSON *raw = j->nnum ? raw_token(j, j->nums[0]) : NULL;
        if (!raw)
            return -1;
        cJSON_Delete(j->root);
        j->root = raw;
        return 0;
    }
    return keep_children(j, j->root, &k);
}

static int cmp_key(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

const char *zt_json_duplicate_key(const cJSON *item, int *oom)
{
    *oom = 0;
    if (!item || !(cJSON_IsObject(item) || cJSON_IsArray(item)))
        return NULL;
    size_t n = 0;
    for (const cJSON *c = item->child; c; c = c->next)
        n++;
    if (cJSON_IsObject(item) && n > 1) { /* sorted, a repeat sits beside its twin: n log n for a hostile line */
        const char **keys = zt_alloc(ZT_MEM_OTHER, n * sizeof *keys);
        if (!keys) {
            *oom = -1;
            return NULL;
        }
        size_t k = 0;
        for (const cJSON *c = item->child; c; c = c->next)
            keys[k++] = c->string;
        qsort(keys, n, sizeof *keys, cmp_key);
        const char *dup = NULL;
        for (size_t i = 1; i < n && !dup; i++)
            if (!strcmp(keys[i - 1], keys[i]))
                dup = keys[i];
        zt_free(ZT_MEM_OTHER, keys, n * sizeof *keys);
        if (dup)
            return dup;
    }
    for (const cJSON *c = item->child; c; c = c->next) {
        const char *dup = zt_json_duplicate_key(c, oom);
        if (dup || *oom)
            return dup;
    }
    return NULL;
}

int zt_json_write_text(const char *path, char *text, int newline, zt_err *err)
{
    if (!text)
        return zt_fail(err, ZT_EFAIL, "%s: out of memory printing JSON", path);
    const zt_wpart parts[2] = {{text, strlen(text)}, {"\n", 1}};
    const int rc = zt_write_atomic(path, parts, newline ? 2 : 1, err);
    cJSON_free(text);
    return rc;
}
