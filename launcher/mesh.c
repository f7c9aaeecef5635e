/* mesh.c - the launchers' rendezvous and watch over ZeroMQ TCP (protocol
 * and API in mesh.h). One file of ~1000 lines because the rendezvous and the
 * watch share one socket, its wire format and the thread hand-over below;
 * split, each half would need the other's internals.
 *
 * Threads. mesh_rendezvous runs on the caller's thread and owns the TCP
 * socket until mesh_start hands it to the mesh thread (pthread_create is
 * the full barrier ZeroMQ asks for when a socket changes threads). From
 * then on the TCP socket and pipe_thread are the mesh thread's alone, and
 * pipe_main the main thread's; the thread writes nothing the main thread
 * reads except through the pipe. mesh_free sends QUIT through the pipe and
 * joins the thread before closing anything.
 *
 * Mesh thread loop: zmq_poll on the TCP socket and the pipe, waking at
 * least every hb_interval_s to send heartbeats and look for silent peers.
 *   - from the pipe: QUIT ends the loop; anything else goes out (node 0:
 *     to every node; node I: to node 0), stamped with this node's rank;
 *   - from the network: every message refreshes its sender's clock; EPOCH,
 *     FAIL and END go to the pipe and, on node 0, on to every other node;
 *     a HELLO after the rendezvous is refused (a late or duplicate node);
 *   - a watched peer silent for peer_timeout_s becomes a FAIL (lost) for
 *     the main thread and, on node 0, for the other nodes.
 * Sends on the network never block (ZMQ_DONTWAIT; node 0's ROUTER is
 * ZMQ_ROUTER_MANDATORY, so a vanished peer is an error, not a stall); a
 * message that cannot go is dropped, and the silence rule reports the
 * peer. */
#include "launcher/mesh.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>
#include <zmq.h>

#include "core/util.h"

#define MESH_MAGIC 0x4e4d4c53u /* "SLMN" little endian */
#define MESH_VERSION 1u
#define MESH_LINGER_MS 1000
#define MESH_BURST 64 /* messages read per wake-up at most (the rest at the next) */
#define MESH_MSG_MAX ((int64_t)4 << 20) /* bytes of one frame at most: facts are kilobytes, EPOCH ranks x a record */
#define MESH_GRACE_S 10.0 /* a node waits this much longer than node 0 */

/* REFUSE's arg: this node alone is refused (the others go on), or the
 * rendezvous ended for everyone */
enum { REFUSE_NODE = 1, REFUSE_TIMEOUT = 2, REFUSE_ABORT = 3 };

struct mesh_wire {
    uint32_t magic;
    uint16_t version;
    uint16_t type;
    uint32_t from;
    uint32_t about;
    uint64_t arg;
};
_Static_assert(sizeof(struct mesh_wire) == 24, "mesh header is 24 bytes");

static int zerr(void)
{
    int e = zmq_errno();
    return e > 0 ? -e : -EIO;
}

static void note(const struct mesh_params *p, const char *fmt, ...) SL_PRINTF(2, 3);
static void note(const struct mesh_params *p, const char *fmt, ...)
{
    if (!p->note)
        return;
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    p->note(p->note_arg, msg);
}

/* ---- messages -------------------------------------------------------------------------- */

/* Sends one message (after a routing-id frame when rid). Never blocks. */
static int wire_send(void *s, const uint8_t *rid, size_t rid_len, uint16_t type, uint32_t from, uint32_t about,
                     uint64_t arg, const void *payload, size_t len)
{
    struct mesh_wire w = {.magic = MESH_MAGIC, .version = MESH_VERSION, .type = type, .from = from, .about = about,
                          .arg = arg};
    zmq_msg_t m;
    if (zmq_msg_init_size(&m, sizeof w + len) != 0)
        return zerr();
    memcpy(zmq_msg_data(&m), &w, sizeof w);
    if (len)
        memcpy((char *)zmq_msg_data(&m) + sizeof w, payload, len);
    if (rid && zmq_send(s, rid, rid_len, ZMQ_SNDMORE | ZMQ_DONTWAIT) < 0) {
        zmq_msg_close(&m);
        return zerr();
    }
    if (zmq_msg_send(&m, s, ZMQ_DONTWAIT) < 0) {
        int rc = zerr();
        zmq_msg_close(&m);
        return rc;
    }
    return 0;
}

static int wire_text(void *s, const uint8_t *rid, size_t rid_len, uint16_t type, uint32_t from, uint64_t arg,
                     const char *text)
{
    return wire_send(s, rid, rid_len, type, from, from, arg, text, strlen(text));
}

/* One received message. */
struct msg {
    uint8_t rid[256];
    size_t rid_len;
    struct mesh_wire w;
    char *data; /* payload, NUL-terminated (malloc'd) */
    size_t len;
};

static void msg_free(struct msg *m)
{
    free(m->data);
    m->data = NULL;
}

/* Receives one message without blocking: 1, 0 (none), -EPROTO (not ours:
 * its frames are dropped), or -errno. */
static int wire_recv(void *s, bool router, struct msg *out)
{
    memset(out, 0, sizeof *out);
    zmq_msg_t f;
    int more = 1, frame = 0, rc = 1;
    size_t more_len = sizeof more;
    while (more) {
        zmq_msg_init(&f);
        if (zmq_msg_recv(&f, s, frame ? 0 : ZMQ_DONTWAIT) < 0) {
            int e = zmq_errno();
            zmq_msg_close(&f);
            if (frame == 0 && (e == EAGAIN || e == EINTR))
                return 0;
            msg_free(out);
            return -e;
        }
        size_t n = zmq_msg_size(&f);
        const void *d = zmq_msg_data(&f);
        if (router && frame == 0) {
            out->rid_len = SL_MIN(n, sizeof out->rid);
            memcpy(out->rid, d, out->rid_len);
        } else if (frame == (router ? 1 : 0)) {
            if (n < sizeof out->w) {
                rc = -EPROTO;
            } else {
                memcpy(&out->w, d, sizeof out->w);
                out->len = n - sizeof out->w;
                out->data = malloc(out->len + 1);
                if (!out->data) {
                    rc = -ENOMEM;
                } else {
                    memcpy(out->data, (const char *)d + sizeof out->w, out->len);
                    out->data[out->len] = '\0';
                }
            }
        } else {
            rc = -EPROTO; /* extra frames */
        }
        zmq_getsockopt(s, ZMQ_RCVMORE, &more, &more_len);
        zmq_msg_close(&f);
        frame++;
    }
    if (rc == 1 && (frame != (router ? 2 : 1) || out->w.magic != MESH_MAGIC))
        rc = -EPROTO;
    if (rc == 1 && out->w.version != MESH_VERSION)
        rc = -EPROTONOSUPPORT;
    if (rc != 1)
        msg_free(out);
    return rc;
}

