/* cluster.c - gnnlaunch's side of a multi-node run (cluster.h; the wire
 * protocol is in mesh.h, the gradient chain in ipc/netreduce.h). */
#include "launcher/cluster.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/dataset.h"
#include "core/util.h"
#include "ipc/shm.h"
#include "ipc/run.h"
#include "stages/trainer_reduce.h"

/* ---- flags ----------------------------------------------------------------------------- */

/* HOST:PORT -> IPv4 address text and port. */
static int parse_master(const char *arg, char *ip, size_t iplen, int *port, char *err, size_t errlen)
{
    const char *colon = arg ? strrchr(arg, ':') : NULL;
    char host[256];
    char *end = NULL;
    long p = colon && isdigit((unsigned char)colon[1]) ? strtol(colon + 1, &end, 10) : 0;
    if (!colon || colon == arg || (size_t)(colon - arg) >= sizeof host || !end || *end || p < 1 || p > 65535)
        return sl_errf(err, errlen, -EINVAL, "--master needs HOST:PORT (a port 1..65535), not '%s'", arg ? arg : "");
    snprintf(host, sizeof host, "%.*s", (int)(colon - arg), arg);
    struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM}, *res = NULL;
    int rc = getaddrinfo(host, NULL, &hints, &res);
    if (rc != 0 || !res)
        return sl_errf(err, errlen, -EINVAL, "--master %s: cannot resolve %s to an IPv4 address: %s", arg, host,
                       gai_strerror(rc));
    const struct sockaddr_in *sa = (const struct sockaddr_in *)res->ai_addr;
    inet_ntop(AF_INET, &sa->sin_addr, ip, (socklen_t)iplen);
    freeaddrinfo(res);
    *port = (int)p;
    return 0;
}

/* This node's address as seen from the master: the source address of a
 * (never used) UDP socket connected to it. */
static int local_address(const char *master_ip, int port, char *out, size_t len, char *err, size_t errlen)
{
    int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)}, me;
    socklen_t ml = sizeof me;
    inet_pton(AF_INET, master_ip, &sa.sin_addr);
    if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0 || getsockname(fd, (struct sockaddr *)&me, &ml) != 0) {
        int rc = -errno;
        if (fd >= 0)
            close(fd);
        return sl_errf(err, errlen, rc, "--master %s: no route to it from this node: %s", master_ip, strerror(-rc));
    }
    close(fd);
    inet_ntop(AF_INET, &me.sin_addr, out, (socklen_t)len);
    return 0;
}

/* The gradient port must be free now (the leader trainer binds it later). */
static int port_free(const char *ip, int port, char *err, size_t errlen)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, ip, &sa.sin_addr);
    if (fd >= 0)
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
        int rc = -errno;
        if (fd >= 0)
            close(fd);
        return sl_errf(err, errlen, rc,
                       "this node's gradient port %s:%d (--master's port + 1 + --node-rank) cannot be used: %s; pick "
                       "another --master port on every node",
                       ip, port, strerror(-rc));
    }
    close(fd);
    return 0;
}

