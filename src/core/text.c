/* text.c — see text.h. */
#include "text.h"

#include <string.h>

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
