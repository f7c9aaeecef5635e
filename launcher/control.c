/* control.c - the launcher's ZeroMQ REP (status, stop) and PUB (metrics
 * once a second) sockets, and the JSON run snapshot both send (protocol in
 * control.h; docs/architecture.md). */
#include "launcher/control.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#include "core/util.h"
#include "ipc/metrics.h"
#include "launcher/launch.h"

/* Fail fast on a ZeroMQ setup call that returned -1 (or NULL): print the
 * statement, function, file, line and zmq's error, and exit(2). */
#define ZMQ_CHECK(stmt)                                                                                                \
    do {                                                                                                               \
        if ((stmt) == -1)                                                                                              \
            zmq_fail(#stmt, __func__, __FILE__, __LINE__);                                                             \
    } while (0)
#define ZMQ_CHECK_PTR(stmt)                                                                                            \
    do {                                                                                                               \
        if ((stmt) == NULL)                                                                                            \
            zmq_fail(#stmt, __func__, __FILE__, __LINE__);                                                             \
    } while (0)

static _Noreturn void zmq_fail(const char *stmt, const char *func, const char *file, int line)
{
    int e = zmq_errno();
    fprintf(stderr, "gnnlaunch: ZeroMQ call failed: %s in %s (%s:%d): %s\n", stmt, func, file, line, zmq_strerror(e));
    exit(2);
}

#ifdef __SANITIZE_THREAD__
/* libzmq is not built with TSan: its I/O thread and the caller hand work
 * over through lock-free pipes and eventfds TSan cannot see, so it reports
 * races between libzmq's own frames. Only those are silenced; this file
 * touches its sockets from the main thread alone. */
const char *__tsan_default_suppressions(void);
const char *__tsan_default_suppressions(void)
{
    return "race:libzmq.so\n";
}
#endif

/* zmq_bind() creates an ipc:// socket file with the mode the umask leaves
 * (0777 under umask 0). Other users are already kept out by the run
 * directory (0700: they cannot reach anything inside it); the sockets are
 * made 0600 as well, so that they stay private should the directory ever
 * be opened up. A failure is only reported: the directory still protects. */
static void socket_private(const char *endpoint)
{
    const char *path = endpoint + strlen("ipc://");
    if (chmod(path, 0600) != 0)
        fprintf(stderr, "gnnlaunch: warning: cannot make %s private (chmod 0600): %s\n", path, strerror(errno));
}

void control_open(struct control *c, const char *run_dir)
{
    memset(c, 0, sizeof *c);
    snprintf(c->rep_endpoint, sizeof c->rep_endpoint, "ipc://%s/" RUNDIR_CONTROL, run_dir);
    snprintf(c->pub_endpoint, sizeof c->pub_endpoint, "ipc://%s/" RUNDIR_METRICS, run_dir);
    int zero = 0;
    ZMQ_CHECK_PTR(c->ctx = zmq_ctx_new());
    ZMQ_CHECK(zmq_ctx_set(c->ctx, ZMQ_IO_THREADS, 1));
    ZMQ_CHECK_PTR(c->rep = zmq_socket(c->ctx, ZMQ_REP));
    ZMQ_CHECK(zmq_setsockopt(c->rep, ZMQ_LINGER, &zero, sizeof zero));
    ZMQ_CHECK(zmq_bind(c->rep, c->rep_endpoint));
    ZMQ_CHECK_PTR(c->pub = zmq_socket(c->ctx, ZMQ_PUB));
    ZMQ_CHECK(zmq_setsockopt(c->pub, ZMQ_LINGER, &zero, sizeof zero));
    ZMQ_CHECK(zmq_bind(c->pub, c->pub_endpoint));
    socket_private(c->rep_endpoint);
    socket_private(c->pub_endpoint);
}

/* How long closing waits for a reply still queued on the REP socket: the
 * answer to "stop" is often still there when the run has already ended. */
#define CONTROL_LINGER_MS 1000

void control_close(struct control *c)
{
    if (!c)
        return;
    if (c->rep) {
        int linger = CONTROL_LINGER_MS;
        zmq_setsockopt(c->rep, ZMQ_LINGER, &linger, sizeof linger);
        zmq_close(c->rep);
    }
    if (c->pub)
        zmq_close(c->pub);
    if (c->ctx)
        zmq_ctx_term(c->ctx);
    c->rep = c->pub = c->ctx = NULL;
}

/* ---- JSON ------------------------------------------------------------------------ */

/* A growing string; on allocation failure it stays failed and appends
 * nothing. */
struct sbuf {
    char *p;
    size_t len, cap;
    bool failed;
};

static void sb_printf(struct sbuf *b, const char *fmt, ...) SL_PRINTF(2, 3);
static void sb_printf(struct sbuf *b, const char *fmt, ...)
{
    if (b->failed)
        return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(b->p ? b->p + b->len : NULL, b->p ? b->cap - b->len : 0, fmt, ap);
        va_end(ap);
        if (n < 0) {
            b->failed = true;
            return;
        }
        if (b->p && b->len + (size_t)n < b->cap) {
            b->len += (size_t)n;
            return;
        }
        size_t cap = SL_MAX(b->cap * 2, b->len + (size_t)n + 256);
        char *q = realloc(b->p, cap);
        if (!q) {
            b->failed = true;
            return;
        }
        b->p = q;
        b->cap = cap;
    }
}

/* Appends s as a JSON string (quotes included). */
static void sb_string(struct sbuf *b, const char *s)
{
    sb_printf(b, "\"");
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\')
            sb_printf(b, "\\%c", *p);
        else if (*p < 0x20)
            sb_printf(b, "\\u%04x", *p);
        else
            sb_printf(b, "%c", *p);
    }
    sb_printf(b, "\"");
}