/* ---- facts ----------------------------------------------------------------------------- */

/* The next "key = value" line of *p at or after it (skipping '@' lines
 * and blanks): key and value as (pointer, length); false at the end. */
static bool next_fact(const char **p, const char **k, size_t *kl, const char **v, size_t *vl)
{
    while (**p) {
        const char *line = *p, *end = strchr(line, '\n');
        if (!end)
            end = line + strlen(line);
        *p = *end ? end + 1 : end;
        if (line == end || line[0] == '@')
            continue;
        const char *eq = memchr(line, '=', (size_t)(end - line));
        if (!eq)
            continue;
        const char *ke = eq;
        while (ke > line && ke[-1] == ' ')
            ke--;
        const char *vs = eq + 1;
        while (vs < end && *vs == ' ')
            vs++;
        *k = line;
        *kl = (size_t)(ke - line);
        *v = vs;
        *vl = (size_t)(end - vs);
        return true;
    }
    return false;
}

/* The value of key in facts, or NULL. */
static bool find_fact(const char *facts, const char *key, size_t kl, const char **v, size_t *vl)
{
    const char *p = facts, *k;
    size_t n;
    while (next_fact(&p, &k, &n, v, vl))
        if (n == kl && !memcmp(k, key, kl))
            return true;
    return false;
}

int mesh_facts_diff(const char *a, const char *b, char *key, size_t klen, char *va, size_t valen, char *vb,
                    size_t vblen)
{
    const char *p = a, *k, *v, *w;
    size_t kl, vl, wl;
    while (next_fact(&p, &k, &kl, &v, &vl)) {
        bool there = find_fact(b, k, kl, &w, &wl);
        if (!there || wl != vl || memcmp(v, w, vl)) {
            snprintf(key, klen, "%.*s", (int)kl, k);
            snprintf(va, valen, "%.*s", (int)vl, v);
            snprintf(vb, vblen, "%.*s", there ? (int)wl : 6, there ? w : "(none)");
            return 1;
        }
    }
    p = b;
    while (next_fact(&p, &k, &kl, &w, &wl))
        if (!find_fact(a, k, kl, &v, &vl)) {
            snprintf(key, klen, "%.*s", (int)kl, k);
            snprintf(va, valen, "(none)");
            snprintf(vb, vblen, "%.*s", (int)wl, w);
            return 1;
        }
    return 0;
}

uint64_t mesh_facts_token(const char *facts)
{
    /* a sum of one hash per line: the order of the lines does not count,
     * as in mesh_facts_diff */
    uint64_t t = 0;
    const char *p = facts, *k, *v;
    size_t kl, vl;
    while (next_fact(&p, &k, &kl, &v, &vl))
        t += XXH3_64bits_withSeed(v, vl, XXH3_64bits(k, kl));
    return t;
}

/* "@key = value" of a HELLO into out ("?" when absent). */
static void self_fact(const char *facts, const char *key, char *out, size_t len)
{
    size_t kl = strlen(key);
    for (const char *p = facts; p && *p;) {
        const char *end = strchr(p, '\n');
        if (!end)
            end = p + strlen(p);
        if (p[0] == '@' && (size_t)(end - p) > kl + 1 && !strncmp(p + 1, key, kl) &&
            (p[kl + 1] == ' ' || p[kl + 1] == '=')) {
            const char *v = p + 1 + kl;
            while (v < end && (*v == ' ' || *v == '='))
                v++;
            snprintf(out, len, "%.*s", (int)(end - v), v);
            return;
        }
        p = *end ? end + 1 : end;
    }
    snprintf(out, len, "?");
}

/* ---- setup ----------------------------------------------------------------------------- */

static int mesh_alloc(struct mesh *m, const struct mesh_params *p, char *err, size_t errlen)
{
    memset(m, 0, sizeof *m);
    if (p->nodes < 2 || p->nodes > MESH_NODES_MAX || p->node >= p->nodes || !p->master || !p->facts ||
        !p->endpoint || strlen(p->master) >= sizeof m->master || strlen(p->endpoint) >= MESH_ENDPOINT_MAX)
        return sl_errf(err, errlen, -EINVAL, "mesh: bad parameters (node %" PRIu32 " of %" PRIu32 ")", p->node,
                       p->nodes);
    m->node = p->node;
    m->nodes = p->nodes;
    snprintf(m->master, sizeof m->master, "%s", p->master);
    m->hb_interval_s = p->hb_interval_s > 0 ? p->hb_interval_s : MESH_HB_INTERVAL_S;
    m->peer_timeout_s = p->peer_timeout_s > 0 ? p->peer_timeout_s : MESH_PEER_TIMEOUT_S;
    m->endpoints = calloc(p->nodes, sizeof *m->endpoints);
    m->hosts = calloc(p->nodes, sizeof *m->hosts);
    m->rid = calloc(p->nodes, sizeof *m->rid);
    m->rid_len = calloc(p->nodes, sizeof *m->rid_len);
    m->ctx = zmq_ctx_new();
    if (!m->endpoints || !m->hosts || !m->rid || !m->rid_len || !m->ctx)
        return sl_errf(err, errlen, -ENOMEM, "mesh: out of memory");
    snprintf(m->endpoints[p->node], MESH_ENDPOINT_MAX, "%s", p->endpoint);
    snprintf(m->hosts[p->node], MESH_HOST_MAX, "%s", p->host ? p->host : "?");
    return 0;
}

