/* tfevents.c — TensorBoard event files (see tfevents.h). */
#include "tfevents.h"

#include <stdio.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "../core/fs.h"

/* CRC-32C, bit-reflected, polynomial 0x1EDC6F41 (reversed 0x82F63B78), one
 * table of 256 remainders built on first use. */
static uint32_t crc_table[256];
static int crc_ready;

static void crc_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = c & 1 ? (c >> 1) ^ 0x82F63B78u : c >> 1;
        crc_table[i] = c;
    }
    crc_ready = 1;
}

uint32_t zt_crc32c(const void *data, size_t n)
{
    if (!crc_ready)
        crc_init();
    const unsigned char *p = data;
    uint32_t c = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; i++)
        c = crc_table[(c ^ p[i]) & 0xFF] ^ (c >> 8);
    return c ^ 0xFFFFFFFFu;
}

/* TFRecord masks its CRCs so that a CRC of data that holds CRCs stays strong. */
uint32_t zt_crc32c_masked(const void *data, size_t n)
{
    uint32_t c = zt_crc32c(data, n);
    return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

/* ---- protobuf wire format: a key is (field << 3) | wire type; varints are
 * little-endian base-128; fixed64/fixed32 are little-endian; a length-delimited
 * field is a varint length then the bytes ---------------------------------- */

typedef struct pbuf {
    unsigned char b[1024];
    size_t n;
    int overflow;
} pbuf;

static void put_byte(pbuf *p, unsigned char c)
{
    if (p->n < sizeof p->b)
        p->b[p->n++] = c;
    else
        p->overflow = 1;
}

static void put_varint(pbuf *p, uint64_t v)
{
    do {
        put_byte(p, (unsigned char)((v & 0x7F) | (v >= 0x80 ? 0x80 : 0)));
        v >>= 7;
    } while (v);
}

static void put_le(pbuf *p, uint64_t v, int bytes)
{
    for (int i = 0; i < bytes; i++)
        put_byte(p, (unsigned char)(v >> (8 * i)));
}

enum { WIRE_VARINT = 0, WIRE_FIXED64 = 1, WIRE_LEN = 2, WIRE_FIXED32 = 5 };

static void put_key(pbuf *p, int field, int wire) { put_varint(p, (uint64_t)(field << 3 | wire)); }

static void put_bytes(pbuf *p, int field, const void *data, size_t n)
{
    put_key(p, field, WIRE_LEN);
    put_varint(p, n);
    for (size_t i = 0; i < n; i++)
        put_byte(p, ((const unsigned char *)data)[i]);
}

static void put_double(pbuf *p, int field, double x)
{
    uint64_t bits;
    memcpy(&bits, &x, sizeof bits);
    put_key(p, field, WIRE_FIXED64);
    put_le(p, bits, 8);
}

static void put_float(pbuf *p, int field, float x)
{
    uint32_t bits;
    memcpy(&bits, &x, sizeof bits);
    put_key(p, field, WIRE_FIXED32);
    put_le(p, bits, 4);
}

/* Event.wall_time = 1, Event.step = 2 (int64 as a varint of its two's complement) */
static void put_event_head(pbuf *p, double wall_time, long step)
{
    put_double(p, 1, wall_time);
    put_key(p, 2, WIRE_VARINT);
    put_varint(p, (uint64_t)(int64_t)step);
}

static int write_record(zt_tfevents *w, const pbuf *p, zt_err *err)
{
    if (p->overflow)
        return zt_fail(err, ZT_EINPUT, "%s: a TensorBoard event is larger than %zu bytes", w->path, sizeof p->b);
    /* the record laid out whole, then written with one call: length (8), its CRC
     * (4), the data, the data's CRC (4) */
    unsigned char rec[8 + 4 + sizeof p->b + 4];
    for (int i = 0; i < 8; i++)
        rec[i] = (unsigned char)((uint64_t)p->n >> (8 * i));
    uint32_t crcs[2] = {zt_crc32c_masked(rec, 8), zt_crc32c_masked(p->b, p->n)};
    memcpy(rec + 12, p->b, p->n);
    for (int i = 0; i < 4; i++) {
        rec[8 + i] = (unsigned char)(crcs[0] >> (8 * i));
        rec[12 + p->n + i] = (unsigned char)(crcs[1] >> (8 * i));
    }
    return zt_write_record(w->fd, w->path, rec, 16 + p->n, err);
}

static double wall_now(void)
{
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return (double)tv.tv_sec + 1e-6 * (double)tv.tv_usec;
}

int zt_tfevents_open(zt_tfevents *w, const char *dir, zt_err *err)
{
    memset(w, 0, sizeof *w);
    w->fd = -1;
    int rc = zt_mkdirs(dir, err);
    if (rc)
        return zt_wrap(err, "--logging_dir: ");
    char host[256] = "localhost";
    gethostname(host, sizeof host - 1);
    double t = wall_now();
    int n = snprintf(w->path, sizeof w->path, "%s/events.out.tfevents.%ld.%s.%ld.0", dir, (long)t, host,
                     (long)getpid());
    if (n < 0 || (size_t)n >= sizeof w->path)
        return zt_fail(err, ZT_EINPUT, "--logging_dir %s: the path is too long", dir);
    if ((rc = zt_open_output(w->path, "the TensorBoard event file", &w->fd, err)))
        return rc;
    pbuf p = {.n = 0};
    put_event_head(&p, t, 0);
    put_bytes(&p, 3, "brain.Event:2", 13);
    if ((rc = write_record(w, &p, err)))
        zt_tfevents_close(w);
    return rc;
}

int zt_tfevents_scalar(zt_tfevents *w, const char *tag, long step, float value, zt_err *err)
{
    pbuf v = {.n = 0}, s = {.n = 0}, e = {.n = 0};
    put_bytes(&v, 1, tag, strlen(tag)); /* Value.tag */
    put_float(&v, 2, value);            /* Value.simple_value */
    put_bytes(&s, 1, v.b, v.n);         /* Summary.value */
    put_event_head(&e, wall_now(), step);
    put_bytes(&e, 5, s.b, s.n);         /* Event.summary */
    e.overflow |= v.overflow | s.overflow;
    return write_record(w, &e, err);
}

void zt_tfevents_close(zt_tfevents *w)
{
    if (w->fd >= 0)
        close(w->fd);
    w->fd = -1;
}