static const char *block_state(uint32_t s)
{
    switch (s) {
    case METRICS_FREE:
        return "starting";
    case METRICS_RUNNING:
        return "running";
    case METRICS_DONE:
        return "done";
    case METRICS_FAILED:
        return "failed";
    }
    return "unknown";
}

static void process_json(struct sbuf *b, const struct spawn_child *c, const struct metrics_snapshot *m, uint64_t now_ns)
{
    sb_printf(b, "{\"stage\":");
    sb_string(b, run_stage_program(c->stage));
    sb_printf(b, ",\"name\":");
    sb_string(b, run_stage_name(c->stage));
    sb_printf(b, ",\"rank\":%d,\"pid\":%ld,\"alive\":%s,\"exit\":", c->rank, (long)c->pid,
              c->running ? "true" : "false");
    if (!c->running && c->pid > 0) {
        char how[128];
        spawn_describe_status(c->status, how, sizeof how);
        sb_string(b, how);
        if (WIFEXITED(c->status))
            sb_printf(b, ",\"exit_status\":%d,\"exit_signal\":null", WEXITSTATUS(c->status));
        else
            sb_printf(b, ",\"exit_status\":null,\"exit_signal\":%d", WIFSIGNALED(c->status) ? WTERMSIG(c->status) : 0);
    } else {
        sb_printf(b, "null,\"exit_status\":null,\"exit_signal\":null");
    }
    /* a block is only believed once its owner is the child we started */
    bool claimed = m && m->state != METRICS_FREE && m->pid == (int32_t)c->pid;
    sb_printf(b, ",\"state\":\"%s\"", claimed ? block_state(m->state) : "starting");
    if (!claimed) {
        sb_printf(b, ",\"busy_ns\":0,\"wait_ns\":0,\"items\":0,\"bytes\":0,\"io_ops\":0,\"errors\":0,"
                     "\"heartbeat_age_s\":null}");
        return;
    }
    double age = m->heartbeat_ns && now_ns > m->heartbeat_ns ? (double)(now_ns - m->heartbeat_ns) / 1e9 : 0.0;
    sb_printf(b,
              ",\"busy_ns\":%" PRIu64 ",\"wait_ns\":%" PRIu64 ",\"items\":%" PRIu64 ",\"bytes\":%" PRIu64
              ",\"io_ops\":%" PRIu64 ",\"errors\":%" PRIu64 ",\"heartbeat_age_s\":%.3f}",
              m->busy_ns, m->wait_ns, m->items, m->bytes, m->io_ops, m->errors, age);
}

/* featbuf_stats_try attempts before a snapshot gives up on a rank's
 * feature buffer, FEATBUF_RETRY_NS apart (about 1 ms in all; the lock is
 * held for well under a microsecond unless its holder is stopped). */
#define FEATBUF_TRIES 20
#define FEATBUF_RETRY_NS 50000L

