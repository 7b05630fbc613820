/* test_engine_view.c — the engine's state view (engine.h), what checkpoints see
 * of the engine: it lists exactly this rank's state tensors (name, dtype, numel,
 * slice), and what is written through it is read back, on the CPU and on the
 * emulated device, whose buffers the host cannot touch, so a view that did not go
 * through the backend's copies would fault there. */
#include <stdint.h>
#include <string.h>

#include "../src/comm/comm.h"
#include "../src/core/mem.h"
#include "../src/engine/engine.h"
#include "test.h"

/* Two layers, hidden 8: a root unit and one unit per layer. */
static int small_layout(zt_layout *lay, zt_err *err)
{
    zt_llama_config c = {0};
    c.hidden_size = 8;
    c.intermediate_size = 12;
    c.num_hidden_layers = 2;
    c.num_attention_heads = 2;
    c.num_key_value_heads = 1;
    c.head_dim = 4;
    c.vocab_size = 16;
    return zt_layout_build(lay, &c, ZT_WRAP_TRANSFORMER, 0, 1, err);
}

/* fp32 master (master, m, v) and bf16 master with Kahan compensation (and comp). */
static const zt_precision precs[2] = {
    {.load = ZT_F32, .master = ZT_F32, .compute = ZT_F32, .reduce = ZT_F32, .save = ZT_F32},
    {.load = ZT_BF16, .master = ZT_BF16, .compute = ZT_BF16, .reduce = ZT_BF16, .save = ZT_BF16, .compensated = 1},
};

/* A backend table that counts the bytes its to_host and to_device move, over
 * another table's (the CPU's or the emulated device's). */
static const zt_backend *inner;
static size_t to_host_bytes, to_device_bytes;
static void counting_to_host(void *dst, const void *src, size_t bytes)
{
    to_host_bytes += bytes;
    inner->to_host(dst, src, bytes);
}
static void counting_to_device(void *dst, const void *src, size_t bytes)
{
    to_device_bytes += bytes;
    inner->to_device(dst, src, bytes);
}
static zt_backend counting(const zt_backend *be)
{
    inner = be;
    zt_backend c = *be;
    c.to_host = counting_to_host;
    c.to_device = counting_to_device;
    return c;
}

/* At stages 0 and 3 on one rank (shard group 1): per unit, in order, master, m and
 * v (then comp under Kahan), named unit.<u>.<role>, each the whole padded unit in
 * the master dtype, starting at offset 0. */
static void test_view_lists_the_state(void)
{
    static const char *const roles[] = {"master", "m", "v", "comp"};
    zt_layout lay;
    zt_err err = {0};
    ZT_CHECK(small_layout(&lay, &err) == ZT_OK);
    for (int stage = 0; stage <= 3; stage += 3)
        for (int k = 0; k < 2; k++) {
            zt_comm comm;
            zt_comm_create_local(&comm);
            zt_engine *eng = NULL;
            ZT_CHECK_MSG(zt_engine_create(&eng, zt_backend_cpu(), &lay, precs[k], stage, NULL, &comm, &err) == ZT_OK,
                         "%s", err.msg);
            if (!eng)
                continue;
            int nroles = k == 1 ? 4 : 3;
            ZT_CHECK_MSG(zt_engine_state_count(eng) == lay.nunits * nroles, "stage %d, %s: %d tensors for %d units",
                         stage, zt_dtype_name(precs[k].master), zt_engine_state_count(eng), lay.nunits);
            for (int i = 0; i < zt_engine_state_count(eng); i++) {
                zt_state_tensor t = zt_engine_state_tensor(eng, i);
                int u = i / nroles, role = i % nroles;
                char want[48];
                snprintf(want, sizeof want, "unit.%d.%s", u, roles[role]);
                size_t P = lay.units[u].padded_numel;
                ZT_CHECK_MSG(!strcmp(t.name, want) && t.unit == u && (int)t.role == role &&
                                 !strcmp(zt_state_role_name(t.role), roles[role]),
                             "stage %d tensor %d: %s (unit %d, role %d), want %s", stage, i, t.name, t.unit,
                             (int)t.role, want);
                ZT_CHECK_MSG(t.dtype == precs[k].master && t.numel == P && t.offset == 0 &&
                                 t.bytes == P * zt_dtype_size(precs[k].master),
                             "%s: %s, %zu elements at %zu, %zu bytes; want %s, %zu at 0", t.name,
                             zt_dtype_name(t.dtype), t.numel, t.offset, t.bytes, zt_dtype_name(precs[k].master), P);
            }
            zt_engine_destroy(eng);
            zt_comm_free(&comm);
        }
    zt_layout_free(&lay);
}

