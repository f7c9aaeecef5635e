/* test_multinode.c - data parallelism across ranks and nodes
 * (docs/multinode.md): the gradient sum across nodes, the launchers'
 * rendezvous and watch, and gnnlaunch --nodes end to end on loopback.
 *
 * In process (threads play the ranks and nodes):
 *   - netreduce, K nodes of R ranks over TCP on 127.0.0.1, each node's
 *     ranks in an in-memory shm all-reduce: every rank of every node ends
 *     with exactly the float sum of all W = K*R buffers in global rank
 *     order (memcmp, -0.0 and subnormals included), for (K, R) = (2, 1),
 *     (2, 2), (3, 2), (4, 1) and several sizes, n = 0 as a barrier; the
 *     data is chosen so that another order (node sums first, or reversed)
 *     gives other bits, so the check could fail;
 *   - netreduce waits end: network silence (-ETIMEDOUT), a cancelling
 *     tick (-ECANCELED), the node's all-reduce closed (-EPIPE), a stray
 *     frame (dropped, counted);
 *   - the mesh: three nodes meet, agree on a name, and node 0's 128-byte
 *     blob and every endpoint reach all; epoch records, END and FAIL are
 *     relayed; a node that goes silent is reported lost to the others;
 *     a launcher that comes after the run started is refused alone, and
 *     node 0's main thread hears of it;
 *   - the rendezvous' refusals, each of one launcher only: a stray with
 *     other facts comes first, is refused naming the key, and the job
 *     starts when its own node comes; a node rank claimed twice: the
 *     holder keeps it, the second is refused naming both, the job starts;
 *     a holder killed after its HELLO (a raw DEALER closed) or silent
 *     beyond the peer timeout gives its rank to a newcomer; node 0's
 *     timeout names the refusals beside the missing node; a missing node
 *     is named on both sides; the job token ignores order and '@' lines;
 *   - cluster.toml round-trips.
 * gnnlaunch (two to four launchers on this machine, loopback, the real
 * stages unless noted):
 *   - K=2, R=1 and K=2, R=2: both nodes exit 0 with the same final line
 *     and epoch lines, equal (but for seconds) to one launcher with K*R
 *     ranks in ordered mode, and node 0's checkpoints equal that run's bit
 *     for bit;
 *   - a node that never comes: the others fail with the timeout, naming
 *     the master and the missing node rank (exit 2); a launcher of another
 *     configuration: it alone exits 2 naming the key, and the job runs to
 *     exit 0 when its node 1 comes; one that comes while a run goes exits
 *     2 while node 0 notes it and runs on; a node rank given twice and a node
 *     with another configuration: those two exit 2, and node 0's timeout
 *     (exit 2, on node 1 too) names both refusals; bad flags: exit 2;
 *   - a node's launcher SIGKILLed mid-run: the other exits 3 within
 *     seconds naming the node; Ctrl-C on one node: 130 there, 3 on the
 *     other; a stage failing on one node (test stages): 3 on both; the
 *     nodes' cluster.toml files carry the same unique id; nothing is left
 *     in /dev/shm or the run directories;
 *   - GPU ranks (made-up GPUs, test stages), two nodes of two: node 0's
 *     NCCL unique id reaches every trainer of every node byte for byte
 *     (--nccl-id and cluster.toml), every stage of local rank r gets
 *     --device=r, node 0's NCCL helper is gone at the end; a CPU node
 *     beside GPU nodes is refused (exit 2), and node 0's timeout (exit 2)
 *     names it;
 *   - one node, 1, 2 and 4 ranks: test accuracy within one point. */
#include "t_util.h"

#include <arpa/inet.h>
#include <errno.h>
#include <math.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <zmq.h>

#include "core/util.h"
#include "ipc/allreduce.h"
#include "ipc/netreduce.h"
#include "launcher/mesh.h"
#include "launcher/rundir.h"
#include "ops/ckpt.h"
#include "stages/trainer_reduce.h"
#include "t_launch.h"

#define CASE_ALARM_S 120

static char g_ds[1200], g_acc_ds[1200], g_cfg[1200], g_acc_cfg[1200];
static char g_real[1300]; /* SLUICE_STAGE_DIR=<the real stages> */

/* ---- ports ------------------------------------------------------------------------------ */

static bool port_bindable(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bool ok = fd >= 0 && bind(fd, (struct sockaddr *)&sa, sizeof sa) == 0;
    if (fd >= 0)
        close(fd);
    return ok;
}

/* A port p with p .. p + n - 1 free on 127.0.0.1, below Linux's default
 * ephemeral range (32768 and up), so a connecting socket elsewhere on the
 * machine cannot take it between this check and the launcher's bind. */
static int free_ports(int n)
{
    static unsigned seed;
    if (!seed)
        seed = (unsigned)getpid() * 2654435761u;
    for (int tries = 0; tries < 1000; tries++) {
        seed = seed * 1103515245u + 12345u;
        int p = 20000 + (int)((seed >> 8) % 12000u);
        bool ok = true;
        for (int k = 0; k < n && ok; k++)
            ok = port_bindable(p + k);
        if (ok)
            return p;
    }
    fail_msg("no %d free ports in a row on 127.0.0.1", n);
    return -1;
}

/* ---- netreduce with threads as ranks ------------------------------------------------------ */

#define NR_MAX_RANKS 8
#define NR_CALLS 6
static const size_t nr_sizes[NR_CALLS] = {1000, 1, 0, 70001, 5, 4096};

/* Rank g's buffer of call c, element i: values over 12 decades of both
 * signs, so the order of the additions shows in the bits; some elements
 * -0.0 on every rank (the sum is -0.0), some +0.0 on rank 0 only (+0.0),
 * some subnormal. */
static float nr_value(uint32_t g, int c, size_t i)
{
    if (i % 97 == 3)
        return -0.0f;
    if (i % 89 == 5)
        return g == 0 ? 0.0f : -0.0f;
    if (i % 83 == 7)
        return 1e-40f * (float)(g + 1);
    uint64_t s = ((uint64_t)g << 40) ^ ((uint64_t)c << 32) ^ i;
    s = (s ^ (s >> 31)) * 0x7fb5d329728ea185ull;
    s = (s ^ (s >> 27)) * 0x81dadef4bc2dd44dull;
    s ^= s >> 33;
    float mag = powf(10.0f, (float)((int)(s % 13) - 6));
    float frac = 1.0f + (float)((s >> 8) & 0xffff) / 65536.0f;
    return (s >> 40) & 1 ? -mag * frac : mag * frac;
}

struct nr_world {
    uint32_t nodes, ranks;
    char eps[NR_MAX_RANKS][64];
    const char *ep_ptr[NR_MAX_RANKS];
    void *mem[NR_MAX_RANKS]; /* each node's all-reduce */
    size_t mem_len;
    float *expect[NR_CALLS]; /* the global rank-order sums */
};

struct nr_rank {
    struct nr_world *w;
    uint32_t node, rank;
    int rc;          /* first failure, or 0 */
    int bad_call;    /* the call whose result differed, or -1 */
    size_t bad_elem;
    char err[256];
};

static void *nr_thread(void *arg)
{
    struct nr_rank *me = arg;
    struct nr_world *w = me->w;
    struct allreduce ar = {0};
    struct netreduce nr = {0};
    me->bad_call = -1;
    uint32_t g = me->node * w->ranks + me->rank;
    if (w->ranks > 1 && (me->rc = allreduce_init(&ar, w->mem[me->node], w->mem_len, (int32_t)me->rank, me->err,
                                                 sizeof me->err)) != 0)
        return NULL;
    struct netreduce_params p = {.local = w->ranks > 1 ? &ar : NULL,
                                 .rank = me->rank,
                                 .ranks = w->ranks,
                                 .node = me->node,
                                 .nodes = w->nodes,
                                 .endpoints = w->ep_ptr,
                                 .timeout_ms = 30000};
    if ((me->rc = netreduce_init(&nr, &p, me->err, sizeof me->err)) != 0)
        goto out;
    float *buf = malloc(70001 * sizeof *buf);
    for (int c = 0; c < NR_CALLS && buf; c++) {
        size_t n = nr_sizes[c];
        for (size_t i = 0; i < n; i++)
            buf[i] = nr_value(g, c, i);
        if ((me->rc = netreduce_sum(&nr, buf, n)) != 0) {
            snprintf(me->err, sizeof me->err, "call %d: %s", c, strerror(-me->rc));
            break;
        }
        if (n && memcmp(buf, w->expect[c], n * sizeof *buf) != 0 && me->bad_call < 0) {
            me->bad_call = c;
            for (size_t i = 0; i < n; i++)
                if (memcmp(&buf[i], &w->expect[c][i], sizeof *buf)) {
                    me->bad_elem = i;
                    break;
                }
        }
    }
    free(buf);
out:
    netreduce_free(&nr);
    allreduce_free(&ar);
    return NULL;
}