static int featbuf_peek(struct featbuf *fb, struct featbuf_stats *st)
{
    for (int i = 1;; i++) {
        int rc = featbuf_stats_try(fb, st);
        if (rc != -EBUSY || i == FEATBUF_TRIES)
            return rc;
        nanosleep(&(struct timespec){.tv_nsec = FEATBUF_RETRY_NS}, NULL);
    }
}

/* {"rank", "queues": {"extract"|"train"|"release": {"used", "capacity",
 * "closed"}}, "featbuf": {...} or null} of one rank. */
static void rank_json(struct sbuf *b, const struct launch *l, int rank)
{
    sb_printf(b, "{\"rank\":%d,\"queues\":{", rank);
    for (int q = 0; q < RUN_QUEUES; q++) {
        struct ring *r = layout_queue(&l->layout, rank, (enum run_queue)q);
        sb_printf(b, "%s\"%s\":", q ? "," : "", run_queue_name((enum run_queue)q));
        if (r)
            sb_printf(b, "{\"used\":%" PRIu64 ",\"capacity\":%" PRIu32 ",\"closed\":%s}",
                      SL_MIN(ring_count(r), (uint64_t)r->capacity), r->capacity, ring_is_closed(r) ? "true" : "false");
        else
            sb_printf(b, "null");
    }
    sb_printf(b, "},\"featbuf\":");
    /* the last snapshot each rank's buffer gave: answered again (marked
     * stale) when its lock stays busy through the tries, rather than none
     * (a loaded machine can keep a holder off the CPU for milliseconds) */
    static struct featbuf_stats last[RUN_RANKS_MAX];
    static bool have[RUN_RANKS_MAX];
    struct featbuf *fb = layout_featbuf(&l->layout, rank);
    struct featbuf_stats st;
    bool known = rank >= 0 && rank < RUN_RANKS_MAX, stale = false;
    int rc = fb ? featbuf_peek(fb, &st) : -ENOENT;
    if (rc == 0 && known) {
        last[rank] = st;
        have[rank] = true;
    } else if (rc == -EBUSY && known && have[rank]) {
        st = last[rank];
        stale = true;
        rc = 0;
    }
    if (rc == 0)
        sb_printf(b,
                  "{\"slots\":%" PRIu32 ",\"standby\":%" PRIu32 ",\"hits\":%" PRIu64 ",\"waits\":%" PRIu64
                  ",\"loads\":%" PRIu64 ",\"evictions\":%" PRIu64 ",\"failed\":%" PRIu64 ",\"stale\":%s}}",
                  fb->nslots, st.standby, st.hits, st.waits, st.loads, st.evictions, st.failed,
                  stale ? "true" : "false");
    else
        sb_printf(b, "null}");
}

/* {"current", "total", "done", "start", "published": [per rank]}. */
static void epoch_json(struct sbuf *b, const struct launch *l)
{
    uint64_t total = l->cfg.train.epochs > 0 ? (uint64_t)l->cfg.train.epochs : 0;
    uint64_t pub[RUN_RANKS_MAX], least = l->prog.epochs_done;
    int n = 0;
    const struct results *res = &l->layout.results;
    for (; res->hdr && n < l->ranks && n < RUN_RANKS_MAX && (uint32_t)n < res->ranks; n++) {
        /* the records past the printed ones that rank n has filled */
        uint64_t e = l->prog.next_epoch, w = RESULTS_WINDOW;
        while (e < total && e < l->prog.next_epoch + w &&
               atomic_load_explicit(&res->recs[(uint64_t)n * w + e % w].seq, memory_order_acquire) == e + 1)
            e++;
        pub[n] = e;
        least = n ? SL_MIN(least, e) : e;
    }
    sb_printf(b,
              "{\"current\":%" PRIu64 ",\"total\":%" PRIu64 ",\"done\":%" PRIu64 ",\"start\":%" PRIu32
              ",\"published\":[",
              SL_MIN(least + 1, total), total, l->prog.epochs_done, l->start_epoch);
    for (int k = 0; k < n; k++)
        sb_printf(b, "%s%" PRIu64, k ? "," : "", pub[k]);
    sb_printf(b, "]}");
}