/* Tensor i's test pattern: bytes no other tensor (or a stale copy) holds. */
static void pattern(unsigned char *b, size_t n, int i, int round)
{
    for (size_t j = 0; j < n; j++)
        b[j] = (unsigned char)(i * 37 + round * 101 + j * 7 + (j >> 8));
}

/* Write every tensor through the view, read it back; the bytes moved go through
 * the backend's to_device and to_host, exactly once each.  map lends the tensor's
 * values (fill) and unmap with send stores what was written into the view.  On the
 * device the view is a copy: unmap without send leaves the tensor as it was.  The
 * master written through the view is what the engine trains: zt_engine_full_params
 * returns it.  Nothing is left allocated afterwards. */
static void round_trip(const zt_backend *base, int stage, int k)
{
    zt_layout lay;
    zt_err err = {0};
    ZT_CHECK(small_layout(&lay, &err) == ZT_OK);
    zt_backend be = counting(base);
    zt_comm comm;
    zt_comm_create_local(&comm);
    size_t other0 = zt_mem_current(ZT_MEM_OTHER);
    zt_engine *eng = NULL;
    ZT_CHECK_MSG(zt_engine_create(&eng, &be, &lay, precs[k], stage, NULL, &comm, &err) == ZT_OK, "%s", err.msg);
    if (!eng) {
        zt_layout_free(&lay);
        return;
    }
    const char *what = base->host_visible ? "cpu" : "emu";
    int n = zt_engine_state_count(eng);
    size_t total = 0, *start = malloc((size_t)n * sizeof *start); /* tensor i's place in want, got */
    for (int i = 0; i < n; i++) {
        start[i] = total;
        total += zt_engine_state_tensor(eng, i).bytes;
    }
    unsigned char *want = malloc(total), *got = malloc(total);
    to_host_bytes = to_device_bytes = 0;
    for (int i = 0; i < n; i++) {
        size_t b = zt_engine_state_tensor(eng, i).bytes, at = start[i];
        pattern(want + at, b, i, 0);
        zt_engine_state_write(eng, i, want + at);
    }
    for (int i = 0; i < n; i++)
        zt_engine_state_read(eng, i, got + start[i]);
    ZT_CHECK_MSG(memcmp(want, got, total) == 0, "%s stage %d %s: read does not give back what write stored", what,
                 stage, zt_dtype_name(precs[k].master));
    ZT_CHECK_MSG(to_device_bytes == total && to_host_bytes == total,
                 "%s: %zu bytes to the device, %zu to the host; the state is %zu", what, to_device_bytes,
                 to_host_bytes, total);

    /* map: filled with the values; a write into it sent back with unmap */
    for (int i = 0; i < n; i++) {
        size_t b = zt_engine_state_tensor(eng, i).bytes, at = start[i];
        unsigned char *v = zt_engine_state_map(eng, i, 1, &err);
        ZT_CHECK_MSG(v && memcmp(v, want + at, b) == 0, "%s: map(fill) of tensor %d", what, i);
        if (!v)
            continue;
        pattern(want + at, b, i, 1);
        memcpy(v, want + at, b);
        zt_engine_state_unmap(eng, i, v, 1);
        zt_engine_state_read(eng, i, got + at);
        ZT_CHECK_MSG(memcmp(got + at, want + at, b) == 0, "%s: unmap(send) of tensor %d", what, i);
        /* a write left unsent: the device's tensor keeps its values; on host memory
         * the view is the tensor itself */
        v = zt_engine_state_map(eng, i, 0, &err);
        if (!v)
            continue;
        memset(v, 0xA5, b);
        zt_engine_state_unmap(eng, i, v, 0);
        zt_engine_state_read(eng, i, got + at);
        if (base->host_visible)
            ZT_CHECK(got[at] == 0xA5 && got[at + b - 1] == 0xA5);
        else
            ZT_CHECK_MSG(memcmp(got + at, want + at, b) == 0, "emu: unmap without send changed tensor %d", i);
    }

    /* the master the view holds is the engine's: fp32 values written as a ramp
     * come back from full_params at each parameter's place in its unit */
    if (precs[k].master == ZT_F32) {
        for (int i = 0; i < n; i++) {
            zt_state_tensor t = zt_engine_state_tensor(eng, i);
            if (t.role != ZT_STATE_MASTER)
                continue;
            float *m = malloc(t.bytes);
            for (size_t j = 0; j < t.numel; j++)
                m[j] = (float)t.unit * 1000.0f + (float)(t.offset + j);
            zt_engine_state_write(eng, i, m);
            free(m);
        }
        float **vals = malloc((size_t)lay.nparams * sizeof *vals);
        for (int p = 0; p < lay.nparams; p++)
            vals[p] = malloc(lay.params[p].numel * sizeof(float));
        ZT_CHECK(zt_engine_full_params(eng, vals, &err) == ZT_OK);
        int bad = 0;
        for (int p = 0; p < lay.nparams; p++) {
            const zt_param *q = &lay.params[p];
            for (size_t j = 0; j < q->numel; j++)
                bad += vals[p][j] != (float)q->unit * 1000.0f + (float)(q->offset + j);
            free(vals[p]);
        }
        free(vals);
        ZT_CHECK_MSG(bad == 0, "%s stage %d: %d parameter values are not what the view wrote", what, stage, bad);
    }
    free(want);
    free(got);
    free(start);
    zt_engine_destroy(eng);
    zt_comm_free(&comm);
    ZT_CHECK_MSG(zt_mem_current(ZT_MEM_OTHER) == other0 && zt_mem_current(ZT_MEM_PARAMS) == 0 &&
                     zt_mem_current(ZT_MEM_OPTIM) == 0,
                 "%s: %zu bytes of other memory left (had %zu), params %zu, optimizer %zu", what,
                 zt_mem_current(ZT_MEM_OTHER), other0, zt_mem_current(ZT_MEM_PARAMS), zt_mem_current(ZT_MEM_OPTIM));
    zt_layout_free(&lay);
}

