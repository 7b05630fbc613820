/* manifest.c — checkpoint manifests: sizes and XXH3 checksums (see manifest.h). */
#include "manifest.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

#include "../core/fs.h"
#include "../core/json.h"
#include "../core/mem.h"

#define MANIFEST_MAX_BYTES (16u << 20)
#define MANIFEST_MAX_FILES 100000

int zt_file_digest(const char *path, uint64_t *bytes, uint64_t *xxh3, zt_err *err)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return zt_fail(err, ZT_EINPUT, "%s: cannot open: %s", path, strerror(errno));
    const size_t block = (size_t)1 << 20;
    void *buf = zt_alloc(ZT_MEM_OTHER, block);
    XXH3_state_t *st = XXH3_createState();
    int rc = ZT_OK;
    if (!buf || !st || XXH3_64bits_reset(st) != XXH_OK)
        rc = zt_fail(err, ZT_EFAIL, "%s: out of memory for the checksum", path);
    uint64_t total = 0;
    while (rc == ZT_OK) {
        ssize_t got = read(fd, buf, block);
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0)
            rc = zt_fail(err, ZT_EFAIL, "%s: read: %s", path, strerror(errno));
        else if (got == 0)
            break;
        else {
            XXH3_64bits_update(st, buf, (size_t)got);
            total += (uint64_t)got;
        }
    }
    if (rc == ZT_OK) {
        *bytes = total;
        *xxh3 = XXH3_64bits_digest(st);
    }
    if (st)
        XXH3_freeState(st);
    zt_free(ZT_MEM_OTHER, buf, buf ? block : 0);
    close(fd);
    return rc;
}

int zt_manifest_write(const char *dir, const zt_manifest_entry *files, int n, zt_err *err)
{
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "format", "ztrain-manifest");
    cJSON_AddNumberToObject(root, "version", 1);
    cJSON_AddStringToObject(root, "hash", "xxh3-64");
    cJSON *list = cJSON_AddObjectToObject(root, "files");
    for (int i = 0; list && i < n; i++) {
        cJSON *e = cJSON_AddObjectToObject(list, files[i].path);
        char hex[17];
        snprintf(hex, sizeof hex, "%016" PRIx64, files[i].xxh3);
        cJSON_AddNumberToObject(e, "bytes", (double)files[i].bytes);
        cJSON_AddStringToObject(e, "xxh3", hex);
    }
    char *text = cJSON_Print(root);
    cJSON_Delete(root);
    char path[4200];
    snprintf(path, sizeof path, "%s/manifest.json", dir);
    return zt_json_write_text(path, text, 0, err);
}

/* A path inside the checkpoint: no absolute path, no "." or ".." component,
 * no empty component, only portable characters. */
static int safe_relative_path(const char *p)
{
    size_t n = strlen(p);
    if (n == 0 || n >= sizeof(((zt_manifest_entry *)0)->path) || p[0] == '/')
        return 0;
    for (const char *c = p; *c; c++)
        if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') ||
              *c == '.' || *c == '_' || *c == '-' || *c == '/'))
            return 0;
    for (const char *s = p; *s;) {
        const char *e = strchr(s, '/');
        size_t len = e ? (size_t)(e - s) : strlen(s);
        if (len == 0 || (len == 1 && s[0] == '.') || (len == 2 && s[0] == '.' && s[1] == '.'))
            return 0;
        s += len + (e ? 1 : 0);
        if (e && !*s)
            return 0; /* trailing slash */
    }
    return 1;
}

static int parse_hex64(const char *s, uint64_t *out)
{
    if (strlen(s) != 16)
        return 0;
    uint64_t v = 0;
    for (int i = 0; i < 16; i++) {
        int c = s[i], d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        if (d < 0)
            return 0;
        v = v << 4 | (uint64_t)d;
    }
    *out = v;
    return 1;
}