static void nr_world_init(struct nr_world *w, uint32_t nodes, uint32_t ranks)
{
    memset(w, 0, sizeof *w);
    w->nodes = nodes;
    w->ranks = ranks;
    int port = free_ports((int)nodes);
    for (uint32_t k = 0; k < nodes; k++) {
        snprintf(w->eps[k], sizeof w->eps[k], "tcp://127.0.0.1:%d", port + (int)k);
        w->ep_ptr[k] = w->eps[k];
        if (ranks > 1) {
            char err[256];
            w->mem_len = allreduce_mem_size(ranks, 70001);
            w->mem[k] = mmap(NULL, w->mem_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            assert_true(w->mem[k] != MAP_FAILED);
            assert_int_equal(allreduce_mem_format(w->mem[k], w->mem_len, ranks, 70001, err, sizeof err), 0);
        }
    }
}

static void nr_world_free(struct nr_world *w)
{
    for (uint32_t k = 0; k < w->nodes; k++)
        if (w->mem[k])
            munmap(w->mem[k], w->mem_len);
    for (int c = 0; c < NR_CALLS; c++)
        free(w->expect[c]);
}

static void netreduce_case(uint32_t nodes, uint32_t ranks)
{
    struct nr_world w;
    nr_world_init(&w, nodes, ranks);
    uint32_t world = nodes * ranks;
    bool order_shows = false;
    for (int c = 0; c < NR_CALLS; c++) {
        size_t n = nr_sizes[c];
        w.expect[c] = malloc(SL_MAX(n, 1) * sizeof(float));
        assert_non_null(w.expect[c]);
        for (size_t i = 0; i < n; i++) {
            float s = nr_value(0, c, i), by_node = 0, rev = nr_value(world - 1, c, i);
            for (uint32_t g = 1; g < world; g++)
                s += nr_value(g, c, i);
            for (uint32_t k = 0; k < nodes; k++) { /* another order: node sums first */
                float part = nr_value(k * ranks, c, i);
                for (uint32_t r = 1; r < ranks; r++)
                    part += nr_value(k * ranks + r, c, i);
                by_node = k ? by_node + part : part;
            }
            for (uint32_t g = world - 1; g-- > 0;)
                rev += nr_value(g, c, i);
            w.expect[c][i] = s;
            order_shows |= memcmp(&s, &by_node, sizeof s) != 0 || memcmp(&s, &rev, sizeof s) != 0;
        }
    }
    if (world > 2) /* (two terms add up the same either way round) */
        assert_true(order_shows); /* the data tells summation orders apart */
    pthread_t th[NR_MAX_RANKS];
    struct nr_rank rk[NR_MAX_RANKS];
    for (uint32_t g = 0; g < world; g++) {
        rk[g] = (struct nr_rank){.w = &w, .node = g / ranks, .rank = g % ranks};
        assert_int_equal(pthread_create(&th[g], NULL, nr_thread, &rk[g]), 0);
    }
    for (uint32_t g = 0; g < world; g++)
        pthread_join(th[g], NULL);
    for (uint32_t g = 0; g < world; g++) {
        if (rk[g].rc)
            fail_msg("K=%u R=%u: node %u rank %u failed: %s (%s)", nodes, ranks, rk[g].node, rk[g].rank,
                     strerror(-rk[g].rc), rk[g].err);
        if (rk[g].bad_call >= 0)
            fail_msg("K=%u R=%u: node %u rank %u: call %d element %zu is not the global rank-order sum", nodes,
                     ranks, rk[g].node, rk[g].rank, rk[g].bad_call, rk[g].bad_elem);
    }
    nr_world_free(&w);
}

static void test_netreduce_exact(void **state)
{
    (void)state;
    static const uint32_t shapes[][2] = {{2, 1}, {2, 2}, {3, 2}, {4, 1}};
    for (size_t i = 0; i < SL_ARRAY_LEN(shapes); i++)
        netreduce_case(shapes[i][0], shapes[i][1]);
}

static int cancel_after_3(void *arg)
{
    int *n = arg;
    return ++*n > 3;
}

struct closer {
    struct nr_world *w;
    int rc_leader, rc_other;
};

static void *nr_close_leader(void *arg)
{
    struct closer *c = arg;
    struct allreduce ar = {0};
    struct netreduce nr = {0};
    char err[256];
    c->rc_leader = allreduce_init(&ar, c->w->mem[1], c->w->mem_len, 0, err, sizeof err);
    struct netreduce_params p = {
        .local = &ar, .rank = 0, .ranks = 2, .node = 1, .nodes = 2, .endpoints = c->w->ep_ptr, .tick_ms = 50};
    if (c->rc_leader == 0)
        c->rc_leader = netreduce_init(&nr, &p, err, sizeof err);
    float x = 1;
    if (c->rc_leader == 0)
        c->rc_leader = netreduce_sum(&nr, &x, 1); /* waits for node 0's partial, which never comes */
    netreduce_free(&nr);
    allreduce_free(&ar);
    return NULL;
}

static void *nr_close_other(void *arg)
{
    struct closer *c = arg;
    struct allreduce ar = {0};
    struct netreduce nr = {0};
    char err[256];
    c->rc_other = allreduce_init(&ar, c->w->mem[1], c->w->mem_len, 1, err, sizeof err);
    struct netreduce_params p = {.local = &ar, .rank = 1, .ranks = 2, .node = 1, .nodes = 2, .tick_ms = 50};
    if (c->rc_other == 0)
        c->rc_other = netreduce_init(&nr, &p, err, sizeof err);
    float x = 1;
    if (c->rc_other == 0)
        c->rc_other = netreduce_sum(&nr, &x, 1);
    netreduce_free(&nr);
    allreduce_free(&ar);
    return NULL;
}

/* Every way a wait on the network ends besides success. */
static void test_netreduce_waits_end(void **state)
{
    (void)state;
    char err[256];
    float x[4] = {1, 2, 3, 4};
    /* silence: node 1 never answers */
    struct nr_world w;
    nr_world_init(&w, 2, 1);
    struct netreduce nr;
    struct netreduce_params p = {.rank = 0, .ranks = 1, .node = 0, .nodes = 2, .endpoints = w.ep_ptr,
                                 .tick_ms = 50, .timeout_ms = 400};
    assert_int_equal(netreduce_init(&nr, &p, err, sizeof err), 0);
    double t0 = t_now();
    assert_int_equal(netreduce_sum(&nr, x, 4), -ETIMEDOUT);
    double dt = t_now() - t0;
    assert_true(dt >= 0.35 && dt < 5);
    assert_int_equal(netreduce_sum(&nr, x, 4), -EPIPE); /* broken for good */
    netreduce_free(&nr);
    /* a tick that cancels */
    int ticks = 0;
    p.timeout_ms = 0;
    p.tick = cancel_after_3;
    p.tick_arg = &ticks;
    assert_int_equal(netreduce_init(&nr, &p, err, sizeof err), 0);
    assert_int_equal(netreduce_sum(&nr, x, 4), -ECANCELED);
    assert_int_equal(ticks, 4);
    netreduce_free(&nr);
    /* a stray frame (no message of ours) where node 1 waits for node 0's
     * partial sum: dropped and counted, the wait goes on (to its timeout
     * here); it once failed the run with -EPROTO */
    p = (struct netreduce_params){.rank = 0, .ranks = 1, .node = 1, .nodes = 2, .endpoints = w.ep_ptr,
                                  .tick_ms = 50, .timeout_ms = 600, .max_floats = 4};
    assert_int_equal(netreduce_init(&nr, &p, err, sizeof err), 0);
    void *ctx = zmq_ctx_new(), *push = zmq_socket(ctx, ZMQ_PUSH);
    int linger = 1000;
    zmq_setsockopt(push, ZMQ_LINGER, &linger, sizeof linger);
    assert_int_equal(zmq_connect(push, w.eps[1]), 0);
    char junk[48] = "not a Sluice gradient message at all, no";
    assert_int_equal(zmq_send(push, junk, sizeof junk, 0), (int)sizeof junk);
    assert_int_equal(netreduce_sum(&nr, x, 4), -ETIMEDOUT);
    assert_int_equal(nr.strays, 1);
    zmq_close(push);
    zmq_ctx_term(ctx);
    netreduce_free(&nr);
    nr_world_free(&w);
    /* the node's all-reduce closed (the launcher stopping the run) while
     * node 1's leader waits on the network and its other rank on the leader */
    nr_world_init(&w, 2, 2);
    struct closer c = {.w = &w};
    pthread_t a, b;
    assert_int_equal(pthread_create(&a, NULL, nr_close_leader, &c), 0);
    assert_int_equal(pthread_create(&b, NULL, nr_close_other, &c), 0);
    t_sleep_ms(300);
    struct allreduce sup;
    assert_int_equal(allreduce_init(&sup, w.mem[1], w.mem_len, ALLREDUCE_NO_RANK, err, sizeof err), 0);
    allreduce_close(&sup);
    pthread_join(a, NULL);
    pthread_join(b, NULL);
    allreduce_free(&sup);
    assert_int_equal(c.rc_leader, -EPIPE);
    assert_int_equal(c.rc_other, -EPIPE);
    nr_world_free(&w);
}

/* ---- the mesh ------------------------------------------------------------------------------ */

struct mn_node {
    struct mesh m;
    struct mesh_params p;
    char facts[512], endpoint[64];
    int rc;
    char err[4096];
    pthread_t th;
};

/* Node 0's notes ("node 1 joined from ...", "refused a node ..."). */
static pthread_mutex_t g_notes_mu = PTHREAD_MUTEX_INITIALIZER;
static char g_notes[16384];

static void keep_note(void *arg, const char *msg)
{
    (void)arg;
    pthread_mutex_lock(&g_notes_mu);
    size_t o = strlen(g_notes);
    snprintf(g_notes + o, sizeof g_notes - o, "%s\n", msg);
    pthread_mutex_unlock(&g_notes_mu);
}

static bool notes_have(const char *what)
{
    pthread_mutex_lock(&g_notes_mu);
    bool there = strstr(g_notes, what) != NULL;
    pthread_mutex_unlock(&g_notes_mu);
    return there;
}

/* Waits (20 s at most) for node 0 to note what. */
static void await_note(const char *what)
{
    double t0 = t_now();
    while (!notes_have(what)) {
        if (t_now() - t0 > 20)
            fail_msg("node 0 never noted '%s'; its notes:\n%s", what, g_notes);
        t_sleep_ms(10);
    }
}

static void *mesh_thread_fn(void *arg)
{
    struct mn_node *n = arg;
    n->rc = mesh_rendezvous(&n->m, &n->p, n->err, sizeof n->err);
    return NULL;
}

static double g_peer_timeout_s = 1.0;

/* Starts the rendezvous of one node (claimed rank, facts; "@host =
 * thread<i>", "@pid = 100+i") in a thread on master. */
static void mn_start(struct mn_node *x, int i, uint32_t rank, uint32_t k, const char *facts, const char *master,
                     double timeout_s, const uint8_t *blob)
{
    memset(x, 0, sizeof *x);
    snprintf(x->facts, sizeof x->facts, "%s@host = thread%d\n@pid = %d\n@endpoint = tcp://127.0.0.1:%d\n", facts, i,
             100 + i, 40000 + i);
    snprintf(x->endpoint, sizeof x->endpoint, "tcp://127.0.0.1:%d", 40000 + i);
    x->p = (struct mesh_params){.node = rank,
                                .nodes = k,
                                .master = master,
                                .timeout_s = timeout_s,
                                .facts = x->facts,
                                .host = "thread",
                                .endpoint = x->endpoint,
                                .name = "meshtest",
                                .blob = blob,
                                .cancel_fd = -1,
                                .hb_interval_s = 0.1,
                                .peer_timeout_s = g_peer_timeout_s,
                                .note = rank == 0 ? keep_note : NULL};
    if (rank == 0)
        g_notes[0] = '\0';
    assert_int_equal(pthread_create(&x->th, NULL, mesh_thread_fn, x), 0);
}

static void mn_join(struct mn_node *x)
{
    pthread_join(x->th, NULL);
}

/* Joins three nodes' rendezvous threads; every one must have met. */
static void mn_join_three_met(struct mn_node *nodes)
{
    for (int i = 0; i < 3; i++)
        mn_join(&nodes[i]);
    if (nodes[0].rc || nodes[1].rc || nodes[2].rc)
        fail_msg("%s; %s; %s", nodes[0].err, nodes[1].err, nodes[2].err);
}

/* Runs the rendezvous of n nodes (claimed ranks rank[i], facts facts[i])
 * in threads on master. */
static void mesh_meet(struct mn_node *nodes, int n, const uint32_t *rank, uint32_t k, const char *const *facts,
                      const char *master, double timeout_s, const uint8_t *blob)
{
    for (int i = 0; i < n; i++)
        mn_start(&nodes[i], i, rank[i], k, facts[i], master, timeout_s, blob);
    for (int i = 0; i < n; i++)
        mn_join(&nodes[i]);
}

/* The next event of a started mesh within timeout_s (false: none). */
static bool mesh_wait(struct mesh *m, struct mesh_event *ev, double timeout_s)
{
    double t0 = t_now();
    while (t_now() - t0 < timeout_s) {
        zmq_pollitem_t it = {.socket = mesh_pollable(m), .events = ZMQ_POLLIN};
        zmq_poll(&it, 1, 50);
        if (mesh_recv(m, ev) > 0)
            return true;
    }
    return false;
}

/* A launcher that only says HELLO (rank, facts) over a DEALER of its own
 * context and then answers nothing: a node that hangs, or (closed) one
 * killed after its HELLO. The header as mesh.h describes it. */
struct raw_node {
    void *ctx, *s;
};

static void raw_hello(struct raw_node *r, const char *master, uint32_t rank, const char *facts)
{
    r->ctx = zmq_ctx_new();
    r->s = zmq_socket(r->ctx, ZMQ_DEALER);
    int linger = 0;
    zmq_setsockopt(r->s, ZMQ_LINGER, &linger, sizeof linger);
    assert_int_equal(zmq_connect(r->s, master), 0);
    size_t len = strlen(facts);
    char *msg = malloc(24 + len);
    assert_non_null(msg);
    uint32_t magic = 0x4e4d4c53u, from = rank, about = rank;
    uint16_t version = 1, type = MESH_HELLO;
    uint64_t arg = 0;
    memcpy(msg, &magic, 4);
    memcpy(msg + 4, &version, 2);
    memcpy(msg + 6, &type, 2);
    memcpy(msg + 8, &from, 4);
    memcpy(msg + 12, &about, 4);
    memcpy(msg + 16, &arg, 8);
    memcpy(msg + 24, facts, len);
    assert_int_equal(zmq_send(r->s, msg, 24 + len, 0), (int)(24 + len));
    free(msg);
}

/* The text of the first REFUSE the raw node got within timeout_s ("" if
 * none), skipping WAITs. */
static void raw_refusal(struct raw_node *r, double timeout_s, char *out, size_t len)
{
    out[0] = '\0';
    double t0 = t_now();
    while (t_now() - t0 < timeout_s) {
        zmq_pollitem_t it = {.socket = r->s, .events = ZMQ_POLLIN};
        zmq_poll(&it, 1, 50);
        char buf[4096];
        int n;
        while ((n = zmq_recv(r->s, buf, sizeof buf - 1, ZMQ_DONTWAIT)) >= 24) {
            uint16_t type;
            memcpy(&type, buf + 6, 2);
            if (type == MESH_REFUSE) {
                buf[SL_MIN((size_t)n, sizeof buf - 1)] = '\0';
                snprintf(out, len, "%s", buf + 24);
                return;
            }
        }
    }
}

static void raw_close(struct raw_node *r)
{
    zmq_close(r->s);
    zmq_ctx_term(r->ctx); /* its TCP connection is closed when this returns */
}

static void test_mesh_meets_and_watches(void **state)
{
    (void)state;
    char master[64];
    snprintf(master, sizeof master, "tcp://127.0.0.1:%d", free_ports(1));
    uint8_t blob[MESH_BLOB_BYTES];
    for (int i = 0; i < MESH_BLOB_BYTES; i++)
        blob[i] = (uint8_t)(i * 37 + 11);
    static struct mn_node nodes[3];
    const uint32_t rank[3] = {0, 2, 1};
    const char *facts[3] = {"a = 1\nb = two\n", "b = two\na = 1\n", "a = 1\nb = two\n"};
    mesh_meet(nodes, 3, rank, 3, facts, master, 20, blob);
    for (int i = 0; i < 3; i++) {
        if (nodes[i].rc)
            fail_msg("node %u: %s", rank[i], nodes[i].err);
        assert_string_equal(nodes[i].m.name, "meshtest");
        assert_memory_equal(nodes[i].m.blob, blob, MESH_BLOB_BYTES); /* the NCCL-id seam */
        for (int j = 0; j < 3; j++) {
            char want[64];
            snprintf(want, sizeof want, "tcp://127.0.0.1:%d", 40000 + j);
            assert_string_equal(nodes[i].m.endpoints[rank[j]], want);
        }
    }
    char err[256];
    for (int i = 0; i < 3; i++)
        assert_int_equal(mesh_start(&nodes[i].m, err, sizeof err), 0);
    struct mesh *m0 = &nodes[0].m, *m2 = &nodes[1].m, *m1 = &nodes[2].m; /* by node rank */
    /* a late launcher (with the job's facts) is refused alone, and the run goes on */
    static struct mn_node late;
    mn_start(&late, 5, 1, 3, "a = 1\nb = two\n", master, 20, NULL);
    mn_join(&late);
    assert_int_equal(late.rc, -EINVAL);
    if (!strstr(late.err, "refused this node") || !strstr(late.err, "the run on this master has already started with all 3 nodes"))
        fail_msg("the late node: %s", late.err);
    mesh_free(&late.m);
    struct mesh_event ev;
    assert_true(mesh_wait(m0, &ev, 5)); /* node 0 hears of it, to print */
    assert_int_equal(ev.type, MESH_REFUSE);
    assert_string_equal(ev.data, "refused a node claiming node rank 1 from thread5 (pid 105): the run has already "
                                 "started with all 3 nodes");
    /* node 1's records reach 0 and 2 */
    assert_int_equal(mesh_send(m1, MESH_EPOCH, 7, "abc", 3), 0);
    assert_true(mesh_wait(m0, &ev, 5));
    assert_true(ev.type == MESH_EPOCH && ev.about == 1 && ev.arg == 7 && ev.len == 3 && !memcmp(ev.data, "abc", 3));
    assert_true(mesh_wait(m2, &ev, 5));
    assert_true(ev.type == MESH_EPOCH && ev.about == 1 && ev.arg == 7);
    /* node 0's END reaches both */
    double secs = 12.5;
    assert_int_equal(mesh_send(m0, MESH_END, 0, &secs, sizeof secs), 0);
    assert_true(mesh_wait(m1, &ev, 5) && ev.type == MESH_END && ev.about == 0 && ev.len == sizeof secs);
    assert_true(mesh_wait(m2, &ev, 5) && ev.type == MESH_END && ev.about == 0);
    /* node 2 goes silent: node 0 reports it lost, and tells node 1 */
    double t0 = t_now();
    mesh_free(m2);
    assert_true(mesh_wait(m0, &ev, 5));
    assert_true(ev.type == MESH_FAIL && ev.about == 2 && ev.lost);
    assert_non_null(strstr(ev.data, "node 2"));
    assert_true(t_now() - t0 < 3.0);
    assert_true(mesh_wait(m1, &ev, 5));
    assert_true(ev.type == MESH_FAIL && ev.about == 2 && ev.lost);
    /* a node's own FAIL */
    assert_int_equal(mesh_send(m1, MESH_FAIL, 0, "disk on fire", 12), 0);
    assert_true(mesh_wait(m0, &ev, 5) && ev.type == MESH_FAIL && ev.about == 1 && !ev.lost &&
                !strcmp(ev.data, "disk on fire"));
    mesh_free(m1);
    mesh_free(m0);
}

static void test_mesh_refusals(void **state)
{
    (void)state;
    static struct mn_node nodes[4];
    char master[64];
    const char *lr1 = "train.lr = 0.01\nmodel.hidden = 32\n", *lr2 = "train.lr = 0.02\nmodel.hidden = 32\n";
    /* no node is taken for silent here, however loaded the machine, but
     * where that is the point (the hung holder) */
    g_peer_timeout_s = 30;
    /* a launcher of another job (other facts) comes first: it alone is
     * refused, naming the key; node 0 notes it and goes on waiting, and the
     * job starts when its own node 1 comes */
    snprintf(master, sizeof master, "tcp://127.0.0.1:%d", free_ports(1));
    mn_start(&nodes[0], 0, 0, 2, lr1, master, 60, NULL);
    mn_start(&nodes[1], 1, 1, 2, lr2, master, 60, NULL);
    mn_join(&nodes[1]);
    assert_int_equal(nodes[1].rc, -EINVAL);
    if (!strstr(nodes[1].err, "refused this node") || !strstr(nodes[1].err, "train.lr = 0.02 there, 0.01 on node 0") ||
        !strstr(nodes[1].err, "node 1 (thread1, pid 101) does not match node 0"))
        fail_msg("the stray node: %s", nodes[1].err);
    await_note("refused a node claiming node rank 1 from thread1 (pid 101): train.lr = 0.02 there, 0.01 on node 0");
    mn_start(&nodes[2], 2, 1, 2, lr1, master, 60, NULL);
    mn_join(&nodes[2]);
    mn_join(&nodes[0]);
    if (nodes[0].rc || nodes[2].rc)
        fail_msg("node 0: %s; node 1: %s", nodes[0].err, nodes[2].err);
    assert_string_equal(nodes[2].m.endpoints[0], "tcp://127.0.0.1:40000");
    assert_string_equal(nodes[0].m.endpoints[1], "tcp://127.0.0.1:40002");
    assert_string_equal(nodes[0].m.hosts[1], "thread2");
    for (int i = 0; i < 3; i++)
        mesh_free(&nodes[i].m);
    /* the job's token: the facts' (not their order's, not the '@' lines') */
    assert_true(mesh_facts_token(lr1) == mesh_facts_token("model.hidden = 32\ntrain.lr = 0.01\n@host = x\n"));
    assert_true(mesh_facts_token(lr1) != mesh_facts_token(lr2));
    /* node rank 1 twice: the holder keeps it, the second claimant alone is
     * refused naming both; node 2 comes and the job starts */
    snprintf(master, sizeof master, "tcp://127.0.0.1:%d", free_ports(1));
    mn_start(&nodes[0], 0, 0, 3, "a = 1\n", master, 60, NULL);
    mn_start(&nodes[1], 1, 1, 3, "a = 1\n", master, 60, NULL);
    await_note("node 1 joined from thread1 (pid 101)");
    mn_start(&nodes[2], 2, 1, 3, "a = 1\n", master, 60, NULL);
    mn_join(&nodes[2]);
    assert_int_equal(nodes[2].rc, -EINVAL);
    if (!strstr(nodes[2].err, "node rank 1 was claimed twice: thread1 (pid 101) holds it, so this launcher on thread2 "
                              "(pid 102) is refused"))
        fail_msg("the second claimant: %s", nodes[2].err);
    await_note("refused a node claiming node rank 1 from thread2 (pid 102): node rank 1 is already held by thread1 "
               "(pid 101)");
    mn_start(&nodes[3], 3, 2, 3, "a = 1\n", master, 60, NULL);
    for (int i = 0; i < 4; i++)
        if (i != 2)
            mn_join(&nodes[i]);
    if (nodes[0].rc || nodes[1].rc || nodes[3].rc)
        fail_msg("%s; %s; %s", nodes[0].err, nodes[1].err, nodes[3].err);
    assert_string_equal(nodes[0].m.hosts[1], "thread1");
    assert_string_equal(nodes[3].m.endpoints[1], "tcp://127.0.0.1:40001");
    for (int i = 0; i < 4; i++)
        mesh_free(&nodes[i].m);
    /* a holder killed after its HELLO (its connection closed): a new
     * launcher takes its place */
    struct raw_node raw;
    char facts[256], got[4096];
    snprintf(master, sizeof master, "tcp://127.0.0.1:%d", free_ports(1));
    mn_start(&nodes[0], 0, 0, 3, "a = 1\n", master, 60, NULL);
    raw_hello(&raw, master, 1, "a = 1\n@host = dead\n@pid = 7\n@endpoint = tcp://127.0.0.1:39999\n");
    await_note("node 1 joined from dead (pid 7)");
    raw_close(&raw);
    mn_start(&nodes[1], 1, 1, 3, "a = 1\n", master, 60, NULL);
    await_note("node 1 joined from thread1 (pid 101)");
    mn_start(&nodes[2], 2, 2, 3, "a = 1\n", master, 60, NULL);
    mn_join_three_met(nodes);
    assert_string_equal(nodes[0].m.hosts[1], "thread1");
    assert_string_equal(nodes[2].m.endpoints[1], "tcp://127.0.0.1:40001");
    assert_true(notes_have("node 1 (dead"));
    for (int i = 0; i < 3; i++)
        mesh_free(&nodes[i].m);
    /* a holder still connected but silent for longer than the peer
     * timeout (1 s; its machine hangs): the newcomer takes its place, and
     * the old one hears why should it come back */
    snprintf(master, sizeof master, "tcp://127.0.0.1:%d", free_ports(1));
    g_peer_timeout_s = 1; /* node 0's */
    mn_start(&nodes[0], 0, 0, 3, "a = 1\n", master, 60, NULL);
    g_peer_timeout_s = 30;
    snprintf(facts, sizeof facts, "a = 1\n@host = hung\n@pid = 8\n@endpoint = tcp://127.0.0.1:39998\n");
    raw_hello(&raw, master, 1, facts);
    await_note("node 1 joined from hung (pid 8)");
    t_sleep_ms(2500); /* longer than node 0's peer timeout (1 s): only longer under load */
    mn_start(&nodes[1], 1, 1, 3, "a = 1\n", master, 60, NULL);
    await_note("node 1 joined from thread1 (pid 101)");
    mn_start(&nodes[2], 2, 2, 3, "a = 1\n", master, 60, NULL);
    mn_join_three_met(nodes);
    assert_true(notes_have("node 1 (hung, pid 8) left the rendezvous (it went silent); thread1 (pid 101) takes its place"));
    raw_refusal(&raw, 10, got, sizeof got);
    if (!strstr(got, "another launcher took its node rank"))
        fail_msg("the silent holder got '%s'", got);
    raw_close(&raw);
    for (int i = 0; i < 3; i++)
        mesh_free(&nodes[i].m);
    /* a node of the job with another configuration comes, is refused, and
     * node 0 times out: its message names the refusal as well as the
     * missing node */
    snprintf(master, sizeof master, "tcp://127.0.0.1:%d", free_ports(1));
    mn_start(&nodes[0], 0, 0, 2, lr1, master, 4, NULL);
    mn_start(&nodes[1], 1, 1, 2, lr2, master, 60, NULL);
    mn_join(&nodes[1]);
    mn_join(&nodes[0]);
    assert_int_equal(nodes[1].rc, -EINVAL);
    assert_int_equal(nodes[0].rc, -ETIMEDOUT);
    if (!strstr(nodes[0].err, "node 1 of 0..1 did not join") ||
        !strstr(nodes[0].err, "node 0 refused 1 launcher meanwhile: node rank 1 from thread1 (pid 101): train.lr = "
                              "0.02 there, 0.01 on node 0"))
        fail_msg("node 0: %s", nodes[0].err);
    for (int i = 0; i < 2; i++)
        mesh_free(&nodes[i].m);
    const uint32_t two[2] = {0, 1};
    const char *same[3] = {"a = 1\n", "a = 1\n", "a = 1\n"};
    g_peer_timeout_s = 1;
    /* node 2 never comes */
    snprintf(master, sizeof master, "tcp://127.0.0.1:%d", free_ports(1));
    double t0 = t_now();
    mesh_meet(nodes, 2, two, 3, same, master, 1.0, NULL);
    double dt = t_now() - t0;
    for (int i = 0; i < 2; i++) {
        if (nodes[i].rc != -ETIMEDOUT || !strstr(nodes[i].err, "node 2 of 0..2 did not join") ||
            !strstr(nodes[i].err, master))
            fail_msg("node %d: %s", i, nodes[i].err);
        mesh_free(&nodes[i].m);
    }
    assert_true(dt >= 0.9 && dt < 10);
    /* facts: '@' lines are not compared; a key missing on one side is named */
    char key[64], a[64], b[64];
    assert_int_equal(mesh_facts_diff("x = 1\n@host = a\n", "@host = b\nx = 1\n", key, 64, a, 64, b, 64), 0);
    assert_int_equal(mesh_facts_diff("x = 1\n", "x = 1\ny = 2\n", key, 64, a, 64, b, 64), 1);
    assert_string_equal(key, "y");
    assert_string_equal(a, "(none)");
    assert_string_equal(b, "2");
}

static void test_cluster_file(void **state)
{
    (void)state;
    char dir[1300], err[512];
    snprintf(dir, sizeof dir, "%s/clusterfile", t_ldir);
    assert_int_equal(mkdir(dir, 0700), 0);
    char eps[3][NETREDUCE_ENDPOINT_MAX] = {"tcp://10.0.0.1:29501", "tcp://10.0.0.2:29502", "tcp://10.0.0.3:29503"};
    struct trainer_cluster c = {.node = 2, .nodes = 3, .run = "somerun", .endpoints = eps}, d;
    for (int i = 0; i < TRAINER_UNIQUE_ID_BYTES; i++)
        c.unique_id[i] = (uint8_t)(255 - i);
    assert_int_equal(trainer_cluster_write(dir, &c, err, sizeof err), 0);
    assert_int_equal(trainer_cluster_read(dir, &d, err, sizeof err), 0);
    assert_int_equal(d.node, 2);
    assert_int_equal(d.nodes, 3);
    assert_string_equal(d.run, "somerun");
    for (int k = 0; k < 3; k++)
        assert_string_equal(d.endpoints[k], eps[k]);
    assert_memory_equal(d.unique_id, c.unique_id, TRAINER_UNIQUE_ID_BYTES);
    trainer_cluster_free(&d);
}

/* ---- gnnlaunch on several nodes -------------------------------------------------------------- */

static void write_config(const char *path, const char *ds, double lr)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fprintf(f,
            "[dataset]\npath = \"%s\"\n\n[model]\nkind = \"sage\"\nhidden = 32\nfanouts = [8, 4]\ndropout = 0.2\n\n"
            "[train]\nbatch_size = 64\nepochs = 3\nlr = %g\nseed = 5\n\n"
            "[pipeline]\nsamplers = 1\nextractors = 1\nfeature_buffer_mb = 8\nstaging_mb = 4\nio_depth = 16\n"
            "ordered = true\n",
            ds, lr);
    fclose(f);
}

