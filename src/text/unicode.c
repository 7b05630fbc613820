/* unicode.c — UTF-8 and character classes (see unicode.h). */
#include "unicode.h"

static const uint8_t ascii_class[128] = {
    ['\t'] = ZT_UC_SPACE, ['\n'] = ZT_UC_SPACE, ['\v'] = ZT_UC_SPACE, ['\f'] = ZT_UC_SPACE,
    ['\r'] = ZT_UC_SPACE, [' '] = ZT_UC_SPACE,
    ['0'] = 2, ['1'] = 2, ['2'] = 2, ['3'] = 2, ['4'] = 2, ['5'] = 2, ['6'] = 2, ['7'] = 2, ['8'] = 2, ['9'] = 2,
    ['A'] = 1, ['B'] = 1, ['C'] = 1, ['D'] = 1, ['E'] = 1, ['F'] = 1, ['G'] = 1, ['H'] = 1, ['I'] = 1,
    ['J'] = 1, ['K'] = 1, ['L'] = 1, ['M'] = 1, ['N'] = 1, ['O'] = 1, ['P'] = 1, ['Q'] = 1, ['R'] = 1,
    ['S'] = 1, ['T'] = 1, ['U'] = 1, ['V'] = 1, ['W'] = 1, ['X'] = 1, ['Y'] = 1, ['Z'] = 1,
    ['a'] = 1, ['b'] = 1, ['c'] = 1, ['d'] = 1, ['e'] = 1, ['f'] = 1, ['g'] = 1, ['h'] = 1, ['i'] = 1,
    ['j'] = 1, ['k'] = 1, ['l'] = 1, ['m'] = 1, ['n'] = 1, ['o'] = 1, ['p'] = 1, ['q'] = 1, ['r'] = 1,
    ['s'] = 1, ['t'] = 1, ['u'] = 1, ['v'] = 1, ['w'] = 1, ['x'] = 1, ['y'] = 1, ['z'] = 1,
};

int zt_uc_class(uint32_t cp)
{
    if (cp < 128)
        return ascii_class[cp];
    int lo = 0, hi = zt_uc_nranges - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        if (cp < zt_uc_ranges[mid].first)
            hi = mid - 1;
        else if (cp > zt_uc_ranges[mid].last)
            lo = mid + 1;
        else
            return zt_uc_ranges[mid].cls;
    }
    return ZT_UC_OTHER;
}

int zt_utf8_decode(const uint8_t *s, size_t n, uint32_t *cp)
{
    uint8_t b = s[0];
    if (b < 0x80) {
        *cp = b;
        return 1;
    }
    int len;
    uint32_t c, min;
    if ((b & 0xE0) == 0xC0)
        len = 2, c = b & 0x1F, min = 0x80;
    else if ((b & 0xF0) == 0xE0)
        len = 3, c = b & 0x0F, min = 0x800;
    else if ((b & 0xF8) == 0xF0)
        len = 4, c = b & 0x07, min = 0x10000;
    else
        return 0;
    if ((size_t)len > n)
        return 0;
    for (int i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80)
            return 0;
        c = c << 6 | (s[i] & 0x3F);
    }
    if (c < min || c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF))
        return 0;
    *cp = c;
    return len;
}

int zt_utf8_encode(uint32_t cp, uint8_t *out)
{
    if (cp < 0x80) {
        out[0] = (uint8_t)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (uint8_t)(0xC0 | cp >> 6);
        out[1] = (uint8_t)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (uint8_t)(0xE0 | cp >> 12);
        out[1] = (uint8_t)(0x80 | (cp >> 6 & 0x3F));
        out[2] = (uint8_t)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (uint8_t)(0xF0 | cp >> 18);
    out[1] = (uint8_t)(0x80 | (cp >> 12 & 0x3F));
    out[2] = (uint8_t)(0x80 | (cp >> 6 & 0x3F));
    out[3] = (uint8_t)(0x80 | (cp & 0x3F));
    return 4;
}

size_t zt_utf8_validate(const uint8_t *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        if (s[i] < 0x80) {
            i++;
            continue;
        }
        uint32_t cp;
        int l = zt_utf8_decode(s + i, n - i, &cp);
        if (!l)
            return i;
        i += (size_t)l;
    }
    return n;
}