static void *mesh_socket(struct mesh *m, int type)
{
    void *s = zmq_socket(m->ctx, type);
    if (!s)
        return NULL;
    int linger = MESH_LINGER_MS, one = 1, unlimited = 0;
    int64_t maxmsg = MESH_MSG_MAX;
    zmq_setsockopt(s, ZMQ_LINGER, &linger, sizeof linger);
    /* a frame larger than any mesh message is refused before libzmq
     * allocates it (a stray peer announcing gigabytes cost as much memory) */
    zmq_setsockopt(s, ZMQ_MAXMSGSIZE, &maxmsg, sizeof maxmsg);
    /* never drop a message for a full queue (an END lost in a network stall
     * left every node waiting): the backlog is bounded by the peer timeout */
    zmq_setsockopt(s, ZMQ_SNDHWM, &unlimited, sizeof unlimited);
    if (type == ZMQ_ROUTER)
        zmq_setsockopt(s, ZMQ_ROUTER_MANDATORY, &one, sizeof one);
    return s;
}

/* Waits until the socket or the cancel fd is readable, at most ms. 1: the
 * socket; 2: cancel; 0: timeout; -errno. */
static int wait_in(void *s, int cancel_fd, long ms)
{
    zmq_pollitem_t it[2] = {{.socket = s, .events = ZMQ_POLLIN}, {.socket = NULL, .fd = cancel_fd, .events = ZMQ_POLLIN}};
    int n = zmq_poll(it, cancel_fd >= 0 ? 2 : 1, ms);
    if (n < 0)
        return zmq_errno() == EINTR ? 0 : zerr();
    if (cancel_fd >= 0 && (it[1].revents & ZMQ_POLLIN))
        return 2;
    return (it[0].revents & ZMQ_POLLIN) ? 1 : 0;
}

static long ms_until(double t)
{
    double ms = ceil((t - sl_now()) * 1000.0);
    return ms < 0 ? 0 : ms > 1000 ? 1000 : (long)ms;
}

/* "1, 3" of the nodes not joined into out. */
static void missing_list(const bool *joined, uint32_t nodes, char *out, size_t len)
{
    size_t o = 0;
    out[0] = '\0';
    for (uint32_t k = 0; k < nodes && o + 16 < len; k++)
        if (!joined[k])
            o += (size_t)snprintf(out + o, len - o, "%s%" PRIu32, o ? ", " : "", k);
}

/* ---- rendezvous, node 0 ---------------------------------------------------------------- */

static void refuse_joined(struct mesh *m, const bool *joined, uint64_t why, const char *text)
{
    for (uint32_t k = 1; k < m->nodes; k++)
        if (joined[k])
            wire_text(m->net, m->rid[k], m->rid_len[k], MESH_REFUSE, 0, why, text);
}

/* An endpoint as the nodes announce them: tcp://HOST:PORT, HOST of
 * letters, digits, '.', '-', '_', ':' and brackets (IPv6), PORT digits. Peers'
 * endpoints go into every node's cluster.toml and to ZeroMQ: nothing else
 * is taken from the network. */
static bool endpoint_ok(const char *e, size_t len)
{
    if (len < 9 || strncmp(e, "tcp://", 6) != 0)
        return false;
    size_t colon = 0;
    for (size_t i = 6; i < len; i++) {
        char c = e[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '-' ||
              c == '_' || c == ':' || c == '[' || c == ']'))
            return false;
        if (c == ':')
            colon = i;
    }
    if (colon < 7 || colon + 1 >= len)
        return false;
    for (size_t i = colon + 1; i < len; i++)
        if (e[i] < '0' || e[i] > '9')
            return false;
    return true;
}

/* The run name node 0 sends: it becomes the run directory's name on every
 * node, so it must be a plain name (letters, digits, '-', '_', as
 * --run-name), never a path. */
static bool run_name_ok(const char *name)
{
    if (!*name)
        return false;
    for (const char *c = name; *c; c++)
        if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') || *c == '-' || *c == '_'))
            return false;
    return true;
}

/* Node 0's view of the rendezvous. */
struct rv {
    bool *joined;     /* (nodes) holds its node rank */
    double *since;    /* (nodes) when it joined */
    double *heard;    /* (nodes) when it last answered a WAIT (or joined) */
    char (*pid)[24];  /* (nodes) its @pid */
    char refused[2048]; /* the first refusals, "; "-separated, for the timeout message */
    uint32_t n_refused, n_listed;
};

/* Sends joined node k the rendezvous' waiting message (text); false when
 * its connection has closed (ROUTER_MANDATORY: it died after joining). */
static bool still_joined(struct mesh *m, uint32_t k, const char *text)
{
    return wire_text(m->net, m->rid[k], m->rid_len[k], MESH_WAIT, 0, 0, text) != -EHOSTUNREACH;
}

static bool same_rid(const struct mesh *m, uint32_t k, const struct msg *in)
{
    return m->rid_len[k] == in->rid_len && !memcmp(m->rid[k], in->rid, in->rid_len);
}

/* Refuses the sender of a HELLO alone (the rendezvous goes on without
 * it): REFUSE with `why` (the whole sentence) to it, a note on node 0 with
 * `brief`, and `brief` kept for the timeout message. */