/* Every line of a log that starts with prefix, cut at `cut` (when found),
 * joined with newlines into out. */
static void lines(const struct t_proc *r, const char *prefix, const char *cut, char *out, size_t len)
{
    static char buf[1 << 20];
    t_slurp(r->log, buf, sizeof buf);
    size_t o = 0;
    out[0] = '\0';
    for (char *save = NULL, *line = strtok_r(buf, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        if (strncmp(line, prefix, strlen(prefix)))
            continue;
        if (strstr(line, " batches/s ")) /* a plain progress line (an epoch over 10 s: ASan on a loaded machine) */
            continue;
        char *c = cut ? strstr(line, cut) : NULL;
        if (c)
            *c = '\0';
        o += (size_t)snprintf(out + o, len - o, "%s\n", line);
        if (o >= len)
            fail_msg("%s: too many lines", r->log);
    }
}

static double test_acc_of(const struct t_proc *r)
{
    char fin[512];
    lines(r, "test_acc=", NULL, fin, sizeof fin);
    double acc;
    if (sscanf(fin, "test_acc=%lf", &acc) != 1)
        fail_msg("no final line in %s", r->log);
    return acc;
}

/* Starts node i of k with the given extra arguments, its ranks on the
 * CPU or GPUs (device: "--cpu", "--gpus=N"). */
static void start_node_on(struct t_proc *r, const char *device, const char *stages_env, const char *const *env_extra,
                          int i, int k, int port, const char *const *extra)
{
    char nodes[16], rank[16], master[64];
    snprintf(nodes, sizeof nodes, "%d", k);
    snprintf(rank, sizeof rank, "%d", i);
    snprintf(master, sizeof master, "127.0.0.1:%d", port);
    const char *argv[40] = {device, "--nodes", nodes, "--node-rank", rank, "--master", master};
    int a = 7;
    for (int j = 0; extra && extra[j] && a < 39; j++)
        argv[a++] = extra[j];
    argv[a] = NULL;
    const char *env[8] = {stages_env};
    int e = 1;
    for (int j = 0; env_extra && env_extra[j] && e < 7; j++)
        env[e++] = env_extra[j];
    env[e] = NULL;
    t_launch_start(r, env, argv);
}

static void start_node(struct t_proc *r, const char *stages_env, const char *const *env_extra, int i, int k, int port,
                       const char *const *extra)
{
    start_node_on(r, "--cpu", stages_env, env_extra, i, k, port, extra);
}

static struct t_proc *g_live[4]; /* launchers a failing case must not leave behind */

/* t_expect_log over the whole log (a long run's epoch lines fill more
 * than t_expect_log reads). */
static void expect_log(const struct t_proc *r, const char *what)
{
    static char buf[1 << 22];
    t_slurp(r->log, buf, sizeof buf);
    if (!strstr(buf, what)) {
        size_t n = strlen(buf);
        fail_msg("%s: expected '%s' in gnnlaunch's output, which ends:\n%s", r->args, what,
                 buf + (n > 4000 ? n - 4000 : 0));
    }
}

static bool log_has(const struct t_proc *r, const char *what)
{
    static char buf[1 << 20];
    t_slurp(r->log, buf, sizeof buf);
    return strstr(buf, what) != NULL;
}

static void wait_node(struct t_proc *r, double timeout_s)
{
    t_launch_wait(r, timeout_s);
    for (int i = 0; i < 4; i++)
        if (g_live[i] == r)
            g_live[i] = NULL;
}

static int mn_teardown(void **state)
{
    for (int i = 0; i < 4; i++)
        if (g_live[i] && g_live[i]->pid > 0) {
            kill(g_live[i]->pid, SIGKILL);
            waitpid(g_live[i]->pid, NULL, 0);
            g_live[i] = NULL;
        }
    return t_launch_case_teardown(state);
}

/* Every byte of every tensor of two checkpoints. */
static void same_checkpoint(const char *a, const char *b)
{
    struct ckpt x, y;
    char err[512];
    if (ckpt_read(&x, a, err, sizeof err) != 0)
        fail_msg("%s", err);
    if (ckpt_read(&y, b, err, sizeof err) != 0)
        fail_msg("%s", err);
    assert_int_equal(ckpt_count(&x), ckpt_count(&y));
    for (uint32_t i = 0; i < ckpt_count(&x); i++) {
        const struct ckpt_entry *e = ckpt_entry_at(&x, i);
        uint32_t nd;
        uint64_t shape[CKPT_MAX_NDIM];
        const void *p = ckpt_find(&x, ckpt_name(&x, i), e->dtype, &nd, shape);
        const void *q = ckpt_find(&y, ckpt_name(&x, i), e->dtype, NULL, NULL);
        if (!p || !q)
            fail_msg("tensor %s missing", ckpt_name(&x, i));
        size_t bytes = ckpt_dtype_size(e->dtype);
        for (uint32_t d = 0; d < nd; d++)
            bytes *= shape[d];
        if (memcmp(p, q, bytes))
            fail_msg("tensor %s differs between %s and %s", ckpt_name(&x, i), a, b);
    }
    assert_string_equal(ckpt_meta(&x, "step"), ckpt_meta(&y, "step"));
    ckpt_free(&x);
    ckpt_free(&y);
}

/* K nodes of R ranks against one launcher of K*R ranks. */
static void nodes_equal_single(int k, int r)
{
    char ck1[1300], ckn[1300], set1[1400], setn[1400], ranks[48];
    snprintf(ck1, sizeof ck1, "%s/ck-single-%d-%d", t_ldir, k, r);
    snprintf(ckn, sizeof ckn, "%s/ck-nodes-%d-%d", t_ldir, k, r);
    snprintf(set1, sizeof set1, "train.checkpoint_dir=\"%s\"", ck1);
    snprintf(setn, sizeof setn, "train.checkpoint_dir=\"%s\"", ckn);
    /* one node with every rank */
    struct t_proc one;
    snprintf(ranks, sizeof ranks, "pipeline.ranks=%d", k * r);
    t_launch_run(&one, (const char *[]){g_real, NULL},
                 (const char *[]){"--cpu", g_cfg, "--set", set1, "--set", ranks, NULL}, 120);
    t_expect_code(&one, 0);
    t_expect_clean(&one);
    /* k nodes */
    snprintf(ranks, sizeof ranks, "pipeline.ranks=%d", r);
    int port = free_ports(k + 1);
    struct t_proc n[4];
    for (int i = 0; i < k; i++) {
        start_node(&n[i], g_real, NULL, i, k, port, (const char *[]){g_cfg, "--set", setn, "--set", ranks, NULL});
        g_live[i] = &n[i];
    }
    for (int i = 0; i < k; i++) {
        wait_node(&n[i], 120);
        t_expect_code(&n[i], 0);
    }
    for (int i = 0; i < k; i++)
        t_expect_clean(&n[i]);
    static char fin[4][512], ep[4][8192];
    lines(&one, "test_acc=", " seconds=", fin[3], sizeof fin[3]);
    lines(&one, "epoch ", " seconds=", ep[3], sizeof ep[3]);
    char whole[2][512];
    for (int i = 0; i < k; i++) {
        if (i < 2)
            lines(&n[i], "test_acc=", NULL, whole[i], sizeof whole[i]);
        lines(&n[i], "test_acc=", " seconds=", fin[i], sizeof fin[i]);
        lines(&n[i], "epoch ", " seconds=", ep[i], sizeof ep[i]);
        if (!fin[i][0] || strcmp(fin[i], fin[3]))
            fail_msg("K=%d R=%d: node %d ends with\n%sone launcher of %d ranks with\n%s", k, r, i, fin[i], k * r,
                     fin[3]);
        if (strcmp(ep[i], ep[3]))
            fail_msg("K=%d R=%d: node %d's epoch lines\n%sdiffer from one launcher's\n%s", k, r, i, ep[i], ep[3]);
    }
    if (strcmp(whole[0], whole[1])) /* the same final line on every node, seconds included */
        fail_msg("node 0 ends with %s, node 1 with %s", whole[0], whole[1]);
    /* the parameters, bit for bit: node 0 (global rank 0) wrote the checkpoints */
    for (int e = 1; e <= 3; e++) {
        char a[1400], b[1400];
        assert_int_equal(ckpt_path(a, sizeof a, ck1, (uint32_t)e), 0);
        assert_int_equal(ckpt_path(b, sizeof b, ckn, (uint32_t)e), 0);
        same_checkpoint(a, b);
    }
}

static void test_two_nodes_one_rank(void **state)
{
    (void)state;
    nodes_equal_single(2, 1);
}

static void test_two_nodes_two_ranks(void **state)
{
    (void)state;
    nodes_equal_single(2, 2);
}

static void test_missing_node(void **state)
{
    (void)state;
    int port = free_ports(3);
    char master[64];
    snprintf(master, sizeof master, "tcp://127.0.0.1:%d", port);
    struct t_proc n0, n1;
    /* node 0 of 2 alone */
    start_node(&n0, g_real, NULL, 0, 2, port, (const char *[]){g_cfg, "--rendezvous-timeout", "3", NULL});
    g_live[0] = &n0;
    wait_node(&n0, 30);
    t_expect_code(&n0, 2);
    t_expect_log(&n0, "node 1 of 0..1 did not join");
    t_expect_log(&n0, master);
    t_expect_log(&n0, "timed out after 3 s");
    assert_true(n0.t_end - n0.t0 >= 2.9 && n0.t_end - n0.t0 < 15);
    t_expect_clean(&n0);
    /* node 1 of 3 with node 0 up and node 2 missing: node 0's verdict, on both.
     * Node 1 first, already connecting when node 0 binds: started side by
     * side, node 1's start-up on a loaded machine once took longer than
     * node 0's 3 s and node 0 reported nodes 1 and 2 missing */
    start_node(&n1, g_real, NULL, 1, 3, port, (const char *[]){g_cfg, "--rendezvous-timeout", "60", NULL});
    g_live[1] = &n1;
    while (!log_has(&n1, "joining node 0 at") && t_now() - n1.t0 < 30)
        t_sleep_ms(20);
    start_node(&n0, g_real, NULL, 0, 3, port, (const char *[]){g_cfg, "--rendezvous-timeout", "3", NULL});
    g_live[0] = &n0;
    wait_node(&n0, 30);
    wait_node(&n1, 30);
    t_expect_code(&n0, 2);
    t_expect_code(&n1, 2);
    t_expect_log(&n0, "node 2 of 0..2 did not join");
    t_expect_log(&n1, "node 2 of 0..2 did not join");
    t_expect_clean(&n0);
    t_expect_clean(&n1);
    /* node 0 interrupted while it waits: a message and a clean exit (a
     * library thread that did not block SIGINT once took it with the
     * default action: the launcher died silently) */
    start_node(&n0, g_real, NULL, 0, 2, port, (const char *[]){g_cfg, "--rendezvous-timeout", "30", NULL});
    g_live[0] = &n0;
    while (!log_has(&n0, "waiting on") && t_now() - n0.t0 < 20)
        t_sleep_ms(50);
    kill(n0.pid, SIGINT);
    wait_node(&n0, 30);
    t_expect_log(&n0, "interrupted during the rendezvous");
    t_expect_clean(&n0);
    /* node 1 of 3 joins, is killed, and starts again: node 0 lets the new
     * one take its place (it once refused everyone: "claimed twice") */
    start_node(&n0, g_real, NULL, 0, 3, port, (const char *[]){g_cfg, "--rendezvous-timeout", "6", NULL});
    g_live[0] = &n0;
    start_node(&n1, g_real, NULL, 1, 3, port, (const char *[]){g_cfg, "--rendezvous-timeout", "6", NULL});
    g_live[1] = &n1;
    while (!log_has(&n0, "node 1 joined") && t_now() - n0.t0 < 20)
        t_sleep_ms(50);
    kill(n1.pid, SIGKILL);
    wait_node(&n1, 30);
    start_node(&n1, g_real, NULL, 1, 3, port, (const char *[]){g_cfg, "--rendezvous-timeout", "6", NULL});
    g_live[1] = &n1;
    wait_node(&n0, 30);
    wait_node(&n1, 30);
    t_expect_no_log(&n0, "claimed twice");
    t_expect_log(&n0, "node 1 (");
    t_expect_log(&n0, "left the rendezvous (its connection closed)");
    t_expect_log(&n0, "node 2 of 0..2 did not join");
    t_expect_log(&n1, "node 2 of 0..2 did not join");
    t_expect_clean(&n0);
    t_expect_clean(&n1);
    /* node 1 with no node 0 at all */
    start_node(&n1, g_real, NULL, 1, 2, port, (const char *[]){g_cfg, "--rendezvous-timeout", "2", NULL});
    g_live[1] = &n1;
    wait_node(&n1, 30);
    t_expect_code(&n1, 2);
    t_expect_log(&n1, "no answer from node 0");
    t_expect_log(&n1, master);
    t_expect_clean(&n1);
}

static void test_mismatch_and_duplicates(void **state)
{
    (void)state;
    int port = free_ports(5);
    struct t_proc n[4];
    /* a launcher of another job (another learning rate) on node 0's
     * master: it alone is refused (exit 2, naming the key), node 0 notes it
     * and waits on, and the job runs when its node 1 comes */
    start_node(&n[0], g_real, NULL, 0, 2, port, (const char *[]){g_cfg, "--rendezvous-timeout", "120", NULL});
    g_live[0] = &n[0];
    while (!log_has(&n[0], "waiting on") && t_now() - n[0].t0 < 30)
        t_sleep_ms(50);
    start_node(&n[1], g_real, NULL, 1, 2, port, (const char *[]){g_cfg, "--set", "train.lr=0.02", NULL});
    g_live[1] = &n[1];
    wait_node(&n[1], 30);
    t_expect_code(&n[1], 2);
    t_expect_log(&n[1], "refused this node (the job goes on without it)");
    t_expect_log(&n[1], "train.lr = 0.02 there, 0.01 on node 0");
    t_expect_clean(&n[1]);
    while (!log_has(&n[0], "refused a node claiming node rank 1 from ") && t_now() - n[0].t0 < 30)
        t_sleep_ms(50);
    start_node(&n[1], g_real, NULL, 1, 2, port, (const char *[]){g_cfg, NULL});
    g_live[1] = &n[1];
    for (int i = 0; i < 2; i++) {
        wait_node(&n[i], 120);
        t_expect_code(&n[i], 0);
        t_expect_clean(&n[i]);
    }
    expect_log(&n[0], "train.lr = 0.02 there, 0.01 on node 0");
    expect_log(&n[0], "all 2 nodes joined");
    /* node rank 1 twice: the first keeps it, the second alone is refused
     * naming both; then a node 2 with another configuration is refused, and
     * node 0's timeout names both refusals beside the missing node */
    start_node(&n[0], g_real, NULL, 0, 3, port, (const char *[]){g_cfg, "--rendezvous-timeout", "8", NULL});
    g_live[0] = &n[0];
    while (!log_has(&n[0], "waiting on") && t_now() - n[0].t0 < 30)
        t_sleep_ms(50);
    start_node(&n[1], g_real, NULL, 1, 3, port, (const char *[]){g_cfg, "--rendezvous-timeout", "8", NULL});
    g_live[1] = &n[1];
    while (!log_has(&n[0], "node 1 joined") && t_now() - n[0].t0 < 30)
        t_sleep_ms(50);
    start_node(&n[2], g_real, NULL, 1, 3, port, (const char *[]){g_cfg, NULL});
    g_live[2] = &n[2];
    start_node(&n[3], g_real, NULL, 2, 3, port, (const char *[]){g_cfg, "--set", "train.epochs=9", NULL});
    g_live[3] = &n[3];
    for (int i = 3; i >= 0; i--) {
        wait_node(&n[i], 60);
        t_expect_code(&n[i], 2);
        t_expect_clean(&n[i]);
    }
    t_expect_log(&n[2], "node rank 1 was claimed twice");
    t_expect_log(&n[3], "train.epochs = 9 there");
    for (int i = 0; i < 2; i++)
        t_expect_log(&n[i], "node 2 of 0..2 did not join");
    t_expect_log(&n[0], "node 0 refused 2 launchers meanwhile");
    t_expect_log(&n[0], "node rank 1 is already held by");
    t_expect_log(&n[1], "train.epochs = 9 there");
    /* flags */
    struct t_proc r;
    t_launch_run(&r, (const char *[]){g_real, NULL}, (const char *[]){"--cpu", g_cfg, "--nodes", "2", "--node-rank", "0", NULL},
                 30);
    t_expect_code(&r, 2);
    t_expect_log(&r, "--nodes 2 needs --master HOST:PORT");
    t_launch_run(&r, (const char *[]){g_real, NULL},
                 (const char *[]){"--cpu", g_cfg, "--nodes", "2", "--node-rank", "2", "--master", "127.0.0.1:9", NULL},
                 30);
    t_expect_code(&r, 2);
    t_expect_log(&r, "--node-rank I with 0 <= I < 2");
    t_launch_run(&r, (const char *[]){g_real, NULL},
                 (const char *[]){"--cpu", g_cfg, "--nodes", "2", "--node-rank", "1", "--master", "127.0.0.1", NULL},
                 30);
    t_expect_code(&r, 2);
    t_expect_log(&r, "--master needs HOST:PORT");
}

/* The run id of a launcher, from its "run ID: ... started" line. */
static void run_id_of(const struct t_proc *r, char *out, size_t len)
{
    char l[8192];
    lines(r, "gnnlaunch: run ", NULL, l, sizeof l);
    for (char *save = NULL, *line = strtok_r(l, "\n", &save); line; line = strtok_r(NULL, "\n", &save))
        if (strstr(line, " stages started"))
            snprintf(out, len, "%.*s", (int)strcspn(line + 15, ":"), line + 15);
}

/* Waits until a node's log shows an epoch line. */
static void wait_epochs(const struct t_proc *r)
{
    double t0 = t_now();
    char l[1 << 14];
    for (;;) {
        lines(r, "epoch 2/", NULL, l, sizeof l);
        if (l[0])
            return;
        if (t_now() - t0 > 60 || waitpid(r->pid, NULL, WNOHANG) != 0)
            fail_msg("no epoch line from %s", r->log);
        t_sleep_ms(20);
    }
}

static void test_node_killed(void **state)
{
    (void)state;
    int port = free_ports(3);
    char ck[1300], set[1400];
    snprintf(ck, sizeof ck, "%s/ck-kill", t_ldir);
    snprintf(set, sizeof set, "train.checkpoint_dir=\"%s\"", ck);
    struct t_proc n0, n1;
    const char *args[] = {g_cfg, "--set", set, "--epochs", "5000", NULL};
    start_node(&n0, g_real, NULL, 0, 2, port, args);
    g_live[0] = &n0;
    start_node(&n1, g_real, NULL, 1, 2, port, args);
    g_live[1] = &n1;
    wait_epochs(&n1);
    char id1[SHM_RUN_ID_MAX] = "";
    run_id_of(&n1, id1, sizeof id1);
    assert_true(id1[0]);
    kill(n1.pid, SIGKILL); /* the launcher only: its stages follow (PDEATHSIG) */
    double t_kill = t_now();
    wait_node(&n1, 10);
    wait_node(&n0, 30);
    t_expect_code(&n0, 3);
    expect_log(&n0, "node 1 (");
    expect_log(&n0, "lost: nothing from node 1");
    double dt = n0.t_end - t_kill;
    if (dt > 12)
        fail_msg("node 0 took %.1f s to notice node 1's death", dt);
    /* what the killed launcher left, as the next gnnlaunch would reclaim it */
    char err[256];
    shm_run_reclaim(id1, NULL, NULL, err, sizeof err);
    rundir_reclaim(t_base);
    t_expect_clean(&n0);
    t_expect_clean(&n1);
}

/* Ctrl-C on node 1: 130 there, 3 on node 0 naming node 1. While both run,
 * their cluster.toml files carry node 0's unique id. */
static void test_node_interrupted(void **state)
{
    (void)state;
    int port = free_ports(4);
    char ck[1300], set[1400];
    snprintf(ck, sizeof ck, "%s/ck-int", t_ldir);
    snprintf(set, sizeof set, "train.checkpoint_dir=\"%s\"", ck);
    struct t_proc n0, n1;
    start_node(&n0, g_real, NULL, 0, 2, port,
               (const char *[]){g_cfg, "--set", set, "--epochs", "5000", "--run-name", "mnint", NULL});
    g_live[0] = &n0;
    start_node(&n1, g_real, NULL, 1, 2, port, (const char *[]){g_cfg, "--set", set, "--epochs", "5000", NULL});
    g_live[1] = &n1;
    wait_epochs(&n1);
    struct trainer_cluster c[2];
    char err[512];
    for (int i = 0; i < 2; i++) {
        char dir[1400];
        snprintf(dir, sizeof dir, "%s/mnint-n%d", t_base, i);
        if (trainer_cluster_read(dir, &c[i], err, sizeof err) != 0)
            fail_msg("%s", err);
        assert_int_equal(c[i].node, (uint32_t)i);
        assert_int_equal(c[i].nodes, 2);
        assert_string_equal(c[i].run, "mnint");
    }
    assert_memory_equal(c[0].unique_id, c[1].unique_id, TRAINER_UNIQUE_ID_BYTES);
    for (int k = 0; k < 2; k++)
        assert_string_equal(c[0].endpoints[k], c[1].endpoints[k]);
    trainer_cluster_free(&c[0]);
    trainer_cluster_free(&c[1]);
    /* a launcher that knocks while the run goes: refused alone (exit 2),
     * and node 0 says so and runs on */
    struct t_proc late;
    start_node(&late, g_real, NULL, 2, 3, port, (const char *[]){g_cfg, NULL});
    g_live[2] = &late;
    wait_node(&late, 30);
    t_expect_code(&late, 2);
    t_expect_log(&late, "refused this node (the job goes on without it): the run on this master has already started "
                        "with all 2 nodes");
    /* (what it left is checked with the others' at the end) */
    while (!log_has(&n0, "refused a node claiming node rank 2 from ") && t_now() - late.t_end < 20)
        t_sleep_ms(50);
    expect_log(&n0, "the run has already started with all 2 nodes");
    kill(-n1.pid, SIGINT); /* its process group, as a terminal sends it */
    double t0 = t_now();
    wait_node(&n1, 30);
    wait_node(&n0, 30);
    t_expect_code(&n1, 130);
    t_expect_code(&n0, 3);
    expect_log(&n0, "node 1 (");
    expect_log(&n0, "interrupted by SIGINT");
    assert_true(n0.t_end - t0 < 10);
    t_expect_clean(&n0);
    t_expect_clean(&n1);
}

/* A stage fails on node 1 (test stages): both nodes exit 3, node 0 naming
 * node 1 and the stage. */
static void test_remote_stage_fails(void **state)
{
    (void)state;
    int port = free_ports(3);
    char stages[1300];
    snprintf(stages, sizeof stages, "SLUICE_STAGE_DIR=%s", t_stages);
    struct t_proc n0, n1;
    start_node(&n0, stages, (const char *[]){"SLUICE_TEST_DELAY_US=3000", NULL}, 0, 2, port,
               (const char *[]){g_cfg, NULL});
    g_live[0] = &n0;
    start_node(&n1, stages, (const char *[]){"SLUICE_TEST_DELAY_US=3000", "SLUICE_TEST_FAIL=trainer:0:exit3:30", NULL},
               1, 2, port, (const char *[]){g_cfg, NULL});
    g_live[1] = &n1;
    wait_node(&n1, 60);
    wait_node(&n0, 60);
    t_expect_code(&n1, 3);
    t_expect_code(&n0, 3);
    t_expect_log(&n0, "node 1 (");
    t_expect_log(&n0, "gnn-trainer rank 0");
    t_expect_log(&n0, "exited with status 3");
    assert_true(n0.t_end - n1.t_end < 5);
    t_expect_clean(&n0);
    t_expect_clean(&n1);
}

/* ---- GPU ranks on several nodes ------------------------------------------------------------- */

/* One field ("nccl_id", "device") of a test stage's report on a node. */
static void node_report(const struct t_proc *r, const char *stage, int rank, int node, const char *key, char *out,
                        size_t len)
{
    char path[1400], buf[2048], want[64];
    snprintf(path, sizeof path, "%s/%s.%d.n%d", r->report, stage, rank, node);
    t_slurp(path, buf, sizeof buf);
    snprintf(want, sizeof want, " %s=", key);
    const char *v = strstr(buf, want);
    if (!v)
        fail_msg("%s: no %s in '%s'", path, key, buf);
    v += strlen(want);
    snprintf(out, len, "%.*s", (int)strcspn(v, " \n"), v);
}

/* Two nodes of two (made-up) GPUs each, test stages: node 0 makes the
 * NCCL unique id (in its helper, when built with NCCL) and it travels in
 * the rendezvous; every trainer of every node gets node 0's id byte for
 * byte, on its command line and in its cluster.toml, and every stage of
 * local rank r runs on device r. Node 0's helper is gone after the run.
 * A node on the CPU beside GPU nodes is refused, and node 0's timeout
 * names it. */
static void test_gpu_nodes(void **state)
{
    (void)state;
    int port = free_ports(3);
    char stages[1300];
    snprintf(stages, sizeof stages, "SLUICE_STAGE_DIR=%s", t_stages);
    const char *env[] = {"SLUICE_FAKE_GPUS=2", "SLUICE_TEST_ITEMS=300", NULL};
    struct t_proc n[2];
    for (int i = 0; i < 2; i++) {
        start_node_on(&n[i], "--gpus=2", stages, env, i, 2, port, (const char *[]){g_cfg, NULL});
        g_live[i] = &n[i];
    }
    for (int i = 0; i < 2; i++) {
        wait_node(&n[i], 60);
        t_expect_code(&n[i], 0);
    }
    t_expect_log(&n[0], "gnnlaunch: --gpus 2: rank 0 on GPU 0 (fake GPU 0), rank 1 on GPU 1 (fake GPU 1)");
    t_expect_log(&n[1], "gnnlaunch: --gpus 2: rank 0 on GPU 0 (fake GPU 0), rank 1 on GPU 1 (fake GPU 1)");
    t_expect_no_log(&n[1], "NCCL unique id made"); /* only node 0 makes one */
    char first[300] = "", v[300];
    for (int node = 0; node < 2; node++)
        for (int rank = 0; rank < 2; rank++) {
            for (int s = 0; s < RUN_STAGES; s++) {
                node_report(&n[node], run_stage_name((enum run_stage)s), rank, node, "device", v, sizeof v);
                if (atoi(v) != rank)
                    fail_msg("node %d: %s rank %d ran with --device=%s", node, run_stage_name((enum run_stage)s), rank,
                             v);
            }
            char id[300], cid[300];
            node_report(&n[node], "trainer", rank, node, "nccl_id", id, sizeof id);
            node_report(&n[node], "trainer", rank, node, "cluster_id", cid, sizeof cid);
            assert_int_equal(strlen(id), 2 * RUN_NCCL_ID_BYTES);
            if (strcmp(id, cid))
                fail_msg("node %d rank %d: --nccl-id=%s but cluster.toml's unique_id = %s", node, rank, id, cid);
            if (!first[0])
                snprintf(first, sizeof first, "%s", id);
            else if (strcmp(id, first))
                fail_msg("node %d rank %d has NCCL id %s, node 0 rank 0 %s", node, rank, id, first);
            node_report(&n[node], "sampler", rank, node, "nccl_id", v, sizeof v);
            assert_string_equal(v, "none");
        }
    char made[64];
    snprintf(made, sizeof made, "gnnlaunch: NCCL unique id %.16s... made for 4 GPUs", first);
    t_expect_log(&n[0], made); /* the one node 0 made, not some other blob */
    char log[1 << 14];
    t_slurp(n[0].log, log, sizeof log);
    const char *h = strstr(log, "lives in helper pid ");
    if (SLUICE_HAVE_NCCL && !h)
        fail_msg("node 0 of a build with NCCL made no helper:\n%s", log);
    if (h) { /* node 0 reaped its helper before it exited */
        pid_t helper = (pid_t)atol(h + strlen("lives in helper pid "));
        assert_true(helper > 0);
        errno = 0;
        assert_int_equal(kill(helper, 0), -1);
        assert_int_equal(errno, ESRCH);
    }
    for (int i = 0; i < 2; i++)
        t_expect_clean(&n[i]);

    /* --gpus on node 0, --cpu on node 1 (with as many ranks): node 1 is
     * refused, and node 0's timeout names it */
    start_node_on(&n[0], "--gpus=2", stages, env, 0, 2, port,
                  (const char *[]){g_cfg, "--rendezvous-timeout", "8", NULL});
    g_live[0] = &n[0];
    start_node_on(&n[1], "--cpu", stages, env, 1, 2, port, (const char *[]){g_cfg, "--set", "pipeline.ranks=2", NULL});
    g_live[1] = &n[1];
    for (int i = 1; i >= 0; i--) {
        wait_node(&n[i], 60);
        t_expect_code(&n[i], 2);
        t_expect_log(&n[i], "ranks compute on = --cpu there, --gpus 2 on node 0");
        t_expect_clean(&n[i]);
    }
}

/* ---- ranks on one node ---------------------------------------------------------------------- */

static void test_ranks_accuracy(void **state)
{
    (void)state;
    double acc[3];
    static const int ranks[3] = {1, 2, 4};
    for (int i = 0; i < 3; i++) {
        char ck[1300], set[1400], rk[48];
        snprintf(ck, sizeof ck, "%s/ck-acc%d", t_ldir, ranks[i]);
        snprintf(set, sizeof set, "train.checkpoint_dir=\"%s\"", ck);
        snprintf(rk, sizeof rk, "pipeline.ranks=%d", ranks[i]);
        struct t_proc r;
        t_launch_run(&r, (const char *[]){g_real, NULL},
                     (const char *[]){"--cpu", g_acc_cfg, "--set", set, "--set", rk, "--epochs", "15", NULL}, 120);
        t_expect_code(&r, 0);
        t_expect_clean(&r);
        acc[i] = test_acc_of(&r);
        if (acc[i] < 0.8) /* 4 classes: chance is 0.25 */
            fail_msg("%d ranks reached only test_acc=%.4f", ranks[i], acc[i]);
    }
    for (int i = 1; i < 3; i++)
        if (fabs(acc[i] - acc[0]) > 0.01)
            fail_msg("%d ranks: test_acc=%.4f, one rank %.4f: more than one point apart", ranks[i], acc[i], acc[0]);
}

static int group_setup(void **state)
{
    (void)state;
    if (t_launch_setup("multinode") != 0)
        return -1;
    snprintf(g_ds, sizeof g_ds, "%s/ds", t_ldir);
    snprintf(g_acc_ds, sizeof g_acc_ds, "%s/ds-acc", t_ldir);
    snprintf(g_cfg, sizeof g_cfg, "%s/run.toml", t_ldir);
    snprintf(g_acc_cfg, sizeof g_acc_cfg, "%s/acc.toml", t_ldir);
    t_real_stages(g_real, sizeof g_real);
    char prep[1200], out[4096];
    t_bin(prep, sizeof prep, "gnnprep");
    if (t_run(out, sizeof out,
              "%s synth %s --nodes 4000 --avg-degree 8 --feat-dim 16 --classes 4 --homophily 0.9 "
              "--feature-noise 1.0 --train-frac 0.4 --val-frac 0.2 --test-frac 0.2 --seed 11",
              prep, g_ds) != 0 ||
        t_run(out, sizeof out,
              "%s synth %s --nodes 6000 --avg-degree 8 --feat-dim 16 --classes 4 --homophily 0.9 "
              "--feature-noise 0.8 --train-frac 0.4 --val-frac 0.1 --test-frac 0.5 --seed 11",
              prep, g_acc_ds) != 0) {
        fprintf(stderr, "gnnprep synth failed: %s\n", out);
        return -1;
    }
    write_config(g_cfg, g_ds, 0.01);
    write_config(g_acc_cfg, g_acc_ds, 0.01);
    return 0;
}

int main(void)
{
    signal(SIGALRM, t_launch_alarm);
    t_case_alarm_s = CASE_ALARM_S;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_netreduce_exact, t_launch_case_setup, mn_teardown),
        cmocka_unit_test_setup_teardown(test_netreduce_waits_end, t_launch_case_setup, mn_teardown),
        cmocka_unit_test_setup_teardown(test_mesh_meets_and_watches, t_launch_case_setup, mn_teardown),
        cmocka_unit_test_setup_teardown(test_mesh_refusals, t_launch_case_setup, mn_teardown),
        cmocka_unit_test_setup_teardown(test_cluster_file, t_launch_case_setup, mn_teardown),
        cmocka_unit_test_setup_teardown(test_two_nodes_one_rank, t_launch_case_setup, mn_teardown),
        cmocka_unit_test_setup_teardown(test_two_nodes_two_ranks, t_launch_case_setup, mn_teardown),
        cmocka_unit_test_setup_teardown(test_missing_node, t_launch_case_setup, mn_teardown),
        cmocka_unit_test_setup_teardown(test_mismatch_and_duplicates, t_launch_case_setup, mn_teardown),
        cmocka_unit_test_setup_teardown(test_node_killed, t_launch_case_setup, mn_teardown),
        cmocka_unit_test_setup_teardown(test_node_interrupted, t_launch_case_setup, mn_teardown),
        cmocka_unit_test_setup_teardown(test_remote_stage_fails, t_launch_case_setup, mn_teardown),
        cmocka_unit_test_setup_teardown(test_gpu_nodes, t_launch_case_setup, mn_teardown),
        cmocka_unit_test_setup_teardown(test_ranks_accuracy, t_launch_case_setup, mn_teardown),
    };
    return cmocka_run_group_tests(tests, group_setup, t_launch_group_teardown);
}