int cluster_check(struct cluster *c, const struct cluster_opts *o, int ranks, const char *run_name, char *err,
                  size_t errlen)
{
    memset(c, 0, sizeof *c);
    if (o->nodes <= 1) {
        if (o->node > 0)
            return sl_errf(err, errlen, -EINVAL, "--node-rank %ld needs --nodes K with K > %ld", o->node, o->node);
        if (o->master && o->nodes == 1)
            return 0; /* --nodes 1: the flags are harmless */
        if (o->master)
            return sl_errf(err, errlen, -EINVAL, "--master needs --nodes K (K > 1)");
        return 0;
    }
    if (o->nodes > MESH_NODES_MAX)
        return sl_errf(err, errlen, -EINVAL, "--nodes %ld: at most %d nodes", o->nodes, MESH_NODES_MAX);
    if (o->node < 0 || o->node >= o->nodes)
        return sl_errf(err, errlen, -EINVAL, "--nodes %ld needs --node-rank I with 0 <= I < %ld on every node",
                       o->nodes, o->nodes);
    if (!o->master)
        return sl_errf(err, errlen, -EINVAL,
                       "--nodes %ld needs --master HOST:PORT (node 0's address and a free port, the same on every node)",
                       o->nodes);
    if (ranks * o->nodes > RUN_WORLD_MAX)
        return sl_errf(err, errlen, -EINVAL, "--nodes %ld x pipeline.ranks = %d is more than %d ranks", o->nodes, ranks,
                       RUN_WORLD_MAX);
    if (run_name && strlen(run_name) > CLUSTER_NAME_MAX)
        return sl_errf(err, errlen, -EINVAL, "--run-name %s: at most %d characters with --nodes", run_name,
                       CLUSTER_NAME_MAX);
    c->on = true;
    c->gpus = o->gpus > 0 ? (uint32_t)o->gpus : 0;
    c->nodes = (uint32_t)o->nodes;
    c->node = (uint32_t)o->node;
    c->ranks = (uint32_t)ranks;
    c->timeout_s = o->timeout_s > 0 ? o->timeout_s : CLUSTER_TIMEOUT_S;
    snprintf(c->master_arg, sizeof c->master_arg, "%s", o->master);
    char master_ip[64];
    int port = 0, rc = parse_master(o->master, master_ip, sizeof master_ip, &port, err, errlen);
    if (rc)
        return rc;
    if (port + (int)c->nodes > 65535)
        return sl_errf(err, errlen, -EINVAL,
                       "--master %s: the gradient ports go up to %d (port + 1 + node rank); pick a port below %d",
                       o->master, port + (int)c->nodes, 65535 - (int)c->nodes);
    snprintf(c->master, sizeof c->master, "tcp://%s:%d", master_ip, port);
    if (c->node == 0)
        snprintf(c->ip, sizeof c->ip, "%s", master_ip);
    else if ((rc = local_address(master_ip, port, c->ip, sizeof c->ip, err, errlen)) != 0)
        return rc;
    snprintf(c->endpoint, sizeof c->endpoint, "tcp://%s:%d", c->ip, port + 1 + (int)c->node);
    return port_free(c->ip, port + 1 + (int)c->node, err, errlen);
}

/* ---- rendezvous ------------------------------------------------------------------------ */

/* "key = value" lines into out (grown with realloc). */
struct text {
    char *s;
    size_t len, cap;
};

static void add(struct text *t, const char *fmt, ...) SL_PRINTF(2, 3);
static void add(struct text *t, const char *fmt, ...)
{
    va_list ap;
    for (;;) {
        va_start(ap, fmt);
        int n = vsnprintf(t->s ? t->s + t->len : NULL, t->s ? t->cap - t->len : 0, fmt, ap);
        va_end(ap);
        if (n < 0)
            return;
        if (t->s && t->len + (size_t)n < t->cap) {
            t->len += (size_t)n;
            return;
        }
        size_t cap = SL_MAX(t->cap * 2, t->len + (size_t)n + 256);
        char *s = realloc(t->s, cap);
        if (!s)
            return;
        t->s = s;
        t->cap = cap;
    }
}

/* A configuration value as written, or a number in its shortest
 * round-trip form when it is one ("0.01", not "0.010000000000000000208":
 * just as exact, and readable in a mismatch message). */
static void value_text(const char *v, char *out, size_t len)
{
    char *end;
    double d = strtod(v, &end);
    if (end != v && !*end && strpbrk(v, ".eE") && isfinite(d))
        for (int p = 1; p <= 17; p++) {
            snprintf(out, len, "%.*g", p, d);
            if (strtod(out, NULL) == d)
                return;
        }
    snprintf(out, len, "%s", v);
}

/* What every node must share: the build, the node count, where the
 * ranks compute (--cpu, or --gpus N), the resumed epoch, the effective
 * configuration (but for paths: each node has its own dataset.path and
 * checkpoint directory) and the dataset's identity as dataset.toml
 * records it (counts, and every file's shape, size and checksum). Then
 * this node's own '@' lines. */
