/* manifest.h — what a complete checkpoint holds, so a damaged one is caught.
 *
 * CHECKPOINT/manifest.json is the last file written into a checkpoint (before
 * its directory is renamed into place) and lists every other file with its size
 * in bytes and its XXH3-64 checksum (Debian's libxxhash):
 *   {"format": "ztrain-manifest", "version": 1, "hash": "xxh3-64",
 *    "files": {"trainer_state.json": {"bytes": 1234, "xxh3": "0123456789abcdef"}, ...}}
 * Paths are relative to the checkpoint directory, made of [A-Za-z0-9._-] and
 * '/' only, never absolute, never with a ".." or "." component.  Verifying
 * rereads every listed file: a flipped bit, a truncated or swapped shard, or a
 * missing file is refused naming that file. */
#ifndef ZT_MANIFEST_H
#define ZT_MANIFEST_H

#include <stddef.h>
#include <stdint.h>

#include "../core/status.h"

typedef struct zt_manifest_entry {
    char path[256];     /* relative to the checkpoint directory */
    uint64_t bytes;
    uint64_t xxh3;
} zt_manifest_entry;

typedef struct zt_manifest {
    zt_manifest_entry *files;
    int n, cap;
} zt_manifest;

struct zt_json;

/* Size and XXH3-64 of a file, read in 1 MiB blocks (errors name the path). */
int zt_file_digest(const char *path, uint64_t *bytes, uint64_t *xxh3, zt_err *err);

/* Write DIR/manifest.json atomically from n entries. */
int zt_manifest_write(const char *dir, const zt_manifest_entry *files, int n, zt_err *err);

/* Validate a parsed manifest (name is used in messages).  Every field is
 * checked: known format and version, safe relative paths without duplicates,
 * byte counts that are whole numbers in [0, 2^53], 16 hex digits. */
int zt_manifest_from_json(const char *name, const struct zt_json *js, zt_manifest *m, zt_err *err);
/* Read and validate DIR/manifest.json. */
int zt_manifest_read(const char *dir, zt_manifest *m, zt_err *err);
void zt_manifest_free(zt_manifest *m);

/* Read DIR/manifest.json and check every file it lists (size, then checksum).
 * Files named in required[] (NULL-terminated, may be NULL) must be listed.
 * ZT_EINPUT naming the first file that is missing, short or damaged. */
int zt_manifest_verify(const char *dir, const char *const *required, zt_err *err);

#endif