static void test_view_round_trips_on_the_cpu(void)
{
    for (int stage = 0; stage <= 3; stage += 3)
        for (int k = 0; k < 2; k++)
            round_trip(zt_backend_cpu(), stage, k);
}

static void test_view_round_trips_on_the_emulated_device(void)
{
    for (int stage = 0; stage <= 3; stage += 3)
        for (int k = 0; k < 2; k++)
            round_trip(zt_backend_emu(), stage, k);
}

/* The accessors the trainer reads, and a refused create that leaves nothing. */
static void test_accessors_and_refused_create(void)
{
    zt_layout lay;
    zt_err err = {0};
    ZT_CHECK(small_layout(&lay, &err) == ZT_OK);
    zt_comm comm;
    zt_comm_create_local(&comm);
    size_t other0 = zt_mem_current(ZT_MEM_OTHER);
    zt_engine *eng = (zt_engine *)&lay; /* create must clear it on failure */
    ZT_CHECK(zt_engine_create(&eng, zt_backend_cpu(), &lay, precs[0], 5, NULL, &comm, &err) == ZT_EINPUT);
    ZT_CHECK(eng == NULL && strstr(err.msg, "ZeRO stage 5") && zt_mem_current(ZT_MEM_OTHER) == other0);
    ZT_CHECK(zt_engine_create(&eng, zt_backend_cpu(), &lay, precs[1], 3, NULL, &comm, &err) == ZT_OK);
    ZT_CHECK(zt_engine_backend(eng) == zt_backend_cpu() && zt_engine_layout(eng) == &lay &&
             zt_engine_comm(eng) == &comm && zt_engine_precision(eng).master == ZT_BF16);
    ZT_CHECK(zt_engine_group_size(eng) == 1 && zt_engine_group_rank(eng) == 0);
    ZT_CHECK(zt_engine_optimizer_steps(eng) == 0);
    zt_engine_set_optimizer_steps(eng, 41);
    ZT_CHECK(zt_engine_optimizer_steps(eng) == 41);
    zt_engine_stats s = zt_engine_get_stats(eng);
    ZT_CHECK(zt_engine_nonfinite_unit(eng) == -1);
    ZT_CHECK(s.prefetch_used == 0 && s.prefetch_unit == -1 && s.pool_held == 0 && s.gradients_open == 0);
    for (int u = 0; u < lay.nunits; u++)
        ZT_CHECK(zt_engine_unit_phase(eng, u) == ZT_UNIT_IDLE);
    zt_engine_destroy(eng);
    zt_engine_destroy(NULL);
    ZT_CHECK(zt_mem_current(ZT_MEM_OTHER) == other0);
    zt_layout_free(&lay);
}

/* Offload (engine_impl.h, offload.c): on the emulated device the state lives in
 * host memory, counted as host bytes by role, as the estimate says; the view lends
 * the buffers themselves (no device copy moves); on the CPU nothing moves.  Every
 * host byte is given back on destroy. */