static void refuse_one(struct mesh *m, const struct mesh_params *p, struct rv *rv, const struct msg *in,
                       const char *host, const char *pid, const char *brief, const char *why)
{
    wire_text(m->net, in->rid, in->rid_len, MESH_REFUSE, 0, REFUSE_NODE, why);
    note(p, "refused a node claiming node rank %" PRIu32 " from %s (pid %s): %s", in->w.from, host, pid, brief);
    rv->n_refused++;
    size_t o = strlen(rv->refused);
    if (rv->n_listed < 3 && o + 64 < sizeof rv->refused) {
        snprintf(rv->refused + o, sizeof rv->refused - o, "%snode rank %" PRIu32 " from %s (pid %s): %s", o ? "; " : "",
                 in->w.from, host, pid, brief);
        rv->n_listed++;
    }
}

/* A HELLO: the node joins, takes the place of a holder that is gone, or
 * is refused alone (mesh.h: what must match, who keeps a node rank). */
static void hello(struct mesh *m, const struct mesh_params *p, struct rv *rv, const struct msg *in,
                  const char *waiting)
{
    uint32_t k = in->w.from;
    char host[MESH_HOST_MAX], pid[24], key[128], here[512], there[512], ep[MESH_ENDPOINT_MAX], brief[1400], why[2048];
    self_fact(in->data, "host", host, sizeof host);
    self_fact(in->data, "pid", pid, sizeof pid);
    self_fact(in->data, "endpoint", ep, sizeof ep);
    if (mesh_facts_diff(p->facts, in->data, key, sizeof key, here, sizeof here, there, sizeof there)) {
        snprintf(brief, sizeof brief, "%s = %s there, %s on node 0", key, there, here);
        snprintf(why, sizeof why,
                 "node %" PRIu32 " (%s, pid %s) does not match node 0 (%s) of job %016" PRIx64 ": %s; run every node of "
                 "a job with the same configuration, flags and dataset (a launcher of another job needs a --master "
                 "of its own)",
                 k, host, pid, m->hosts[0], mesh_facts_token(p->facts), brief);
        refuse_one(m, p, rv, in, host, pid, brief, why);
        return;
    }
    if (k == 0 || k >= m->nodes) {
        snprintf(brief, sizeof brief, "node rank %" PRIu32 " is not one of 1..%" PRIu32, k, m->nodes - 1);
        snprintf(why, sizeof why,
                 "a node on %s (pid %s) says it is node %" PRIu32 ", but the nodes beside node 0 are 1..%" PRIu32
                 "; give each launcher its own --node-rank",
                 host, pid, k, m->nodes - 1);
        refuse_one(m, p, rv, in, host, pid, brief, why);
        return;
    }
    if (!endpoint_ok(ep, strlen(ep))) {
        snprintf(brief, sizeof brief, "its endpoint \"%.200s\" is not tcp://HOST:PORT", ep);
        snprintf(why, sizeof why, "node %" PRIu32 " (%s, pid %s) announced the endpoint \"%.200s\", not tcp://HOST:PORT",
                 k, host, pid, ep);
        refuse_one(m, p, rv, in, host, pid, brief, why);
        return;
    }
    double now = sl_now();
    if (rv->joined[k] && !same_rid(m, k, in)) {
        /* the holder keeps its rank while it is there: connected, and
         * answering the WAITs within the peer timeout */
        bool open = still_joined(m, k, waiting);
        double silent = now - rv->heard[k];
        if (open && silent < m->peer_timeout_s) {
            snprintf(brief, sizeof brief,
                     "node rank %" PRIu32 " is already held by %s (pid %s), which joined %.1f s ago and still answers",
                     k, m->hosts[k], rv->pid[k], now - rv->since[k]);
            snprintf(why, sizeof why,
                     "node rank %" PRIu32 " was claimed twice: %s (pid %s) holds it, so this launcher on %s (pid %s) "
                     "is refused; give each launcher of the job its own --node-rank 0..%" PRIu32
                     " (or stop the launcher that holds it, if it is a leftover)",
                     k, m->hosts[k], rv->pid[k], host, pid, m->nodes - 1);
            refuse_one(m, p, rv, in, host, pid, brief, why);
            return;
        }
        if (open) /* silent: its machine or network went; tell it, should it come back */
            wire_text(m->net, m->rid[k], m->rid_len[k], MESH_REFUSE, 0, REFUSE_NODE,
                      "this node went silent during the rendezvous, and another launcher took its node rank");
        note(p, "node %" PRIu32 " (%s, pid %s) left the rendezvous (%s); %s (pid %s) takes its place", k, m->hosts[k],
             rv->pid[k], open ? "it went silent" : "its connection closed", host, pid);
    }
    if (!rv->joined[k] || !same_rid(m, k, in))
        note(p, "node %" PRIu32 " joined from %s (pid %s)", k, host, pid);
    rv->joined[k] = true;
    rv->since[k] = rv->heard[k] = now;
    memcpy(m->rid[k], in->rid, in->rid_len);
    m->rid_len[k] = in->rid_len;
    snprintf(m->hosts[k], MESH_HOST_MAX, "%s", host);
    snprintf(m->endpoints[k], MESH_ENDPOINT_MAX, "%s", ep);
    snprintf(rv->pid[k], sizeof rv->pid[k], "%s", pid);
}