static char *make_facts(const struct cluster *c, const struct config *cfg_in, uint32_t start_epoch)
{
    struct text t = {0};
    char where[32] = "--cpu";
    if (c->gpus)
        snprintf(where, sizeof where, "--gpus %" PRIu32, c->gpus);
    add(&t,
        "sluice version = %s\ngnnlaunch --nodes = %" PRIu32 "\nranks compute on = %s\nresume from epoch = %" PRIu32
        "\n",
        SLUICE_VERSION, c->nodes, where, start_epoch);
    char *cfg = NULL;
    size_t cfg_len = 0;
    FILE *f = open_memstream(&cfg, &cfg_len);
    if (f) {
        config_write_toml(cfg_in, f);
        fclose(f);
    }
    char section[64] = "";
    for (char *save = NULL, *line = cfg ? strtok_r(cfg, "\n", &save) : NULL; line; line = strtok_r(NULL, "\n", &save)) {
        if (line[0] == '[') {
            snprintf(section, sizeof section, "%.*s", (int)strcspn(line + 1, "]"), line + 1);
            continue;
        }
        char key[128], val[512];
        snprintf(key, sizeof key, "%s.%.*s", section, (int)strcspn(line, " ="), line);
        if (!strcmp(key, "dataset.path") || !strcmp(key, "train.checkpoint_dir") ||
            !strcmp(key, "pipeline.feature_buffer_mb") || !strcmp(key, "pipeline.staging_mb") ||
            !strcmp(key, "pipeline.topology") || !strcmp(key, "pipeline.neighbour_cache_mb"))
            continue; /* each node's own; the memory keys are sized to each machine (memfit.h) */
        const char *eq = strstr(line, " = ");
        value_text(eq ? eq + 3 : "", val, sizeof val);
        add(&t, "%s = %s\n", key, val);
    }
    free(cfg);
    struct dataset_meta m;
    char msg[512];
    if (dataset_meta_read(cfg_in->dataset.path, &m, false, msg, sizeof msg) == 0) {
        add(&t, "dataset.nodes = %" PRIu64 "\ndataset.edges = %" PRIu64 "\ndataset.feat_dim = %" PRIu64
                "\ndataset.classes = %" PRIu32 "\n",
            m.nodes, m.edges, m.feat_dim, m.classes);
        for (int k = 0; k < DATASET_FILES; k++) {
            const struct dataset_file *d = &m.f[k];
            if (!d->present)
                continue;
            add(&t, "dataset %s = %s, %s [%" PRIu64 ", %" PRIu64 "], %" PRIu64 " bytes, xxh3 %016" PRIx64 "\n",
                dataset_file_key[k], d->file, dtype_name(d->dtype), d->rows, d->cols, d->bytes, d->xxh3);
        }
    } else {
        add(&t, "dataset = unreadable (%s)\n", msg);
    }
    char host[MESH_HOST_MAX] = "?";
    gethostname(host, sizeof host - 1);
    add(&t, "@host = %s\n@pid = %d\n@endpoint = %s\n", host, (int)getpid(), c->endpoint);
    return t.s;
}

static void print_note(void *arg, const char *msg)
{
    (void)arg;
    fprintf(stderr, "gnnlaunch: %s\n", msg);
}

int cluster_join(struct cluster *c, const struct config *cfg, uint32_t start_epoch, const uint8_t *blob_in,
                 int cancel_fd, char *run_name, size_t name_len, char *err, size_t errlen)
{
    if (!c->on)
        return 0;
    char *facts = make_facts(c, cfg, start_epoch);
    if (!facts)
        return sl_errf(err, errlen, -ENOMEM, "out of memory");
    char host[MESH_HOST_MAX] = "?", name[MESH_NAME_MAX];
    gethostname(host, sizeof host - 1);
    uint8_t blob[MESH_BLOB_BYTES] = {0};
    if (c->node == 0) {
        /* the run's name; and the opaque blob: the NCCL unique id on GPU runs, else random bytes */
        if (run_name[0])
            snprintf(name, sizeof name, "%s", run_name);
        else
            shm_run_id_new(name, sizeof name);
        size_t got = 0;
        if (blob_in) {
            memcpy(blob, blob_in, sizeof blob);
            got = sizeof blob;
        }
        while (got < sizeof blob) {
            ssize_t n = getrandom(blob + got, sizeof blob - got, 0);
            if (n <= 0)
                break;
            got += (size_t)n;
        }
    }
    struct mesh_params p = {.node = c->node,
                            .nodes = c->nodes,
                            .master = c->master,
                            .timeout_s = c->timeout_s,
                            .facts = facts,
                            .host = host,
                            .endpoint = c->endpoint,
                            .name = name,
                            .blob = blob,
                            .cancel_fd = cancel_fd,
                            .note = print_note};
    int rc = mesh_rendezvous(&c->mesh, &p, err, errlen);
    free(facts);
    if (rc)
        return rc;
    if ((rc = mesh_start(&c->mesh, err, errlen)) != 0)
        return rc;
    c->joined = true;
    /* this node's run directory: <name>-n<I> */
    snprintf(run_name, name_len, "%.*s-n%" PRIu32, CLUSTER_NAME_MAX, c->mesh.name, c->node);
    c->recs = calloc((size_t)CLUSTER_WINDOW * c->nodes * c->ranks, sizeof *c->recs);
    c->have = calloc((size_t)CLUSTER_WINDOW * c->nodes, sizeof *c->have);
    c->ended = calloc(c->nodes, sizeof *c->ended);
    if (!c->recs || !c->have || !c->ended)
        return sl_errf(err, errlen, -ENOMEM, "out of memory");
    c->sent = start_epoch;
    fprintf(stderr, "gnnlaunch: run %s: all %" PRIu32 " nodes joined; this is node %" PRIu32 " (global ranks %" PRIu32
                    "..%" PRIu32 " of %" PRIu32 "), gradients on %s\n",
            c->mesh.name, c->nodes, c->node, c->node * c->ranks, (c->node + 1) * c->ranks - 1, c->nodes * c->ranks,
            c->endpoint);
    return 0;
}