static void test_offload_puts_the_state_in_host_memory(void)
{
    zt_layout lay;
    zt_err err = {0};
    ZT_CHECK(small_layout(&lay, &err) == ZT_OK);
    zt_comm comm;
    zt_comm_create_local(&comm);
    for (int k = 0; k < 2; k++)
        for (int stage = 1; stage <= 3; stage += 2) {
            zt_overlap ov = {.offload_optimizer = 1, .offload_params = stage == 3};
            zt_backend be = counting(zt_backend_emu());
            zt_engine *eng = NULL;
            ZT_CHECK_MSG(zt_engine_create(&eng, &be, &lay, precs[k], stage, &ov, &comm, &err) == ZT_OK, "%s",
                         err.msg);
            if (!eng)
                continue;
            zt_engine_bytes b = zt_engine_state_bytes(eng), est = zt_engine_estimate(&lay, precs[k], stage, 1, &ov);
            ZT_CHECK_MSG(zt_mem_host_current(ZT_MEM_PARAMS) == b.master, "stage %d: host params %zu, master %zu",
                         stage, zt_mem_host_current(ZT_MEM_PARAMS), b.master);
            /* stage 3 copies each unit's gradient shard down as it is reduced: a host copy
             * of every shard; stage 1 one shard at a time, a communication buffer */
            ZT_CHECK(zt_mem_host_current(ZT_MEM_OPTIM) == b.optim);
            ZT_CHECK_MSG(zt_mem_host_current(ZT_MEM_GRADS) == (stage == 3 ? b.grads / 2 : 0), "stage %d: host "
                         "grads %zu of %zu", stage, zt_mem_host_current(ZT_MEM_GRADS), b.grads);
            ZT_CHECK(b.host == b.master + b.optim + zt_mem_host_current(ZT_MEM_GRADS) +
                                   zt_mem_host_current(ZT_MEM_COMM) && b.host > b.master + b.optim);
            ZT_CHECK_MSG(est.host == b.host && est.master == b.master && est.optim == b.optim &&
                         est.comm == b.comm && est.grads == b.grads && est.gathered == b.gathered,
                         "stage %d: estimate host %zu comm %zu, engine %zu %zu", stage, est.host, est.comm, b.host,
                         b.comm);
            /* the view: host memory lent as it is, written and read back without the device */
            to_host_bytes = to_device_bytes = 0;
            int n = zt_engine_state_count(eng);
            for (int i = 0; i < n; i++) {
                zt_state_tensor t = zt_engine_state_tensor(eng, i);
                unsigned char *want = malloc(t.bytes), *got = malloc(t.bytes);
                pattern(want, t.bytes, i, k);
                zt_engine_state_write(eng, i, want);
                void *view = zt_engine_state_map(eng, i, 1, &err);
                zt_engine_state_read(eng, i, got);
                ZT_CHECK(view && memcmp(view, want, t.bytes) == 0 && memcmp(got, want, t.bytes) == 0);
                zt_engine_state_unmap(eng, i, view, 0);
                free(want);
                free(got);
            }
            ZT_CHECK_MSG(to_host_bytes == 0 && to_device_bytes == 0, "stage %d: the view moved %zu + %zu device "
                         "bytes of host-resident state", stage, to_host_bytes, to_device_bytes);
            zt_engine_destroy(eng);
            for (int c = 0; c < ZT_MEM_NCAT; c++)
                ZT_CHECK(zt_mem_host_current((zt_mem_cat)c) == 0);
            /* the delayed update's second sets (gradient shards, compute-dtype shards):
             * allocated as the estimate says, all host memory, all given back */
            ov.offload_delayed_update = 1;
            ZT_CHECK(zt_engine_create(&eng, &be, &lay, precs[k], stage, &ov, &comm, &err) == ZT_OK);
            zt_engine_bytes bd = zt_engine_state_bytes(eng), estd = zt_engine_estimate(&lay, precs[k], stage, 1, &ov);
            size_t host = 0;
            for (int c = 0; c < ZT_MEM_NCAT; c++)
                host += zt_mem_host_current((zt_mem_cat)c);
            ZT_CHECK_MSG(estd.host == bd.host && estd.comm == bd.comm && estd.grads == bd.grads && bd.host == host &&
                         bd.host > b.host, "stage %d, delayed update: estimate host %zu grads %zu, engine %zu %zu, "
                         "counted %zu, without it %zu", stage, estd.host, estd.grads, bd.host, bd.grads, host, b.host);
            zt_engine_destroy(eng);
            for (int c = 0; c < ZT_MEM_NCAT; c++)
                ZT_CHECK(zt_mem_host_current((zt_mem_cat)c) == 0);
            ov.offload_delayed_update = 0;
            /* the CPU: a no-op, nothing counted as offloaded */
            ZT_CHECK(zt_engine_create(&eng, zt_backend_cpu(), &lay, precs[k], stage, &ov, &comm, &err) == ZT_OK);
            ZT_CHECK(eng && zt_engine_state_bytes(eng).host == 0 && zt_mem_host_current(ZT_MEM_PARAMS) == 0);
            zt_engine_destroy(eng);
        }
    zt_layout_free(&lay);
}

int main(void)
{
    ZT_RUN(test_view_lists_the_state);
    ZT_RUN(test_view_round_trips_on_the_cpu);
    ZT_RUN(test_view_round_trips_on_the_emulated_device);
    ZT_RUN(test_accessors_and_refused_create);
    ZT_RUN(test_offload_puts_the_state_in_host_memory);
    ZT_TEST_MAIN_END();
}
