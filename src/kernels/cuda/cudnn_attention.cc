/* cudnn_attention.cc — cudnn_attention.h over the cudnn-frontend headers' graph API
 * (scripts/setup.sh installs them; the Makefile compiles this file only where it finds
 * them and cuDNN).  C++ stays inside: every frontend error and exception becomes a
 * message in the caller's buffer.
 *
 * The frontend is built with its dynamic loading: it calls cuDNN through symbols looked
 * up in the handle below (cudnn_frontend::cudnn_dlhandle, which the user of the headers
 * defines), and the CUDA runtime through the runtime the process already loaded.  So
 * the binary has no link-time dependency on libcudnn. */
#define NV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING 1
#define CUDNN_FRONTEND_SKIP_JSON_LIB 1
#include <cudnn_frontend.h>

#include <dlfcn.h>

#include <cmath>
#include <cstdlib>
#include <cstdio>
#include <exception>
#include <new>

#include "cudnn_attention.h"

namespace cudnn_frontend {
void *cudnn_dlhandle = nullptr; /* the headers' hook for the library they call into */
}

namespace fe = cudnn_frontend;

namespace {

/* the tensors' ids in both graphs: executions bind pointers by them */
enum : int64_t { UID_Q = 1, UID_K, UID_V, UID_O, UID_STATS, UID_DO, UID_DQ, UID_DK, UID_DV };

struct load_state {
    int tried = 0, ok = 0;
    long version = 0;
    char why[256] = "";
};
load_state loaded;

void say(char *why, size_t cap, const char *msg)
{
    if (cap)
        std::snprintf(why, cap, "%s", msg);
}

/* the strides of (B, H, T, D) for rows of `row` elements holding H heads of D */
std::vector<int64_t> rows_of(int64_t T, int64_t row, int64_t D) { return {T * row, D, row, 1}; }

} // namespace

struct zt_cudnn_sdpa {
    cudnnHandle_t handle = nullptr;
    fe::graph::Graph fwd, bwd;
};

extern "C" int zt_cudnn_load(long *version, char *why, size_t cap)
{
    if (!loaded.tried) {
        loaded.tried = 1;
        /* the frontend's own CUDA runtime calls go to the runtime this process linked (by
         * its soname, which dlopen answers with the copy already loaded), not to another
         * major version that may also be on the library path */
        int rt = 0;
        char soname[32];
        if (cudaRuntimeGetVersion(&rt) == cudaSuccess) {
            std::snprintf(soname, sizeof soname, "libcudart.so.%d", rt / 1000);
            setenv("CUDNN_FRONTEND_CUDART_LIB_NAME", soname, 0);
        }
        /* the soname of cuDNN 9; the build's rpath and LD_LIBRARY_PATH say where */
        void *h = dlopen("libcudnn.so.9", RTLD_NOW | RTLD_LOCAL);
        if (!h) {
            const char *e = dlerror();
            std::snprintf(loaded.why, sizeof loaded.why, "%s", e ? e : "dlopen libcudnn.so.9 failed");
        } else if (void *f = dlsym(h, "cudnnGetVersion")) {
            fe::cudnn_dlhandle = h;
            loaded.version = (long)reinterpret_cast<size_t (*)(void)>(f)();
            loaded.ok = 1;
        } else {
            std::snprintf(loaded.why, sizeof loaded.why, "libcudnn.so.9 has no cudnnGetVersion");
        }
    }
    *version = loaded.version;
    if (!loaded.ok)
        say(why, cap, loaded.why);
    return loaded.ok;
}

