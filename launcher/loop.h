/* loop.h - a small single-threaded event loop: file descriptors, ZeroMQ
 * sockets and timers, each registered with a callback, dispatched from one
 * poll() until a callback sets a stop cause. gnnlaunch's supervision
 * (supervise.c) is built on it; it knows nothing of the launcher.
 *
 * Rounds. loop_run repeats: work out the poll timeout (the earliest timer
 * due; 0 when a ZeroMQ source already holds a message), poll(), then call
 * the callbacks of the ready sources: first the descriptors and sockets,
 * then the timers due, each group in the order of their ids. A round whose
 * callbacks set a stop cause (loop_stop) still finishes; loop_run then
 * returns the cause. A cause set before loop_run is called makes it return
 * at once, without polling.
 *
 * Sources. An id (>= 0) names a source until loop_remove; a later source
 * may get the id again. A callback may add and remove sources, itself
 * included: a removed source is not called again, one added during a
 * round is first considered in the next round.
 *
 * Timers run on CLOCK_MONOTONIC and never fire early. A periodic timer
 * keeps its grid (first + k x period); one that fell behind by several
 * periods fires once, like a timerfd read that counts several ticks. A
 * one-shot timer (period 0) is removed before its callback runs.
 *
 * ZeroMQ sockets are polled through their ZMQ_FD, which only signals that
 * ZMQ_EVENTS may have changed; the loop reads ZMQ_EVENTS before every poll
 * and after it, and calls the callback while the socket is readable. A
 * callback should read until EAGAIN (else it is called again at once).
 *
 * Not thread-safe: one thread owns a loop and all its sources. */
#ifndef SLUICE_LAUNCHER_LOOP_H
#define SLUICE_LAUNCHER_LOOP_H

#include <poll.h>
#include <stdbool.h>

struct loop;

/* A source's callback. id: the source's; revents: poll()'s revents for a
 * descriptor, POLLIN for a ZeroMQ socket, 0 for a timer. */
typedef void (*loop_fn)(struct loop *lp, int id, short revents, void *ctx);

enum loop_kind { LOOP_FREE = 0, LOOP_FD, LOOP_ZMQ, LOOP_TIMER };

struct loop_source {
    enum loop_kind kind; /* LOOP_FREE: an unused slot */
    int fd;              /* LOOP_FD, LOOP_ZMQ (its ZMQ_FD); -1 for a timer */
    short events;        /* LOOP_FD: what to poll for */
    void *socket;        /* LOOP_ZMQ */
    double due, period;  /* LOOP_TIMER: next firing (monotonic seconds), period (0: once) */
    loop_fn fn;
    void *ctx;
    short ready; /* within a round: revents to hand over, 0 when not ready */
};

struct loop {
    struct loop_source *src; /* (cap) indexed by id */
    int cap;
    struct pollfd *pfd; /* (cap) poll()'s array, rebuilt each round */
    int *pfd_id;        /* (cap) the source of each pfd entry */
    int cause;          /* > 0 once loop_stop was called */
};

/* An empty loop. Never fails (no allocation until a source is added). */
void loop_init(struct loop *lp);

/* Frees the loop's tables; the descriptors and sockets stay the caller's.
 * Accepts a zeroed loop. */
void loop_free(struct loop *lp);

/* Calls fn when poll() reports one of events (POLLIN, POLLOUT) on fd, or
 * POLLERR/POLLHUP. The id, or -EINVAL (fd < 0), -ENOMEM. */
int loop_add_fd(struct loop *lp, int fd, short events, loop_fn fn, void *ctx);

/* Calls fn while the ZeroMQ socket has a message to read (ZMQ_EVENTS has
 * ZMQ_POLLIN). The id, or -errno (ZMQ_FD cannot be read), -ENOMEM. */
int loop_add_zmq(struct loop *lp, void *socket, loop_fn fn, void *ctx);

/* Calls fn first after delay_s seconds (<= 0: in the next round), then
 * every period_s seconds (0: only once, then the timer is removed). The
 * id, or -EINVAL (a negative or non-finite period), -ENOMEM. */
int loop_add_timer(struct loop *lp, double delay_s, double period_s, loop_fn fn, void *ctx);

/* Removes a source; an id that names none is ignored. Never blocks. */
void loop_remove(struct loop *lp, int id);

/* Sets the stop cause (> 0; the first one set stays): loop_run returns it
 * once the current round is done. */
void loop_stop(struct loop *lp, int cause);

/* Whether a stop cause is set. */
bool loop_stopping(const struct loop *lp);

/* Runs rounds (above) until a stop cause is set, and returns it; or
 * -errno when poll() fails other than with EINTR. Blocks. */
int loop_run(struct loop *lp);

#endif