int cluster_write(const struct cluster *c, const char *run_dir, char *err, size_t errlen)
{
    if (!c->on)
        return 0;
    struct trainer_cluster tc = {.node = c->node, .nodes = c->nodes};
    snprintf(tc.run, sizeof tc.run, "%s", c->mesh.name);
    tc.endpoints = calloc(c->nodes, sizeof *tc.endpoints);
    if (!tc.endpoints)
        return sl_errf(err, errlen, -ENOMEM, "out of memory");
    for (uint32_t k = 0; k < c->nodes; k++)
        snprintf(tc.endpoints[k], NETREDUCE_ENDPOINT_MAX, "%s", c->mesh.endpoints[k]);
    memcpy(tc.unique_id, c->mesh.blob, sizeof tc.unique_id);
    int rc = trainer_cluster_write(run_dir, &tc, err, errlen);
    free(tc.endpoints);
    return rc;
}

/* ---- while running --------------------------------------------------------------------- */

void *cluster_pollable(const struct cluster *c)
{
    return c->joined ? mesh_pollable(&c->mesh) : NULL;
}

const uint8_t *cluster_blob(const struct cluster *c)
{
    return c->mesh.blob;
}

bool cluster_joined(const struct cluster *c)
{
    return c->joined;
}

void cluster_abort(struct cluster *c, const char *cause)
{
    if (!c->joined || c->remote_stop || c->fail_sent)
        return;
    c->fail_sent = true;
    mesh_send(&c->mesh, MESH_FAIL, 0, cause, strlen(cause));
}

/* Node k stops the run: from now on this node stops because of another
 * one (no FAIL of its own goes out); the first reason of a poll is kept. */
static void remote_stop(struct cluster *c, struct cluster_stop *stop, enum cluster_stop_kind kind, uint32_t k,
                        const char *text)
{
    c->remote_stop = true;
    if (stop->kind != CLUSTER_GO_ON)
        return;
    stop->kind = kind;
    stop->node = k;
    snprintf(stop->msg, sizeof stop->msg, "node %" PRIu32 " (%s): %s", k, c->mesh.hosts[k], text);
}

static struct results_rec *rec_at(const struct cluster *c, uint64_t e, uint32_t k)
{
    return &c->recs[((size_t)(e % CLUSTER_WINDOW) * c->nodes + k) * c->ranks];
}

/* Node k's records of epoch e (ranks of them); first and epochs as for
 * cluster_poll. */
static void put(struct cluster *c, uint64_t first, uint64_t epochs, uint32_t k, uint64_t e,
                const struct results_rec *recs, size_t len, struct cluster_stop *stop)
{
    char why[256];
    if (len != (size_t)c->ranks * sizeof *recs || e >= epochs) {
        snprintf(why, sizeof why, "sent %zu bytes of results for epoch %" PRIu64 " (expected %zu)", len, e + 1,
                 (size_t)c->ranks * sizeof *recs);
        remote_stop(c, stop, CLUSTER_NODE_INVALID, k, why);
        return;
    }
    if (e < first || e >= first + CLUSTER_WINDOW) {
        if (e >= first) {
            snprintf(why, sizeof why, "sent the results of epoch %" PRIu64 " while epoch %" PRIu64 " is not complete",
                     e + 1, first + 1);
            remote_stop(c, stop, CLUSTER_NODE_INVALID, k, why);
        }
        return; /* already printed: a duplicate */
    }
    memcpy(rec_at(c, e, k), recs, len);
    c->have[(e % CLUSTER_WINDOW) * c->nodes + k] = e + 1;
}

