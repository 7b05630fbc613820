/* comm_create.c — the communicators (see comm.h): the machines' topology, the
 * shard and replica groups over the world, and the node's arrival board the
 * watchdog reads.  The collectives over them are comm.c's. */
#include "comm.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "comm_impl.h"
#ifdef ZT_CUDA
#include "comm_nccl.h"
#endif

/* ids[r] = the machine of world rank r, named by its lowest world rank (world
 * ints, malloc'd; the caller frees).  Collective over the world. */
static int *machine_ids(int world, int *machine_size, int *machine_rank)
{
    int rank, id;
    MPI_Comm node;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node);
    MPI_Comm_size(node, machine_size);
    MPI_Comm_rank(node, machine_rank); /* ordered by world rank (the split's key) */
    MPI_Allreduce(&rank, &id, 1, MPI_INT, MPI_MIN, node);
    MPI_Comm_free(&node);
    int *ids = malloc((size_t)world * sizeof *ids), ok = ids != NULL, all_ok;
    /* the ranks agree first, so none waits in the gather for a rank that lacks memory */
    MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (!all_ok) {
        free(ids);
        return NULL;
    }
    MPI_Allgather(&id, 1, MPI_INT, ids, 1, MPI_INT, MPI_COMM_WORLD);
    return ids;
}

static void describe_topology(zt_topology *t, const int *ids, int world, int machine_size, int machine_rank)
{
    memset(t, 0, sizeof *t);
    t->machine_size = machine_size;
    t->machine_rank = machine_rank;
    /* a machine is named by its lowest rank: it is a block of consecutive ranks
     * when every member lies within its machine's size from that rank */
    int even = 1, size0 = 0;
    for (int r = 0; r < world; r++) {
        if (ids[r] != r)
            continue;
        t->machines++;
        int size = 0;
        for (int q = r; q < world; q++)
            size += ids[q] == r;
        for (int q = r; q < r + size && q < world; q++)
            even &= ids[q] == r;
        if (!size0)
            size0 = size;
        even &= size == size0;
    }
    t->machine_ranks = even ? size0 : 0;
}

int zt_comm_topology(zt_topology *t, zt_err *err)
{
    int world, size, rank, mrank;
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    zt_watch_start(rank);
    uint64_t seq = zt_watch_enter("topology", ZT_SCOPE_WORLD, 0, 0, NULL, -1);
    zt_watch_block(seq);
    int *ids = machine_ids(world, &size, &mrank);
    zt_watch_unblock(seq);
    if (!ids)
        return zt_fail(err, ZT_EFAIL, "out of memory for the machine map of %d ranks", world);
    describe_topology(t, ids, world, size, mrank);
    free(ids);
    return ZT_OK;
}

void zt_comm_create_local(zt_comm *c)
{
    memset(c, 0, sizeof *c);
    c->world = c->shard_size = c->replica_size = 1;
    for (int s = 0; s < 3; s++)
        c->scope_local[s] = 1;
    c->topo.machines = c->topo.machine_ranks = c->topo.machine_size = 1;
    c->unit = -1;
}

/* Members of each scope that share this rank's machine (comm.h's link split). */
static void count_local_members(zt_comm *c, const int *ids)
{
    int mine = ids[c->rank], G = c->shard_size;
    memset(c->scope_local, 0, sizeof c->scope_local);
    for (int j = 0; j < G; j++) /* shard group: ranks replica_rank*G + j */
        c->scope_local[ZT_SCOPE_SHARD] += ids[c->replica_rank * G + j] == mine;
    for (int j = 0; j < c->replica_size; j++) /* replica group: ranks j*G + shard_rank */
        c->scope_local[ZT_SCOPE_REPLICA] += ids[j * G + c->shard_rank] == mine;
    for (int r = 0; r < c->world; r++)
        c->scope_local[ZT_SCOPE_WORLD] += ids[r] == mine;
}

/* The node's arrival board (watchdog.h): one slot per rank on this machine in a
 * shared-memory window, with pointers to every slot for the watchdog's loads. */
typedef struct node_board {
    zt_board b;
    MPI_Comm node;
    MPI_Win win;
} node_board;

