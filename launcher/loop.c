/* loop.c - the launcher's event loop (contract in loop.h): one poll() over
 * descriptors and ZeroMQ sockets' ZMQ_FDs, with timers kept as monotonic
 * deadlines that bound the poll timeout. */
#include "launcher/loop.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <zmq.h>

static double mono_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

void loop_init(struct loop *lp)
{
    memset(lp, 0, sizeof *lp);
}

void loop_free(struct loop *lp)
{
    if (!lp)
        return;
    free(lp->src);
    free(lp->pfd);
    free(lp->pfd_id);
    memset(lp, 0, sizeof *lp);
}

/* A free slot (grown when there is none), cleared. Its id or -ENOMEM. */
static int new_source(struct loop *lp)
{
    for (int i = 0; i < lp->cap; i++)
        if (lp->src[i].kind == LOOP_FREE) {
            memset(&lp->src[i], 0, sizeof lp->src[i]);
            return i;
        }
    int cap = lp->cap ? lp->cap * 2 : 8;
    struct loop_source *src = realloc(lp->src, (size_t)cap * sizeof *src);
    if (!src)
        return -ENOMEM;
    lp->src = src;
    struct pollfd *pfd = realloc(lp->pfd, (size_t)cap * sizeof *pfd);
    if (!pfd)
        return -ENOMEM;
    lp->pfd = pfd;
    int *pfd_id = realloc(lp->pfd_id, (size_t)cap * sizeof *pfd_id);
    if (!pfd_id)
        return -ENOMEM;
    lp->pfd_id = pfd_id;
    memset(&lp->src[lp->cap], 0, (size_t)(cap - lp->cap) * sizeof *src);
    int id = lp->cap;
    lp->cap = cap;
    return id;
}

int loop_add_fd(struct loop *lp, int fd, short events, loop_fn fn, void *ctx)
{
    if (fd < 0 || !fn)
        return -EINVAL;
    int id = new_source(lp);
    if (id < 0)
        return id;
    lp->src[id] = (struct loop_source){.kind = LOOP_FD, .fd = fd, .events = events, .fn = fn, .ctx = ctx};
    return id;
}

int loop_add_zmq(struct loop *lp, void *socket, loop_fn fn, void *ctx)
{
    int fd = -1;
    size_t len = sizeof fd;
    if (!socket || !fn)
        return -EINVAL;
    if (zmq_getsockopt(socket, ZMQ_FD, &fd, &len) != 0)
        return -zmq_errno();
    int id = new_source(lp);
    if (id < 0)
        return id;
    lp->src[id] =
        (struct loop_source){.kind = LOOP_ZMQ, .fd = fd, .events = POLLIN, .socket = socket, .fn = fn, .ctx = ctx};
    return id;
}

int loop_add_timer(struct loop *lp, double delay_s, double period_s, loop_fn fn, void *ctx)
{
    if (!fn || !isfinite(delay_s) || !isfinite(period_s) || period_s < 0)
        return -EINVAL;
    int id = new_source(lp);
    if (id < 0)
        return id;
    lp->src[id] = (struct loop_source){.kind = LOOP_TIMER,
                                       .fd = -1,
                                       .due = mono_now() + (delay_s > 0 ? delay_s : 0),
                                       .period = period_s,
                                       .fn = fn,
                                       .ctx = ctx};
    return id;
}

void loop_remove(struct loop *lp, int id)
{
    if (id >= 0 && id < lp->cap)
        memset(&lp->src[id], 0, sizeof lp->src[id]); /* LOOP_FREE, not ready */
}

void loop_stop(struct loop *lp, int cause)
{
    if (!lp->cause && cause > 0)
        lp->cause = cause;
}

bool loop_stopping(const struct loop *lp)
{
    return lp->cause > 0;
}

/* Whether a ZeroMQ socket has a message now. Reading ZMQ_EVENTS also
 * processes the socket's pending commands, which re-arms its ZMQ_FD. */
static bool zmq_readable(void *socket)
{
    int ev = 0;
    size_t len = sizeof ev;
    return zmq_getsockopt(socket, ZMQ_EVENTS, &ev, &len) == 0 && (ev & ZMQ_POLLIN);
}

/* One round: poll, mark the ready sources, call them. 0 or -errno. */
static int round_once(struct loop *lp)
{
    int n = 0;
    bool now_ready = false;
    double next = INFINITY;
    for (int i = 0; i < lp->cap; i++) {
        struct loop_source *s = &lp->src[i];
        s->ready = 0;
        if (s->kind == LOOP_TIMER) {
            next = fmin(next, s->due);
        } else if (s->kind == LOOP_FD || s->kind == LOOP_ZMQ) {
            if (s->kind == LOOP_ZMQ && zmq_readable(s->socket))
                now_ready = true;
            lp->pfd[n] = (struct pollfd){.fd = s->fd, .events = s->events};
            lp->pfd_id[n++] = i;
        }
    }
    int timeout = -1;
    if (now_ready) {
        timeout = 0;
    } else if (isfinite(next)) {
        double ms = ceil((next - mono_now()) * 1000.0);
        timeout = ms <= 0 ? 0 : ms >= (double)INT32_MAX ? INT32_MAX : (int)ms;
    }
    if (poll(lp->pfd, (nfds_t)n, timeout) < 0)
        return errno == EINTR ? 0 : -errno;
    for (int k = 0; k < n; k++) {
        struct loop_source *s = &lp->src[lp->pfd_id[k]];
        if (s->kind == LOOP_FD)
            s->ready = lp->pfd[k].revents;
        else if (zmq_readable(s->socket))
            s->ready = POLLIN;
    }
    double now = mono_now();
    for (int i = 0; i < lp->cap; i++)
        if (lp->src[i].kind == LOOP_TIMER && lp->src[i].due <= now)
            lp->src[i].ready = 1;
    /* descriptors and sockets, then timers; a slot is re-read after every
     * call, since a callback may have removed it (or reused it: then its
     * ready mark was cleared) or grown the table */
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < lp->cap; i++) {
            struct loop_source *s = &lp->src[i];
            if (!s->ready || (s->kind == LOOP_TIMER) != (pass == 1))
                continue;
            short revents = s->kind == LOOP_TIMER ? 0 : s->ready;
            s->ready = 0;
            loop_fn fn = s->fn;
            void *ctx = s->ctx;
            if (s->kind == LOOP_TIMER) {
                if (s->period > 0)
                    while (s->due <= now)
                        s->due += s->period;
                else
                    loop_remove(lp, i);
            }
            fn(lp, i, revents, ctx);
        }
    return 0;
}

int loop_run(struct loop *lp)
{
    while (!lp->cause) {
        int rc = round_once(lp);
        if (rc < 0)
            return rc;
    }
    return lp->cause;
}