namespace {

int failed(fe::error_t e, const char *what, char *why, size_t cap)
{
    if (cap)
        std::snprintf(why, cap, "cuDNN %s: %s", what, e.get_message().c_str());
    return -1;
}

void set_types(fe::graph::Graph &g)
{
    g.set_io_data_type(fe::DataType_t::BFLOAT16)
        .set_intermediate_data_type(fe::DataType_t::FLOAT)
        .set_compute_data_type(fe::DataType_t::FLOAT);
}

/* The inputs both graphs share: q and k rotated in one buffer, v in the qkv rows. */
struct qkv_tensors {
    std::shared_ptr<fe::graph::Tensor_attributes> q, k, v;
};
qkv_tensors inputs(fe::graph::Graph &g, int64_t B, int64_t T, int64_t nh, int64_t nkv, int64_t hd)
{
    const int64_t qk = (nh + nkv) * hd, w = (nh + 2 * nkv) * hd;
    auto t = [&](const char *name, int64_t uid, int64_t H, int64_t row) {
        return g.tensor(fe::graph::Tensor_attributes()
                            .set_name(name)
                            .set_uid(uid)
                            .set_dim({B, H, T, hd})
                            .set_stride(rows_of(T, row, hd)));
    };
    return {t("q", UID_Q, nh, qk), t("k", UID_K, nkv, qk), t("v", UID_V, nkv, w)};
}

/* validate, lower, pick the heuristic's plan and build it: the frontend's steps */
int finish(fe::graph::Graph &g, cudnnHandle_t h, const char *what, size_t *ws, char *why, size_t cap)
{
    fe::error_t e = g.validate();
    if (e.is_good())
        e = g.build_operation_graph(h);
    if (e.is_good())
        e = g.create_execution_plans({fe::HeurMode_t::A});
    if (e.is_good())
        e = g.check_support(h);
    if (e.is_good())
        e = g.build_plans(h);
    int64_t bytes = 0;
    if (e.is_good())
        e = g.get_workspace_size(bytes);
    if (!e.is_good())
        return failed(e, what, why, cap);
    *ws = (size_t)bytes;
    return 0;
}

int build_forward(zt_cudnn_sdpa *s, int64_t B, int64_t T, int64_t nh, int64_t nkv, int64_t hd, size_t *ws, char *why,
                  size_t cap)
{
    set_types(s->fwd);
    qkv_tensors in = inputs(s->fwd, B, T, nh, nkv, hd);
    auto opts = fe::graph::SDPA_attributes()
                    .set_name("attention")
                    .set_generate_stats(true)
                    .set_causal_mask(true)
                    .set_attn_scale(1.0f / std::sqrt((float)hd));
    auto [o, stats] = s->fwd.sdpa(in.q, in.k, in.v, opts);
    o->set_output(true).set_uid(UID_O).set_dim({B, nh, T, hd}).set_stride(rows_of(T, nh * hd, hd));
    stats->set_output(true).set_uid(UID_STATS).set_data_type(fe::DataType_t::FLOAT).set_dim({B, nh, T, 1}).set_stride(
        {nh * T, T, 1, 1});
    return finish(s->fwd, s->handle, "forward", ws, why, cap);
}

int build_backward(zt_cudnn_sdpa *s, int64_t B, int64_t T, int64_t nh, int64_t nkv, int64_t hd, size_t *ws,
                   char *why, size_t cap)
{
    fe::graph::Graph &g = s->bwd;
    set_types(g);
    qkv_tensors in = inputs(g, B, T, nh, nkv, hd);
    const int64_t w = (nh + 2 * nkv) * hd;
    auto o = g.tensor(fe::graph::Tensor_attributes().set_name("o").set_uid(UID_O).set_dim({B, nh, T, hd}).set_stride(
        rows_of(T, nh * hd, hd)));
    auto dO = g.tensor(fe::graph::Tensor_attributes().set_name("dO").set_uid(UID_DO).set_dim({B, nh, T, hd}).set_stride(
        rows_of(T, nh * hd, hd)));
    auto stats = g.tensor(fe::graph::Tensor_attributes()
                              .set_name("stats")
                              .set_uid(UID_STATS)
                              .set_dim({B, nh, T, 1})
                              .set_stride({nh * T, T, 1, 1})
                              .set_data_type(fe::DataType_t::FLOAT));
    /* deterministic: ztrain repeats its bits run to run (docs/gpu.md, "Determinism") */
    auto opts = fe::graph::SDPA_backward_attributes()
                    .set_name("attention backward")
                    .set_causal_mask(true)
                    .set_attn_scale(1.0f / std::sqrt((float)hd))
                    .set_deterministic_algorithm(true);
    auto [dq, dk, dv] = g.sdpa_backward(in.q, in.k, in.v, o, dO, stats, opts);
    dq->set_output(true).set_uid(UID_DQ).set_dim({B, nh, T, hd}).set_stride(rows_of(T, w, hd));
    dk->set_output(true).set_uid(UID_DK).set_dim({B, nkv, T, hd}).set_stride(rows_of(T, w, hd));
    dv->set_output(true).set_uid(UID_DV).set_dim({B, nkv, T, hd}).set_stride(rows_of(T, w, hd));
    return finish(g, s->handle, "backward", ws, why, cap);
}

int run(const fe::graph::Graph &g, cudnnHandle_t h, std::unordered_map<int64_t, void *> &ptrs, void *ws,
        const char *what, char *why, size_t cap)
{
    try {
        fe::error_t e = g.execute(h, ptrs, ws);
        return e.is_good() ? 0 : failed(e, what, why, cap);
    } catch (const std::exception &x) {
        say(why, cap, x.what());
        return -1;
    }
}

} // namespace

