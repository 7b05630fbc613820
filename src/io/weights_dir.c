/* weights_dir.c — Hugging Face weights directories (see safetensors.h): one
 * model.safetensors, or an index naming the shard of each tensor.  Each file is
 * opened and validated by safetensors.c; this joins them into one table by name. */
#include "safetensors.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../core/json.h"
#include "safetensors_impl.h"

#define INDEX_MAX_BYTES 100000000u

typedef struct wentry {
    const char *name;   /* tensor name (owned by the shard's file object) */
    const char *file;   /* shard file name (index) — only while loading */
    const zt_st_tensor *t;
    int shard;
} wentry;

struct zt_weights {
    int nfiles;
    zt_st_file **files;           /* shards, in file-name order */
    int n;
    const zt_st_tensor **tensors; /* shard order, then data order */
    wentry *by_name;              /* sorted by name */
};

static int cmp_wentry(const void *a, const void *b)
{
    return strcmp(((const wentry *)a)->name, ((const wentry *)b)->name);
}

void zt_weights_close(zt_weights *w)
{
    if (!w)
        return;
    for (int i = 0; i < w->nfiles; i++)
        zt_st_close(w->files[i]);
    if (w->files)
        xfree(w->files, (size_t)w->nfiles * sizeof *w->files);
    if (w->tensors)
        xfree(w->tensors, (size_t)w->n * sizeof *w->tensors);
    if (w->by_name)
        xfree(w->by_name, (size_t)w->n * sizeof *w->by_name);
    xfree(w, sizeof *w);
}

static char *path_join(const char *dir, const char *name)
{
    size_t a = strlen(dir), b = strlen(name);
    char *p = xalloc(a + b + 2);
    if (p)
        snprintf(p, a + b + 2, "%s/%s", dir, name);
    return p;
}

/* Tables of w from its open files: tensors in shard order and the name index. */
static int weights_index(zt_weights *w, const char *what, zt_err *err)
{
    size_t total = 0;
    for (int i = 0; i < w->nfiles; i++)
        total += (size_t)zt_st_count(w->files[i]);
    if (total > INT_MAX)
        return zt_fail(err, ZT_EINPUT, "%s: too many tensors", what);
    w->n = (int)total;
    if (total == 0)
        return ZT_OK;
    w->tensors = xalloc(total * sizeof *w->tensors);
    w->by_name = xalloc(total * sizeof *w->by_name);
    if (!w->tensors || !w->by_name)
        return zt_fail(err, ZT_EFAIL, "%s: out of memory", what);
    size_t k = 0;
    for (int i = 0; i < w->nfiles; i++)
        for (int t = 0; t < zt_st_count(w->files[i]); t++, k++) {
            w->tensors[k] = zt_st_get(w->files[i], t);
            w->by_name[k] = (wentry){w->tensors[k]->name, NULL, w->tensors[k], i};
        }
    qsort(w->by_name, total, sizeof *w->by_name, cmp_wentry);
    return ZT_OK;
}

static int is_plain_file_name(const char *s)
{
    return *s && strchr(s, '/') == NULL && strcmp(s, ".") != 0 && strcmp(s, "..") != 0;
}

/* The index's weight_map (its only other key may be metadata), and its size. */
static int index_weight_map(const char *index, const zt_json *j, const cJSON **map_out, int *nmap_out, zt_err *err)
{
    const cJSON *map = NULL;
    if (!cJSON_IsObject(j->root))
        return zt_fail(err, ZT_EINPUT, "%s: index is not a JSON object", index);
    for (const cJSON *c = j->root->child; c; c = c->next) {
        if (strcmp(c->string, "weight_map") == 0) {
            if (map)
                return zt_fail(err, ZT_EINPUT, "%s: duplicate key \"weight_map\"", index);
            map = c;
        } else if (strcmp(c->string, "metadata") != 0) {
            return zt_fail(err, ZT_EINPUT, "%s: unknown key \"%s\" (expected metadata, weight_map)",
                           index, c->string);
        }
    }
    if (!cJSON_IsObject(map))
        return zt_fail(err, ZT_EINPUT, "%s: \"weight_map\" is missing or not an object", index);
    int nmap = cJSON_GetArraySize(map);
    if (nmap == 0)
        return zt_fail(err, ZT_EINPUT, "%s: \"weight_map\" is empty", index);
    *map_out = map, *nmap_out = nmap;
    return ZT_OK;
}

