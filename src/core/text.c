/* text.c — see text.h. */
#include "text.h"

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