static int rv_master(struct mesh *m, const struct mesh_params *p, struct rv *rv, char *err, size_t errlen)
{
    m->net = mesh_socket(m, ZMQ_ROUTER);
    if (!m->net || zmq_bind(m->net, p->master) != 0) {
        int rc = zerr();
        return sl_errf(err, errlen, rc,
                       "--master %s: node 0 cannot listen there: %s; --master must name an address of node 0 and a "
                       "free TCP port (is another gnnlaunch --node-rank 0 running?)",
                       p->master, zmq_strerror(-rc));
    }
    snprintf(m->name, sizeof m->name, "%s", p->name ? p->name : "");
    if (p->blob)
        memcpy(m->blob, p->blob, MESH_BLOB_BYTES);
    bool *joined = rv->joined;
    joined[0] = true;
    note(p, "node 0 of %" PRIu32 ": waiting on %s for the other nodes of job %016" PRIx64 " (--rendezvous-timeout %.0f s)",
         p->nodes, p->master, mesh_facts_token(p->facts), p->timeout_s);
    double deadline = sl_now() + p->timeout_s, next_wait = sl_now(), last = sl_now();
    char missing[1024], text[4096], waiting[1100];
    for (;;) {
        /* node 0 itself stalled (stopped, swapping): it sent no WAIT, so
         * the holders' silence is its own, not theirs */
        double now = sl_now();
        if (now - last > m->peer_timeout_s / 2)
            for (uint32_t k = 1; k < m->nodes; k++)
                rv->heard[k] = now;
        last = now;
        uint32_t n = 0;
        for (uint32_t k = 0; k < m->nodes; k++)
            n += joined[k];
        if (n == m->nodes)
            break;
        missing_list(joined, m->nodes, missing, sizeof missing);
        snprintf(waiting, sizeof waiting, "missing = %s", missing);
        if (sl_now() >= deadline) {
            int o = snprintf(text, sizeof text,
                             "rendezvous on %s timed out after %.0f s: node%s %s of 0..%" PRIu32
                             " did not join; start gnnlaunch --node-rank N with the same --master and --nodes there, "
                             "and check that node 0's TCP port %s is open to them",
                             p->master, p->timeout_s, m->nodes - n > 1 ? "s" : "", missing, m->nodes - 1,
                             strrchr(p->master, ':') ? strrchr(p->master, ':') + 1 : p->master);
            if (rv->n_refused && o > 0 && (size_t)o < sizeof text)
                snprintf(text + o, sizeof text - (size_t)o, "; node 0 refused %" PRIu32 " launcher%s meanwhile: %s%s",
                         rv->n_refused, rv->n_refused > 1 ? "s" : "", rv->refused,
                         rv->n_refused > rv->n_listed ? "; ..." : "");
            refuse_joined(m, joined, REFUSE_TIMEOUT, text);
            return sl_errf(err, errlen, -ETIMEDOUT, "%s", text);
        }
        if (sl_now() >= next_wait) {
            for (uint32_t k = 1; k < m->nodes; k++)
                if (joined[k] && !still_joined(m, k, waiting)) {
                    joined[k] = false;
                    note(p, "node %" PRIu32 " (%s) left the rendezvous (its connection closed)", k, m->hosts[k]);
                }
            next_wait = sl_now() + m->hb_interval_s;
        }
        int w = wait_in(m->net, p->cancel_fd, SL_MIN(ms_until(deadline), ms_until(next_wait)));
        if (w < 0)
            return sl_errf(err, errlen, w, "rendezvous on %s: %s", p->master, zmq_strerror(-w));
        if (w == 2) {
            refuse_joined(m, joined, REFUSE_ABORT, "node 0 was interrupted during the rendezvous");
            return sl_errf(err, errlen, -EINTR, "interrupted during the rendezvous");
        }
        struct msg in;
        int rc, burst = 0;
        while (burst++ < MESH_BURST && (rc = wire_recv(m->net, true, &in)) != 0) { /* a flood cannot starve the deadline */
            if (rc < 0) {
                if (rc == -EPROTO || rc == -EPROTONOSUPPORT)
                    continue; /* not a Sluice launcher of this version: ignored (its own side times out) */
                return sl_errf(err, errlen, rc, "rendezvous on %s: %s", p->master, zmq_strerror(-rc));
            }
            uint32_t k = in.w.from;
            bool holder = k > 0 && k < m->nodes && joined[k] && same_rid(m, k, &in);
            if (in.w.type == MESH_LEAVE && holder) {
                joined[k] = false;
                note(p, "node %" PRIu32 " (%s) left the rendezvous", k, m->hosts[k]);
                next_wait = sl_now();
            } else if (in.w.type == MESH_HEARTBEAT && holder) {
                rv->heard[k] = sl_now();
            } else if (in.w.type == MESH_HELLO) {
                bool was = k < m->nodes && joined[k];
                hello(m, p, rv, &in, waiting);
                if (k < m->nodes && joined[k] && !was)
                    next_wait = sl_now(); /* everyone hears who is still missing */
            }
            msg_free(&in);
        }
    }
    /* everyone is in: the run */
    size_t cap = 512 + (size_t)m->nodes * (MESH_ENDPOINT_MAX + MESH_HOST_MAX + 40), o = 0;
    char *w = malloc(cap);
    if (!w)
        return sl_errf(err, errlen, -ENOMEM, "out of memory");
    o += (size_t)snprintf(w + o, cap - o, "name = %s\nblob = ", m->name);
    for (int i = 0; i < MESH_BLOB_BYTES; i++)
        o += (size_t)snprintf(w + o, cap - o, "%02x", m->blob[i]);
    o += (size_t)snprintf(w + o, cap - o, "\n");
    for (uint32_t k = 0; k < m->nodes; k++)
        o += (size_t)snprintf(w + o, cap - o, "endpoint.%" PRIu32 " = %s\nhost.%" PRIu32 " = %s\n", k, m->endpoints[k],
                              k, m->hosts[k]);
    for (uint32_t k = 1; k < m->nodes; k++)
        wire_text(m->net, m->rid[k], m->rid_len[k], MESH_WELCOME, 0, 0, w);
    free(w);
    return 0;
}

/* ---- rendezvous, node I ---------------------------------------------------------------- */