/* weight_map's entries, sorted by tensor name (each name once), and the file of
 * each in files[]. */
static int read_weight_map(const char *index, const cJSON *map, int nmap, wentry *ents, const char **files,
                           zt_err *err)
{
    int i = 0;
    for (const cJSON *c = map->child; c; c = c->next, i++) {
        if (!cJSON_IsString(c) || !is_plain_file_name(c->valuestring))
            return zt_fail(err, ZT_EINPUT,
                           "%s: weight_map entry \"%s\" must be a file name in the same directory",
                           index, c->string);
        ents[i] = (wentry){c->string, c->valuestring, NULL, -1}, files[i] = c->valuestring;
    }
    qsort(ents, (size_t)nmap, sizeof *ents, cmp_wentry);
    for (int e = 1; e < nmap; e++)
        if (strcmp(ents[e - 1].name, ents[e].name) == 0)
            return zt_fail(err, ZT_EINPUT, "%s: weight_map lists \"%s\" twice (duplicate)", index,
                           ents[e].name);
    return ZT_OK;
}

/* Each distinct shard is opened once, in file-name order: files[] becomes the
 * *nfiles distinct names, w->files their open files (w->nfiles of them opened). */
static int open_shards(zt_weights *w, const char *dir, const char *index, const char **files, int nmap,
                       int *nfiles_out, zt_err *err)
{
    int nfiles = 0, rc = ZT_OK;
    qsort(files, (size_t)nmap, sizeof *files, cmp_cstr_ptr);
    for (int e = 0; e < nmap; e++)
        if (e == 0 || strcmp(files[e - 1], files[e]) != 0)
            files[nfiles++] = files[e];
    *nfiles_out = nfiles;
    w->files = xalloc((size_t)nfiles * sizeof *w->files);
    if (!w->files)
        return zt_fail(err, ZT_EFAIL, "%s: out of memory", index);
    for (int s = 0; s < nfiles && rc == ZT_OK; s++) {
        char *p = path_join(dir, files[s]);
        if (!p)
            return zt_fail(err, ZT_EFAIL, "%s: out of memory", index);
        rc = zt_st_open(p, &w->files[s], err);
        xfree(p, strlen(p) + 1);
        if (rc)
            zt_wrap(err, "%s: shard named in weight_map: ", index);
        else
            w->nfiles = s + 1;
    }
    return rc;
}

/* Every mapped name is in its shard, and every tensor of a shard is mapped to
 * that shard. */
static int check_mapping(const zt_weights *w, const char *index, const wentry *ents, int nmap, const char **files,
                         int nfiles, zt_err *err)
{
    for (int e = 0; e < nmap; e++) {
        const char **hit = bsearch(&ents[e].file, files, (size_t)nfiles, sizeof *files, cmp_cstr_ptr);
        int s = (int)(hit - files);
        if (!zt_st_find(w->files[s], ents[e].name))
            return zt_fail(err, ZT_EINPUT, "%s: weight_map maps \"%s\" to %s, which has no such tensor",
                           index, ents[e].name, zt_st_path(w->files[s]));
    }
    for (int s = 0; s < nfiles; s++)
        for (int t = 0; t < zt_st_count(w->files[s]); t++) {
            wentry key = {zt_st_get(w->files[s], t)->name, NULL, NULL, 0};
            const wentry *hit = bsearch(&key, ents, (size_t)nmap, sizeof *ents, cmp_wentry);
            if (!hit)
                return zt_fail(err, ZT_EINPUT, "%s: tensor \"%s\" is not listed in weight_map of %s",
                               zt_st_path(w->files[s]), key.name, index);
            if (strcmp(hit->file, files[s]) != 0)
                return zt_fail(err, ZT_EINPUT,
                               "%s: tensor \"%s\" is also in %s, but weight_map maps it to %s (duplicate)",
                               index, key.name, zt_st_path(w->files[s]), hit->file);
        }
    return ZT_OK;
}