int zt_manifest_from_json(const char *name, const zt_json *js, zt_manifest *m, zt_err *err)
{
    memset(m, 0, sizeof *m);
    int rc = ZT_OK;
    const cJSON *root = js->root;
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(root, "format");
    const cJSON *ver = cJSON_GetObjectItemCaseSensitive(root, "version");
    const cJSON *hash = cJSON_GetObjectItemCaseSensitive(root, "hash");
    const cJSON *files = cJSON_GetObjectItemCaseSensitive(root, "files");
    if (!cJSON_IsObject(root) || !cJSON_IsString(fmt) || strcmp(fmt->valuestring, "ztrain-manifest"))
        rc = zt_fail(err, ZT_EINPUT, "%s: \"format\" must be \"ztrain-manifest\"", name);
    else if (!cJSON_IsNumber(ver) || ver->valuedouble != 1.0)
        rc = zt_fail(err, ZT_EINPUT, "%s: \"version\" must be 1", name);
    else if (!cJSON_IsString(hash) || strcmp(hash->valuestring, "xxh3-64"))
        rc = zt_fail(err, ZT_EINPUT, "%s: \"hash\" must be \"xxh3-64\"", name);
    else if (!cJSON_IsObject(files))
        rc = zt_fail(err, ZT_EINPUT, "%s: \"files\" must be an object", name);
    int n = rc ? 0 : cJSON_GetArraySize(files);
    if (rc == ZT_OK && n > MANIFEST_MAX_FILES)
        rc = zt_fail(err, ZT_EINPUT, "%s: \"files\" lists %d files, more than %d", name, n, MANIFEST_MAX_FILES);
    if (rc == ZT_OK && n > 0) {
        if (!(m->files = zt_alloc(ZT_MEM_OTHER, (size_t)n * sizeof *m->files)))
            rc = zt_fail(err, ZT_EFAIL, "%s: out of memory", name);
        else
            m->cap = n;
    }
    const cJSON *e = rc ? NULL : files->child;
    for (int i = 0; rc == ZT_OK && e; i++, e = e->next) {
        const char *path = e->string;
        const cJSON *b = cJSON_GetObjectItemCaseSensitive(e, "bytes");
        const cJSON *h = cJSON_GetObjectItemCaseSensitive(e, "xxh3");
        zt_manifest_entry *f = &m->files[i];
        if (!path || !safe_relative_path(path)) {
            rc = zt_fail(err, ZT_EINPUT, "%s: files: \"%.200s\" is not a relative path inside the checkpoint",
                         name, path ? path : "");
            break;
        }
        for (int k = 0; k < i; k++)
            if (!strcmp(m->files[k].path, path))
                rc = zt_fail(err, ZT_EINPUT, "%s: files: \"%s\" is listed twice", name, path);
        if (rc)
            break;
        /* a whole number of bytes in [0, 2^53]: beyond it doubles skip integers */
        if (!cJSON_IsObject(e) || !cJSON_IsNumber(b) || !isfinite(b->valuedouble) || b->valuedouble < 0 ||
            b->valuedouble > 9007199254740992.0 || b->valuedouble != floor(b->valuedouble))
            rc = zt_fail(err, ZT_EINPUT, "%s: files.%s.bytes must be a whole number of bytes in [0, 2^53]",
                         name, path);
        else if (!cJSON_IsString(h) || !parse_hex64(h->valuestring, &f->xxh3))
            rc = zt_fail(err, ZT_EINPUT, "%s: files.%s.xxh3 must be 16 lowercase hex digits", name, path);
        if (rc)
            break;
        snprintf(f->path, sizeof f->path, "%s", path);
        f->bytes = (uint64_t)b->valuedouble;
        m->n = i + 1;
    }
    if (rc)
        zt_manifest_free(m);
    return rc;
}

void zt_manifest_free(zt_manifest *m)
{
    zt_free(ZT_MEM_OTHER, m->files, m->files ? (size_t)m->cap * sizeof *m->files : 0);
    memset(m, 0, sizeof *m);
}

int zt_manifest_read(const char *dir, zt_manifest *m, zt_err *err)
{
    char path[4400];
    snprintf(path, sizeof path, "%s/manifest.json", dir);
    memset(m, 0, sizeof *m);
    zt_json js;
    int rc = zt_json_parse_file(path, MANIFEST_MAX_BYTES, &js, err);
    if (rc == ZT_OK) {
        rc = zt_manifest_from_json(path, &js, m, err);
        zt_json_free(&js);
    }
    return rc;
}

int zt_manifest_verify(const char *dir, const char *const *required, zt_err *err)
{
    zt_manifest m;
    int rc = zt_manifest_read(dir, &m, err);
    for (int r = 0; rc == ZT_OK && required && required[r]; r++) {
        int found = 0;
        for (int i = 0; i < m.n && !found; i++)
            found = !strcmp(m.files[i].path, required[r]);
        if (!found)
            rc = zt_fail(err, ZT_EINPUT, "%s/manifest.json does not list %s", dir, required[r]);
    }
    for (int i = 0; rc == ZT_OK && i < m.n; i++) {
        char path[4400];
        snprintf(path, sizeof path, "%s/%s", dir, m.files[i].path);
        uint64_t bytes = 0, h = 0;
        if ((rc = zt_file_digest(path, &bytes, &h, err)))
            break;
        if (bytes != m.files[i].bytes)
            rc = zt_fail(err, ZT_EINPUT, "%s: %" PRIu64 " bytes, the manifest says %" PRIu64
                         " (a partial or replaced file)", path, bytes, m.files[i].bytes);
        else if (h != m.files[i].xxh3)
            rc = zt_fail(err, ZT_EINPUT, "%s: checksum %016" PRIx64 " does not match the manifest's %016" PRIx64
                         " (the file is damaged)", path, h, m.files[i].xxh3);
    }
    zt_manifest_free(&m);
    return rc;
}