static int hexval(char c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/* Reads node 0's WELCOME into m. The run name becomes a directory name
 * here, the endpoints text in cluster.toml: both are checked. */
static int parse_welcome(struct mesh *m, const char *text)
{
    const char *v;
    size_t vl;
    if (!find_fact(text, "name", 4, &v, &vl) || vl >= sizeof m->name)
        return -EPROTO;
    snprintf(m->name, sizeof m->name, "%.*s", (int)vl, v);
    if (!run_name_ok(m->name))
        return -EPROTO;
    if (!find_fact(text, "blob", 4, &v, &vl) || vl != 2 * MESH_BLOB_BYTES)
        return -EPROTO;
    for (int i = 0; i < MESH_BLOB_BYTES; i++) {
        int hi = hexval(v[2 * i]), lo = hexval(v[2 * i + 1]);
        if (hi < 0 || lo < 0)
            return -EPROTO;
        m->blob[i] = (uint8_t)(hi << 4 | lo);
    }
    for (uint32_t k = 0; k < m->nodes; k++) {
        char key[32];
        int kl = snprintf(key, sizeof key, "endpoint.%" PRIu32, k);
        if (!find_fact(text, key, (size_t)kl, &v, &vl) || vl == 0 || vl >= MESH_ENDPOINT_MAX || !endpoint_ok(v, vl))
            return -EPROTO;
        snprintf(m->endpoints[k], MESH_ENDPOINT_MAX, "%.*s", (int)vl, v);
        kl = snprintf(key, sizeof key, "host.%" PRIu32, k);
        if (find_fact(text, key, (size_t)kl, &v, &vl))
            snprintf(m->hosts[k], MESH_HOST_MAX, "%.*s", (int)SL_MIN(vl, MESH_HOST_MAX - 1), v);
    }
    return 0;
}

static int rv_node(struct mesh *m, const struct mesh_params *p, char *err, size_t errlen)
{
    m->net = mesh_socket(m, ZMQ_DEALER);
    if (!m->net || zmq_connect(m->net, p->master) != 0) {
        int rc = zerr();
        return sl_errf(err, errlen, rc, "--master %s: %s", p->master, zmq_strerror(-rc));
    }
    /* queued until the connection is up (ZeroMQ retries it in the background) */
    int rc = wire_text(m->net, NULL, 0, MESH_HELLO, p->node, 0, p->facts);
    if (rc)
        return sl_errf(err, errlen, rc, "rendezvous: cannot send to %s: %s", p->master, zmq_strerror(-rc));
    note(p, "node %" PRIu32 " of %" PRIu32 ": joining node 0 at %s as job %016" PRIx64 " (--rendezvous-timeout %.0f s)",
         p->node, p->nodes, p->master, mesh_facts_token(p->facts), p->timeout_s);
    double deadline = sl_now() + p->timeout_s, heard = 0;
    char missing[1024] = "";
    for (;;) {
        double now = sl_now();
        if (heard > 0 && now - heard > m->peer_timeout_s)
            return sl_errf(err, errlen, -ETIMEDOUT,
                           "node 0 at %s stopped answering during the rendezvous (nothing for %.0f s); is its "
                           "gnnlaunch still running?",
                           p->master, now - heard);
        if (now >= deadline) {
            if (heard > 0)
                return sl_errf(err, errlen, -ETIMEDOUT,
                               "rendezvous on %s timed out after %.0f s: node 0 is up, but node(s) %s did not join",
                               p->master, p->timeout_s, missing[0] ? missing : "?");
            return sl_errf(err, errlen, -ETIMEDOUT,
                           "rendezvous on %s timed out after %.0f s: no answer from node 0; start gnnlaunch "
                           "--node-rank 0 there with the same --master and --nodes, or check that its TCP port is "
                           "open to this node",
                           p->master, p->timeout_s);
        }
        int w = wait_in(m->net, p->cancel_fd, ms_until(deadline));
        if (w < 0)
            return sl_errf(err, errlen, w, "rendezvous on %s: %s", p->master, zmq_strerror(-w));
        if (w == 2) {
            wire_text(m->net, NULL, 0, MESH_LEAVE, p->node, 0, "");
            return sl_errf(err, errlen, -EINTR, "interrupted during the rendezvous");
        }
        struct msg in;
        while ((rc = wire_recv(m->net, false, &in)) != 0) {
            if (rc == -EPROTONOSUPPORT)
                return sl_errf(err, errlen, -EINVAL,
                               "node 0 at %s runs another version of the launcher protocol; run the same Sluice "
                               "build on every node",
                               p->master);
            if (rc == -EPROTO)
                continue;
            if (rc < 0)
                return sl_errf(err, errlen, rc, "rendezvous on %s: %s", p->master, zmq_strerror(-rc));
            if (in.w.type == MESH_WAIT) {
                /* this node is still here: node 0 gives a silent holder's rank to a newcomer */
                wire_send(m->net, NULL, 0, MESH_HEARTBEAT, p->node, p->node, 0, NULL, 0);
                if (heard == 0)
                    deadline += MESH_GRACE_S; /* node 0's verdict comes first */
                heard = sl_now();
                const char *v;
                size_t vl;
                if (find_fact(in.data, "missing", 7, &v, &vl))
                    snprintf(missing, sizeof missing, "%.*s", (int)vl, v);
            } else if (in.w.type == MESH_WELCOME) {
                rc = parse_welcome(m, in.data);
                msg_free(&in);
                if (rc)
                    return sl_errf(err, errlen, rc, "rendezvous: node 0's answer is damaged");
                return 0;
            } else if (in.w.type == MESH_REFUSE) {
                int code = in.w.arg == REFUSE_TIMEOUT ? -ETIMEDOUT
                           : in.w.arg == REFUSE_ABORT ? -ECONNABORTED
                                                        : -EINVAL;
                if (in.w.arg == REFUSE_NODE)
                    sl_errf(err, errlen, code, "node 0 at %s refused this node (the job goes on without it): %s",
                            p->master, in.data);
                else
                    sl_errf(err, errlen, code, "node 0 ended the rendezvous: %s", in.data);
                msg_free(&in);
                return code;
            }
            msg_free(&in);
        }
    }
}

int mesh_rendezvous(struct mesh *m, const struct mesh_params *p, char *err, size_t errlen)
{
    int rc = mesh_alloc(m, p, err, errlen);
    if (rc)
        return rc;
    if (p->node == 0) {
        struct rv *rv = calloc(1, sizeof *rv);
        if (rv) {
            rv->joined = calloc(p->nodes, sizeof *rv->joined);
            rv->since = calloc(p->nodes, sizeof *rv->since);
            rv->heard = calloc(p->nodes, sizeof *rv->heard);
            rv->pid = calloc(p->nodes, sizeof *rv->pid);
        }
        if (!rv || !rv->joined || !rv->since || !rv->heard || !rv->pid)
            rc = sl_errf(err, errlen, -ENOMEM, "out of memory");
        else
            rc = rv_master(m, p, rv, err, errlen);
        if (rv) {
            free(rv->joined);
            free(rv->since);
            free(rv->heard);
            free(rv->pid);
        }
        free(rv);
        return rc;
    }
    return rv_node(m, p, err, errlen);
}

/* ---- the mesh thread ------------------------------------------------------------------- */

struct watch {
    double *seen;  /* (nodes) when each peer was last heard from */
    bool *ended;   /* (nodes) sent END */
    bool *gone;    /* (nodes) failed or lost: no more traffic with it */
};

/* Sends to node k (node 0: through the ROUTER; others: only node 0). */
static void send_to(struct mesh *m, uint32_t k, const struct mesh_wire *w, const void *data, size_t len)
{
    if (m->node == 0)
        wire_send(m->net, m->rid[k], m->rid_len[k], w->type, w->from, w->about, w->arg, data, len);
    else if (k == 0)
        wire_send(m->net, NULL, 0, w->type, w->from, w->about, w->arg, data, len);
}

/* Node 0: passes a message on to every node but `except` (and the gone). */
static void relay(struct mesh *m, const struct watch *wt, uint32_t except, const struct mesh_wire *w,
                  const void *data, size_t len)
{
    for (uint32_t k = 1; k < m->nodes; k++)
        if (k != except && !wt->gone[k])
            send_to(m, k, w, data, len);
}

static void to_main(struct mesh *m, const struct mesh_wire *w, const void *data, size_t len)
{
    wire_send(m->pipe_thread, NULL, 0, w->type, w->from, w->about, w->arg, data, len);
}

static bool all_ended(const struct mesh *m, const struct watch *wt)
{
    for (uint32_t k = 0; k < m->nodes; k++)
        if (!wt->ended[k])
            return false;
    return true;
}

static void from_network(struct mesh *m, struct watch *wt, struct msg *in)
{
    uint32_t k;
    if (m->node == 0) {
        for (k = 1; k < m->nodes; k++)
            if (m->rid_len[k] == in->rid_len && !memcmp(m->rid[k], in->rid, in->rid_len))
                break;
        if (k == m->nodes) {
            if (in->w.type == MESH_HELLO) {
                char text[256], host[MESH_HOST_MAX], pid[24], line[512];
                snprintf(text, sizeof text,
                         "the run on this master has already started with all %" PRIu32
                         " nodes; give each launcher of a job its own --node-rank, and each job its own --master",
                         m->nodes);
                wire_text(m->net, in->rid, in->rid_len, MESH_REFUSE, 0, REFUSE_NODE, text);
                /* and node 0's main thread says so, as in the rendezvous */
                self_fact(in->data, "host", host, sizeof host);
                self_fact(in->data, "pid", pid, sizeof pid);
                snprintf(line, sizeof line,
                         "refused a node claiming node rank %" PRIu32 " from %s (pid %s): the run has already "
                         "started with all %" PRIu32 " nodes",
                         in->w.from, host, pid, m->nodes);
                struct mesh_wire w = {.type = MESH_REFUSE, .from = 0, .about = 0};
                to_main(m, &w, line, strlen(line));
            }
            return;
        }
        if (in->w.from != k || wt->gone[k])
            return;
    } else {
        k = 0;
        if (in->w.from != 0)
            return;
    }
    wt->seen[k] = sl_now();
    struct mesh_wire w = in->w;
    switch (in->w.type) {
    case MESH_EPOCH:
    case MESH_FAIL:
    case MESH_END:
        if (w.about >= m->nodes || w.about == m->node)
            return;
        if (m->node == 0) {
            w.about = k; /* a node speaks for itself */
            w.from = 0;  /* and node 0 passes it on */
        }
        if (w.type == MESH_END)
            wt->ended[w.about] = true;
        if (w.type == MESH_FAIL && m->node == 0)
            wt->gone[w.about] = true;
        to_main(m, &w, in->data, in->len);
        if (m->node == 0)
            relay(m, wt, k, &w, in->data, in->len);
        break;
    default:
        break; /* heartbeats; a late WAIT */
    }
}

/* 1 to quit. */
static int from_main(struct mesh *m, struct watch *wt, struct msg *in)
{
    if (in->w.type == MESH_QUIT)
        return 1;
    struct mesh_wire w = in->w;
    w.from = w.about = m->node;
    if (w.type == MESH_END)
        wt->ended[m->node] = true;
    if (m->node == 0)
        relay(m, wt, 0, &w, in->data, in->len);
    else
        send_to(m, 0, &w, in->data, in->len);
    return 0;
}

static void check_peers(struct mesh *m, struct watch *wt)
{
    double now = sl_now();
    for (uint32_t k = 0; k < m->nodes; k++) {
        if (k == m->node || wt->gone[k])
            continue;
        bool watched = m->node == 0 ? !wt->ended[k] : (k == 0 && !all_ended(m, wt));
        if (!watched || now - wt->seen[k] < m->peer_timeout_s)
            continue;
        wt->gone[k] = true;
        char text[512];
        snprintf(text, sizeof text,
                 "lost: nothing from node %" PRIu32 " (%s) for %.1f s; its launcher died or the network between the "
                 "nodes is down",
                 k, m->hosts[k], now - wt->seen[k]);
        struct mesh_wire w = {.type = MESH_FAIL, .from = m->node, .about = k, .arg = 1};
        to_main(m, &w, text, strlen(text));
        if (m->node == 0)
            relay(m, wt, k, &w, text, strlen(text));
    }
}

static void *mesh_thread(void *arg)
{
    struct mesh *m = arg;
    struct watch wt = {.seen = calloc(m->nodes, sizeof(double)),
                       .ended = calloc(m->nodes, sizeof(bool)),
                       .gone = calloc(m->nodes, sizeof(bool))};
    if (!wt.seen || !wt.ended || !wt.gone) {
        struct mesh_wire w = {.type = MESH_FAIL, .from = m->node, .about = m->node};
        to_main(m, &w, "out of memory in the mesh thread", 32);
        goto out;
    }
    double t = sl_now(), next_hb = t;
    for (uint32_t k = 0; k < m->nodes; k++)
        wt.seen[k] = t;
    for (;;) {
        t = sl_now();
        if (t >= next_hb) {
            struct mesh_wire hb = {.type = MESH_HEARTBEAT, .from = m->node, .about = m->node};
            for (uint32_t k = 0; k < m->nodes; k++)
                if (k != m->node && !wt.gone[k])
                    send_to(m, k, &hb, NULL, 0);
            next_hb = t + m->hb_interval_s;
            check_peers(m, &wt);
        }
        zmq_pollitem_t it[2] = {{.socket = m->net, .events = ZMQ_POLLIN}, {.socket = m->pipe_thread, .events = ZMQ_POLLIN}};
        double ms = ceil((next_hb - sl_now()) * 1000.0);
        if (zmq_poll(it, 2, ms < 0 ? 0 : (long)ms) < 0 && zmq_errno() != EINTR)
            break; /* the context is gone */
        struct msg in;
        int rc;
        bool quit = false;
        /* at most MESH_BURST messages a wake-up: a flood (garbage from
         * outside the run included) must not keep the heartbeats from going
         * out, or the peers would declare this node lost */
        for (int burst = 0; burst < MESH_BURST && (rc = wire_recv(m->net, m->node == 0, &in)) != 0; burst++) {
            if (rc > 0) {
                from_network(m, &wt, &in);
                msg_free(&in);
            } else if (rc != -EPROTO && rc != -EPROTONOSUPPORT) {
                quit = true; /* the context is gone */
                break;
            }
        }
        while (!quit && (rc = wire_recv(m->pipe_thread, false, &in)) != 0) {
            if (rc > 0) {
                quit = from_main(m, &wt, &in);
                msg_free(&in);
            } else if (rc != -EPROTO) {
                quit = true;
            }
        }
        if (quit)
            break;
    }
out:
    free(wt.seen);
    free(wt.ended);
    free(wt.gone);
    return NULL;
}

int mesh_start(struct mesh *m, char *err, size_t errlen)
{
    char ep[64];
    snprintf(ep, sizeof ep, "inproc://sluice-mesh-%p", (void *)m);
    int hwm = 0, linger = 0;
    m->pipe_main = zmq_socket(m->ctx, ZMQ_PAIR);
    m->pipe_thread = zmq_socket(m->ctx, ZMQ_PAIR);
    if (!m->pipe_main || !m->pipe_thread)
        return sl_errf(err, errlen, zerr(), "mesh: zmq_socket: %s", zmq_strerror(zmq_errno()));
    for (int i = 0; i < 2; i++) {
        void *s = i ? m->pipe_thread : m->pipe_main;
        zmq_setsockopt(s, ZMQ_SNDHWM, &hwm, sizeof hwm);
        zmq_setsockopt(s, ZMQ_RCVHWM, &hwm, sizeof hwm);
        zmq_setsockopt(s, ZMQ_LINGER, &linger, sizeof linger);
    }
    if (zmq_bind(m->pipe_thread, ep) != 0 || zmq_connect(m->pipe_main, ep) != 0)
        return sl_errf(err, errlen, zerr(), "mesh: %s: %s", ep, zmq_strerror(zmq_errno()));
    int rc = pthread_create(&m->thread, NULL, mesh_thread, m);
    if (rc)
        return sl_errf(err, errlen, -rc, "mesh: cannot start its thread: %s", strerror(rc));
    m->running = true;
    return 0;
}

void *mesh_pollable(const struct mesh *m)
{
    return m->pipe_main;
}

int mesh_send(struct mesh *m, enum mesh_type type, uint64_t arg, const void *payload, size_t len)
{
    if (!m->running)
        return -EPIPE;
    return wire_send(m->pipe_main, NULL, 0, (uint16_t)type, m->node, m->node, arg, payload, len);
}

int mesh_recv(struct mesh *m, struct mesh_event *ev)
{
    if (!m->running)
        return 0;
    struct msg in;
    int rc;
    while ((rc = wire_recv(m->pipe_main, false, &in)) < 0)
        if (rc != -EPROTO)
            return rc;
    if (rc == 0)
        return 0;
    if (in.len + 1 > m->ev_cap) {
        char *b = realloc(m->ev_buf, in.len + 1);
        if (!b) {
            msg_free(&in);
            return -ENOMEM;
        }
        m->ev_buf = b;
        m->ev_cap = in.len + 1;
    }
    memcpy(m->ev_buf, in.data, in.len + 1);
    *ev = (struct mesh_event){.type = (enum mesh_type)in.w.type,
                              .about = in.w.about,
                              .arg = in.w.arg,
                              .data = m->ev_buf,
                              .len = in.len,
                              .lost = in.w.type == MESH_FAIL && in.w.arg == 1};
    msg_free(&in);
    return 1;
}

void mesh_free(struct mesh *m)
{
    if (!m)
        return;
    if (m->running) {
        wire_send(m->pipe_main, NULL, 0, MESH_QUIT, m->node, m->node, 0, NULL, 0);
        pthread_join(m->thread, NULL);
        m->running = false;
    }
    if (m->pipe_main)
        zmq_close(m->pipe_main);
    if (m->pipe_thread)
        zmq_close(m->pipe_thread);
    if (m->net)
        zmq_close(m->net);
    if (m->ctx)
        zmq_ctx_term(m->ctx);
    free(m->endpoints);
    free(m->hosts);
    free(m->rid);
    free(m->rid_len);
    free(m->ev_buf);
    memset(m, 0, sizeof *m);
}