static int weights_open_sharded(zt_weights *w, const char *dir, const char *index, zt_err *err)
{
    zt_json j = {0};
    int rc = zt_json_parse_file(index, INDEX_MAX_BYTES, &j, err);
    if (rc)
        return rc;
    const cJSON *map = NULL;
    int nmap = 0, nfiles = 0;
    rc = index_weight_map(index, &j, &map, &nmap, err);
    wentry *ents = nmap ? xalloc((size_t)nmap * sizeof *ents) : NULL;
    const char **files = nmap ? xalloc((size_t)nmap * sizeof *files) : NULL;
    if (rc == ZT_OK && (!ents || !files))
        rc = zt_fail(err, ZT_EFAIL, "%s: out of memory", index);
    if (rc == ZT_OK && (rc = read_weight_map(index, map, nmap, ents, files, err)) == ZT_OK &&
        (rc = open_shards(w, dir, index, files, nmap, &nfiles, err)) == ZT_OK)
        rc = check_mapping(w, index, ents, nmap, files, nfiles, err);
    if (ents)
        xfree(ents, (size_t)nmap * sizeof *ents);
    if (files)
        xfree(files, (size_t)nmap * sizeof *files);
    /* w->files was sized for nfiles; close() frees it with w->nfiles, so keep
     * the two equal even when a shard failed to open. */
    if (rc && w->files) {
        for (int s = 0; s < w->nfiles; s++)
            zt_st_close(w->files[s]);
        xfree(w->files, (size_t)nfiles * sizeof *w->files);
        w->files = NULL;
        w->nfiles = 0;
    }
    zt_json_free(&j);
    return rc;
}

int zt_weights_open(const char *dir, zt_weights **out, zt_err *err)
{
    *out = NULL;
    struct stat st;
    if (stat(dir, &st) != 0) {
        int e = errno;
        return zt_fail(err, errno_code(e), "%s: cannot open weights directory: %s", dir, strerror(e));
    }
    if (!S_ISDIR(st.st_mode))
        return zt_fail(err, ZT_EINPUT, "%s: weights path is not a directory", dir);
    zt_weights *w = xalloc(sizeof *w);
    char *index = path_join(dir, "model.safetensors.index.json");
    char *single = path_join(dir, "model.safetensors");
    int rc = ZT_OK;
    if (!w || !index || !single) {
        rc = zt_fail(err, ZT_EFAIL, "%s: out of memory", dir);
    } else if (stat(index, &st) == 0 && stat(single, &st) != 0) {
        rc = weights_open_sharded(w, dir, index, err);
    } else if (stat(single, &st) == 0) {
        /* Both: transformers' from_pretrained looks for model.safetensors first
         * and never reads the index then; the same rule here, said aloud, so the
         * two never load different weights from one directory (and a sharded
         * save over a one-file model switches with the removal of that file). */
        if (stat(index, &st) == 0)
            fprintf(stderr, "ztrain: note: %s holds both model.safetensors and model.safetensors.index.json: "
                            "loading model.safetensors, as transformers does (the index is ignored)\n", dir);
        w->files = xalloc(sizeof *w->files);
        if (!w->files)
            rc = zt_fail(err, ZT_EFAIL, "%s: out of memory", dir);
        else if ((rc = zt_st_open(single, &w->files[0], err)) == ZT_OK)
            w->nfiles = 1;
        else {
            xfree(w->files, sizeof *w->files);
            w->files = NULL;
        }
    } else {
        rc = zt_fail(err, ZT_EINPUT,
                     "%s: no weights found: neither model.safetensors nor model.safetensors.index.json exists",
                     dir);
    }
    if (rc == ZT_OK)
        rc = weights_index(w, dir, err);
    xstrfree(index);
    xstrfree(single);
    if (rc) {
        if (w)
            zt_weights_close(w);
        return rc;
    }
    *out = w;
    return ZT_OK;
}

int zt_weights_count(const zt_weights *w) { return w->n; }
int zt_weights_nfiles(const zt_weights *w) { return w->nfiles; }
const zt_st_file *zt_weights_file(const zt_weights *w, int i)
{
    return i >= 0 && i < w->nfiles ? w->files[i] : NULL;
}
const zt_st_tensor *zt_weights_get(const zt_weights *w, int i)
{
    return i >= 0 && i < w->n ? w->tensors[i] : NULL;
}

const zt_st_tensor *zt_weights_find(const zt_weights *w, const char *name, const char **file)
{
    wentry key = {name, NULL, NULL, 0};
    const wentry *hit = w->n ? bsearch(&key, w->by_name, (size_t)w->n, sizeof *w->by_name, cmp_wentry) : NULL;
    if (file)
        *file = hit ? zt_st_path(w->files[hit->shard]) : NULL;
    return hit ? hit->t : NULL;
}
