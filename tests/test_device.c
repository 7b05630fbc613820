/* test_device.c — the backend entries that move bytes (kernels/backend.h), on the
 * host table and on the emulated device, and the emulated device's promise: its
 * buffers cannot be read by the host, so a test that runs on it proves that
 * nothing reaches them except through to_host / to_device.  (A CUDA table is
 * checked on a GPU by tests/gpu/check.sh; nothing here pretends one ran.) */
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../src/comm/comm.h"
#include "../src/core/mem.h"
#include "../src/engine/engine.h"
#include "../src/kernels/backend.h"
#include "test.h"

static void test_open(void)
{
    int devices = -1;
    char desc[96];
    zt_err err = {0};
    ZT_CHECK(zt_backend_open("cpu", 3, &devices, desc, sizeof desc, &err) == zt_backend_cpu());
    ZT_CHECK(devices == 0 && !strcmp(desc, "cpu"));
    ZT_CHECK(zt_backend_open("emu", 1, &devices, desc, sizeof desc, &err) == zt_backend_emu());
    ZT_CHECK(devices == 1 && !strncmp(desc, "emu:1 ", 6));
    ZT_CHECK(zt_backend_open("tpu", 0, &devices, desc, sizeof desc, &err) == NULL && err.code == ZT_EINPUT);
    ZT_CHECK(strstr(err.msg, "expected cpu or cuda") != NULL);
#ifndef ZT_CUDA
    /* a build without CUDA says so; a CUDA build is checked on a GPU (tests/gpu/check.sh) */
    ZT_CHECK(zt_backend_open("cuda", 0, &devices, desc, sizeof desc, &err) == NULL && err.code == ZT_EINPUT);
    ZT_CHECK(strstr(err.msg, "built without CUDA") != NULL);
#endif
    ZT_CHECK(zt_backend_cpu()->host_visible == 1 && zt_backend_emu()->host_visible == 0);
    ZT_CHECK(zt_backend_cpu()->stream() == NULL);
}

/* to_device, copy (at offsets), zero, convert and to_host give back what was
 * sent, and the allocations are accounted like alloc's, on both tables. */
static void moves_on(const zt_backend *be)
{
    enum { N = 1000 };
    float host[N], back[N];
    for (int i = 0; i < N; i++)
        host[i] = (float)i * 0.25f - 7.0f;
    size_t before = zt_mem_current(ZT_MEM_COMM);
    float *a = be->alloc(ZT_MEM_COMM, N * sizeof(float)), *b = be->alloc(ZT_MEM_COMM, N * sizeof(float));
    ZT_CHECK(a && b);
    ZT_CHECK(zt_mem_current(ZT_MEM_COMM) == before + 2 * N * sizeof(float));
    be->to_device(a, host, sizeof host);
    be->zero(b, N * sizeof(float));
    be->copy(b + 100, a + 200, 300 * sizeof(float)); /* offsets into a buffer are buffers too */
    be->sync();
    be->to_host(back, b, sizeof back);
    for (int i = 0; i < N; i++) {
        float want = i >= 100 && i < 400 ? host[i + 100] : 0.0f;
        if (back[i] != want) {
            ZT_CHECK_MSG(back[i] == want, "%s: element %d is %g, want %g", be->name, i, back[i], want);
            break;
        }
    }
    uint16_t *h16 = be->alloc(ZT_MEM_COMM, N * sizeof(uint16_t)), got16[N];
    be->convert(h16, ZT_BF16, a, ZT_F32, N);
    be->to_host(got16, h16, sizeof got16);
    ZT_CHECK(zt_bf16_to_f32(got16[37]) == zt_round_bf16(host[37]));
    void *pin = be->host_alloc(ZT_MEM_COMM, 64);
    ZT_CHECK(pin != NULL);
    memset(pin, 1, 64); /* host memory, whatever the device */
    be->host_free(ZT_MEM_COMM, pin, 64);
    be->free(ZT_MEM_COMM, h16, N * sizeof(uint16_t));
    be->free(ZT_MEM_COMM, a, N * sizeof(float));
    be->free(ZT_MEM_COMM, b, N * sizeof(float));
    ZT_CHECK(zt_mem_current(ZT_MEM_COMM) == before);
}

