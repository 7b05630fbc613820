/* text.c — see text.h. */
#include "text.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

int zt_edit_distance(const char *a, const char *b)
{
    enum { N = 64 };
    int la = (int)strnlen(a, N), lb = (int)strnlen(b, N);
    int row[N + 1];
    for (int j = 0; j <= lb; j++)
        row[j] = j;
    for (int i = 1; i <= la; i++) {
        int diag = row[0];
        row[0] = i;
        for (int j = 1; j <= lb; j++) {
            int up = row[j];
            int best = diag + (a[i - 1] != b[j - 1]);
            if (up + 1 < best)
                best = up + 1;
            if (row[j - 1] + 1 < best)
                best = row[j - 1] + 1;
            row[j] = best;
            diag = up;
        }
    }
    return row[lb];
}

void zt_join_names(char *buf, size_t cap, const char *const *set)
{
    size_t used = 0;
    buf[0] = '\0';
    for (const char *const *s = set; *s && used < cap; s++) {
        int n = snprintf(buf + used, cap - used, "%s%s", s == set ? "" : " | ", *s);
        if (n < 0)
            break;
        used += (size_t)n;
    }
}

int zt_index_of(const char *s, const char *const *set, int icase)
{
    for (int i = 0; set[i]; i++)
        if (icase ? !strcasecmp(s, set[i]) : !strcmp(s, set[i]))
            return i;
    return -1;
}

/* Offset of the first byte that breaks UTF-8 (overlong forms, surrogates and
 * code points past U+10FFFF included, as Rust's str::from_utf8 rejects them), or
 * len when all of s is valid. */
size_t zt_utf8_invalid_at(const unsigned char *s, size_t len)
{
    size_t i = 0;
    while (i < len) {
        unsigned c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        size_t need;
        uint32_t cp, min;
        if (c >= 0xC2 && c <= 0xDF) {
            need = 1, cp = c & 0x1F, min = 0x80;
        } else if (c >= 0xE0 && c <= 0xEF) {
            need = 2, cp = c & 0x0F, min = 0x800;
        } else if (c >= 0xF0 && c <= 0xF4) {
            need = 3, cp = c & 0x07, min = 0x10000;
        } else {
            return i;
        }
        if (len - i - 1 < need)
            return i;
        for (size_t k = 1; k <= need; k++) {
            unsigned cc = s[i + k];
            if ((cc & 0xC0) != 0x80)
                return i;
            cp = (cp << 6) | (cc & 0x3F);
        }
        if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
            return i;
        i += need + 1;
    }
    return len;
}