/* a build that failed half way */
static void free_sdpa(zt_cudnn_sdpa *g)
{
    if (g->handle)
        fe::detail::destroy_handle(g->handle);
    delete g;
}

extern "C" zt_cudnn_sdpa *zt_cudnn_sdpa_build(void *stream, int B, int T, int nh, int nkv, int hd, size_t *ws_fwd,
                                              size_t *ws_bwd, char *why, size_t cap)
{
    zt_cudnn_sdpa *s = new (std::nothrow) zt_cudnn_sdpa;
    if (!s) {
        say(why, cap, "out of host memory for cuDNN's graphs");
        return nullptr;
    }
    int rc = -1;
    try {
        if (fe::detail::create_handle(&s->handle) != CUDNN_STATUS_SUCCESS)
            say(why, cap, "cudnnCreate failed");
        else if (fe::detail::set_stream(s->handle, (cudaStream_t)stream) != CUDNN_STATUS_SUCCESS)
            say(why, cap, "cudnnSetStream failed");
        else if (build_forward(s, B, T, nh, nkv, hd, ws_fwd, why, cap) == 0)
            rc = build_backward(s, B, T, nh, nkv, hd, ws_bwd, why, cap);
    } catch (const std::exception &x) {
        say(why, cap, x.what());
    }
    if (rc != 0) {
        free_sdpa(s);
        return nullptr;
    }
    return s;
}

extern "C" int zt_cudnn_sdpa_forward(zt_cudnn_sdpa *g, const uint16_t *q, const uint16_t *k, const uint16_t *v,
                                     uint16_t *o, float *stats, void *workspace, char *why, size_t cap)
{
    std::unordered_map<int64_t, void *> p = {{UID_Q, (void *)q}, {UID_K, (void *)k},   {UID_V, (void *)v},
                                             {UID_O, (void *)o}, {UID_STATS, (void *)stats}};
    return run(g->fwd, g->handle, p, workspace, "forward", why, cap);
}

extern "C" int zt_cudnn_sdpa_backward(zt_cudnn_sdpa *g, const uint16_t *q, const uint16_t *k, const uint16_t *v,
                                      const uint16_t *o, const uint16_t *dO, const float *stats, uint16_t *dq,
                                      uint16_t *dk, uint16_t *dv, void *workspace, char *why, size_t cap)
{
    std::unordered_map<int64_t, void *> p = {{UID_Q, (void *)q},         {UID_K, (void *)k},   {UID_V, (void *)v},
                                             {UID_O, (void *)o},         {UID_DO, (void *)dO}, {UID_STATS, (void *)stats},
                                             {UID_DQ, (void *)dq},       {UID_DK, (void *)dk}, {UID_DV, (void *)dv}};
    return run(g->bwd, g->handle, p, workspace, "backward", why, cap);
}