static void test_moves_cpu(void) { moves_on(zt_backend_cpu()); }
static void test_moves_emu(void) { moves_on(zt_backend_emu()); }

/* A host read of an emulated buffer faults: a child process tries one. */
static void test_emu_buffers_are_not_host_memory(void)
{
    const zt_backend *be = zt_backend_emu();
    volatile float *p = be->alloc(ZT_MEM_OTHER, 64);
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        float x = p[3]; /* must not return */
        _exit(x == 0.0f ? 0 : 3);
    }
    int status = 0;
    ZT_CHECK(pid > 0 && waitpid(pid, &status, 0) == pid);
    /* a plain build dies of SIGSEGV; a sanitizer build reports the fault and exits 1 */
    ZT_CHECK_MSG(WIFSIGNALED(status) || (WIFEXITED(status) && WEXITSTATUS(status) != 0 && WEXITSTATUS(status) != 3),
                 "reading an emulated buffer on the host did not fault (status %d)", status);
    be->free(ZT_MEM_OTHER, (void *)p, 64);
}

/* The staged path's lanes on one process: a group of one moves nothing, and a
 * device copy stands in for the host's memcpy; the lanes are freed with the comm. */
static void test_staged_comm_group_of_one(void)
{
    const zt_backend *be = zt_backend_emu();
    zt_comm c;
    zt_comm_create_local(&c);
    zt_comm_device dev = zt_engine_comm_device(be);
    zt_err err = {0};
    ZT_CHECK(zt_comm_set_device(&c, ZT_COMM_STAGED, &dev, &err) == ZT_OK);
    ZT_CHECK(c.path == ZT_COMM_STAGED && !strcmp(zt_comm_path_name(c.path), "staged MPI"));
    float host[8] = {1, 2, 3, 4, 5, 6, 7, 8}, back[8];
    float *full = be->alloc(ZT_MEM_COMM, sizeof host), *shard = be->alloc(ZT_MEM_COMM, sizeof host);
    be->to_device(shard, host, sizeof host);
    zt_comm_allgather(&c, full, shard, 8, ZT_F32);
    be->to_host(back, full, sizeof back);
    ZT_CHECK(!memcmp(back, host, sizeof host));
    zt_comm_op op;
    zt_comm_start_allreduce(&c, &op, full, 8, ZT_F32, ZT_SCOPE_WORLD);
    zt_comm_wait(&c, &op);
    be->to_host(back, full, sizeof back);
    ZT_CHECK(!memcmp(back, host, sizeof host)); /* a world of one: the sum is the buffer */
    ZT_CHECK(c.bytes[0] + c.bytes[1] + c.bytes[2] == 0 && zt_comm_staging_bytes(&c) == 0);
#ifndef ZT_CUDA
    /* NCCL is a CUDA build's */
    zt_comm d;
    zt_comm_create_local(&d);
    ZT_CHECK(zt_comm_set_device(&d, ZT_COMM_NCCL, &dev, &err) == ZT_EINPUT);
    ZT_CHECK(strstr(err.msg, "without CUDA") != NULL && d.path == ZT_COMM_HOST);
    zt_comm_free(&d);
#endif
    be->free(ZT_MEM_COMM, full, sizeof host);
    be->free(ZT_MEM_COMM, shard, sizeof host);
    zt_comm_free(&c);
}

int main(void)
{
    ZT_RUN(test_open);
    ZT_RUN(test_moves_cpu);
    ZT_RUN(test_moves_emu);
    ZT_RUN(test_emu_buffers_are_not_host_memory);
    ZT_RUN(test_staged_comm_group_of_one);
    ZT_TEST_MAIN_END();
}