/* This node's epochs that every local rank has published, to the others. */
static void send_epochs(struct cluster *c, const struct results *res, uint64_t first, uint64_t epochs,
                        struct cluster_stop *stop)
{
    if (!res->hdr)
        return;
    struct results_rec *recs = calloc(c->ranks, sizeof *recs);
    if (!recs)
        return;
    while (c->sent < epochs && c->sent < first + CLUSTER_WINDOW) {
        uint32_t r = 0;
        while (r < c->ranks && results_get(res, r, c->sent, &recs[r]))
            r++;
        if (r < c->ranks)
            break;
        mesh_send(&c->mesh, MESH_EPOCH, c->sent, recs, (size_t)c->ranks * sizeof *recs);
        put(c, first, epochs, c->node, c->sent, recs, (size_t)c->ranks * sizeof *recs, stop);
        c->sent++;
    }
    free(recs);
}

bool cluster_poll(struct cluster *c, const struct results *res, uint64_t first, uint64_t epochs,
                  struct cluster_stop *stop)
{
    stop->kind = CLUSTER_GO_ON;
    stop->node = 0;
    stop->msg[0] = '\0';
    if (!c->joined)
        return false;
    send_epochs(c, res, first, epochs, stop);
    struct mesh_event ev;
    int rc;
    while ((rc = mesh_recv(&c->mesh, &ev)) > 0) {
        if (ev.about >= c->nodes)
            continue;
        switch (ev.type) {
        case MESH_EPOCH:
            put(c, first, epochs, ev.about, ev.arg, ev.data, ev.len, stop);
            break;
        case MESH_FAIL:
            remote_stop(c, stop, ev.lost ? CLUSTER_NODE_GONE : CLUSTER_NODE_FAILED, ev.about, ev.data);
            break;
        case MESH_REFUSE: /* node 0: a launcher knocked after the start */
            fprintf(stderr, "%sgnnlaunch: %s\n", sl_err_line_start(), (const char *)ev.data);
            break;
        case MESH_END: {
            double s = 0;
            if (ev.len == sizeof s)
                memcpy(&s, ev.data, sizeof s);
            c->ended[ev.about] = true;
            c->seconds = SL_MAX(c->seconds, s);
            break;
        }
        default:
            break;
        }
    }
    return stop->kind != CLUSTER_GO_ON;
}

bool cluster_epoch(const struct cluster *c, const struct results *res, uint64_t first, uint64_t e,
                   struct results_rec *sum)
{
    if (!c->joined)
        return results_epoch(res, e, sum);
    memset(sum, 0, sizeof *sum);
    if (e < first || e >= first + CLUSTER_WINDOW)
        return false;
    for (uint32_t k = 0; k < c->nodes; k++)
        if (c->have[(e % CLUSTER_WINDOW) * c->nodes + k] != e + 1)
            return false;
    for (uint32_t k = 0; k < c->nodes; k++) /* global rank order: node-major */
        for (uint32_t r = 0; r < c->ranks; r++)
            results_rec_add(sum, &rec_at(c, e, k)[r]);
    atomic_store_explicit(&sum->seq, e + 1, memory_order_relaxed);
    return true;
}

bool cluster_all_ended(const struct cluster *c)
{
    for (uint32_t k = 0; k < c->nodes; k++)
        if (!c->ended[k])
            return false;
    return true;
}

void cluster_mark_end(struct cluster *c, double seconds)
{
    if (!c->joined)
        return;
    c->seconds = SL_MAX(c->seconds, seconds);
    c->ended[c->node] = true;
}

void cluster_send_end(struct cluster *c, double seconds)
{
    if (!c->joined)
        return;
    mesh_send(&c->mesh, MESH_END, 0, &seconds, sizeof seconds);
    c->end_sent = true;
}

double cluster_seconds(const struct cluster *c, double local)
{
    return c->joined && c->end_sent ? c->seconds : local;
}

void cluster_free(struct cluster *c)
{
    mesh_free(&c->mesh);
    free(c->recs);
    free(c->have);
    free(c->ended);
    c->recs = NULL;
    c->have = NULL;
    c->ended = NULL;
    c->joined = false;
}