char *control_snapshot_json(const struct launch *l, size_t *len)
{
    struct sbuf b = {0};
    uint32_t nb = l->layout.metrics.nblocks;
    struct metrics_snapshot *snap = nb ? calloc(nb, sizeof *snap) : NULL;
    uint32_t got = snap ? metrics_snapshot(&l->layout.metrics, snap, nb) : 0;
    uint64_t now_ns = sl_now_ns();

    sb_printf(&b, "{\"run_id\":");
    sb_string(&b, l->run_id);
    sb_printf(&b, ",\"name\":");
    sb_string(&b, l->dir.name);
    sb_printf(&b, ",\"pid\":%ld,\"state\":\"%s\",\"uptime_s\":%.3f,\"ranks\":%d,\"processes\":[", (long)getpid(),
              l->phase == LAUNCH_RUNNING ? "running" : "stopping", sl_now() - l->t_start, l->ranks);
    for (int i = 0; i < l->nchildren; i++) {
        const struct spawn_child *c = &l->children[i];
        uint32_t blk = run_block(c->rank, c->stage);
        if (i)
            sb_printf(&b, ",");
        process_json(&b, c, blk < got ? &snap[blk] : NULL, now_ns);
    }
    sb_printf(&b, "],\"epoch\":");
    epoch_json(&b, l);
    sb_printf(&b, ",\"rank_stats\":[");
    for (int r = 0; r < l->ranks; r++) {
        if (r)
            sb_printf(&b, ",");
        rank_json(&b, l, r);
    }
    sb_printf(&b, "]}");
    free(snap);
    if (b.failed) {
        free(b.p);
        return NULL;
    }
    *len = b.len;
    return b.p;
}

/* ---- serving ----------------------------------------------------------------------- */

static void reply(struct control *c, const char *text, size_t len)
{
    if (zmq_send(c->rep, text, len, 0) < 0)
        fprintf(stderr, "gnnlaunch: warning: cannot answer a control request: %s\n", zmq_strerror(zmq_errno()));
}

enum control_request control_serve(struct control *c, const struct launch *l)
{
    enum control_request result = CONTROL_NONE;
    for (;;) {
        char req[64];
        int n = zmq_recv(c->rep, req, sizeof req - 1, ZMQ_DONTWAIT);
        if (n < 0) {
            int e = zmq_errno();
            if (e != EAGAIN && e != EINTR)
                fprintf(stderr, "gnnlaunch: warning: control socket: %s\n", zmq_strerror(e));
            return result;
        }
        /* drop any further frames of a multi-part request */
        int more = 0;
        size_t ml = sizeof more;
        while (zmq_getsockopt(c->rep, ZMQ_RCVMORE, &more, &ml) == 0 && more) {
            char junk[64];
            if (zmq_recv(c->rep, junk, sizeof junk, 0) < 0)
                break;
        }
        size_t len = (size_t)n < sizeof req - 1 ? (size_t)n : sizeof req - 1;
        req[len] = '\0';
        while (len && (req[len - 1] == '\n' || req[len - 1] == '\r' || req[len - 1] == ' '))
            req[--len] = '\0';
        if (!strcmp(req, "status")) {
            size_t jl;
            char *js = control_snapshot_json(l, &jl);
            static const char oom[] = "{\"ok\":false,\"error\":\"out of memory\"}";
            if (js)
                reply(c, js, jl);
            else
                reply(c, oom, sizeof oom - 1);
            free(js);
        } else if (!strcmp(req, "stop")) {
            static const char ok[] = "{\"ok\":true,\"state\":\"stopping\"}";
            reply(c, ok, sizeof ok - 1);
            result = CONTROL_STOP;
        } else {
            struct sbuf b = {0};
            sb_printf(&b, "{\"ok\":false,\"error\":");
            char msg[160];
            snprintf(msg, sizeof msg, "unknown request '%.40s'; send status or stop", req);
            sb_string(&b, msg);
            sb_printf(&b, "}");
            reply(c, b.failed ? "{}" : b.p, b.failed ? 2 : b.len);
            free(b.p);
        }
    }
}

void control_publish(struct control *c, const struct launch *l)
{
    size_t len;
    char *js = control_snapshot_json(l, &len);
    if (!js)
        return;
    if (zmq_send(c->pub, js, len, ZMQ_DONTWAIT) < 0 && zmq_errno() != EAGAIN && !c->send_failed_once) {
        c->send_failed_once = true;
        fprintf(stderr, "gnnlaunch: warning: cannot publish metrics: %s\n", zmq_strerror(zmq_errno()));
    }
    free(js);
}
