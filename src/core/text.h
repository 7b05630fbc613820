/* text.h — small string helpers shared by the parsers. */
#ifndef ZT_TEXT_H
#define ZT_TEXT_H

/* Levenshtein distance of the first 64 bytes of a and b: how the flag and
 * config parsers find the name a user probably meant. */
int zt_edit_distance(const char *a, const char *b);

#endif