static node_board *board_create(int world_rank, int world)
{
    node_board *nb = calloc(1, sizeof *nb);
    if (!nb)
        return NULL;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, world_rank, MPI_INFO_NULL, &nb->node);
    MPI_Comm_size(nb->node, &nb->b.n);
    MPI_Comm_rank(nb->node, &nb->b.me);
    nb->b.world = world;
    nb->b.slot = calloc((size_t)nb->b.n, sizeof *nb->b.slot);
    nb->b.world_rank = calloc((size_t)nb->b.n, sizeof *nb->b.world_rank);
    int *local = calloc((size_t)nb->b.n, sizeof *local);
    int ok = nb->b.slot && nb->b.world_rank && local, all_ok = 0;
    /* the ranks agree first, so none waits in the window's creation for one that failed */
    MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, nb->node);
    zt_board_slot *mine = NULL;
    ok = all_ok && MPI_Win_allocate_shared(sizeof *mine, 1, MPI_INFO_NULL, nb->node, &mine, &nb->win) ==
                       MPI_SUCCESS;
    if (ok) {
        atomic_init(&mine->entered, 0);
        atomic_init(&mine->timed_out, 0);
        atomic_init(&mine->reported, 0);
        atomic_init(&mine->beat, zt_watch_first_beat());
        MPI_Group wg, ng;
        MPI_Comm_group(MPI_COMM_WORLD, &wg);
        MPI_Comm_group(nb->node, &ng);
        for (int i = 0; i < nb->b.n; i++) {
            MPI_Aint size;
            int disp;
            MPI_Win_shared_query(nb->win, i, &size, &disp, &nb->b.slot[i]);
            local[i] = i;
        }
        MPI_Group_translate_ranks(ng, nb->b.n, local, wg, nb->b.world_rank);
        MPI_Group_free(&wg);
        MPI_Group_free(&ng);
        MPI_Barrier(nb->node); /* every slot is initialised before anyone reads it */
    }
    free(local);
    if (!ok) { /* the watchdog still works; it cannot say who is missing */
        free(nb->b.slot);
        free(nb->b.world_rank);
        MPI_Comm_free(&nb->node);
        free(nb);
        return NULL;
    }
    return nb;
}

static void board_free(node_board *nb)
{
    if (!nb)
        return;
    zt_watch_set_board(NULL);
    MPI_Win_free(&nb->win);
    MPI_Comm_free(&nb->node);
    free(nb->b.slot);
    free(nb->b.world_rank);
    free(nb);
}

int zt_comm_create(zt_comm *c, int group_size, zt_err *err)
{
    memset(c, 0, sizeof *c);
    MPI_Comm_rank(MPI_COMM_WORLD, &c->rank);
    MPI_Comm_size(MPI_COMM_WORLD, &c->world);
    if (group_size <= 0 || c->world % group_size != 0)
        return zt_fail(err, ZT_EINPUT,
                       "shard group size %d does not divide the world size %d (hybrid sharding needs "
                       "ranks_per_node to divide the number of processes)",
                       group_size, c->world);
    c->unit = -1;
    c->shard_size = group_size;
    c->shard_rank = c->rank % group_size;
    c->replica_size = c->world / group_size;
    c->replica_rank = c->rank / group_size;
    zt_watch_start(c->rank);
    uint64_t seq = enter(c, "comm_create", ZT_SCOPE_WORLD, 0);
    zt_watch_block(seq);
    int machine_size, machine_rank, *ids = machine_ids(c->world, &machine_size, &machine_rank);
    MPI_Comm *w = malloc(sizeof *w), *s = malloc(sizeof *s), *r = malloc(sizeof *r);
    if (!w || !s || !r || !ids) {
        free(w);
        free(s);
        free(r);
        free(ids);
        zt_watch_unblock(seq);
        return zt_fail(err, ZT_EFAIL, "out of memory for communicators");
    }
    describe_topology(&c->topo, ids, c->world, machine_size, machine_rank);
    count_local_members(c, ids);
    free(ids);
    MPI_Comm_dup(MPI_COMM_WORLD, w);
    MPI_Comm_split(MPI_COMM_WORLD, c->replica_rank, c->shard_rank, s);
    MPI_Comm_split(MPI_COMM_WORLD, c->shard_rank, c->replica_rank, r);
    node_board *nb = board_create(c->rank, c->world);
    zt_watch_unblock(seq);
    c->board = nb;
    zt_watch_set_board(nb ? &nb->b : NULL);
    c->world_comm = w;
    c->shard_comm = s;
    c->replica_comm = r;
    return ZT_OK;
}

void zt_comm_free(zt_comm *c)
{
#ifdef ZT_CUDA
    if (c->nccl)
        zt_nccl_free(c);
#endif
    for (int i = 0; i < ZT_COMM_LANES; i++)
        if (c->lane[i])
            c->dev.host_free(ZT_MEM_COMM, c->lane[i], c->lane_bytes[i]);
    board_free(c->board);
    void *comms[3] = {c->world_comm, c->shard_comm, c->replica_comm};
    for (int i = 0; i < 3; i++)
        if (comms[i]) {
            MPI_Comm_free(as_comm(comms[i]));
            free(comms[i]);
        }
    memset(c, 0, sizeof *c);
}

