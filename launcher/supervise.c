/* supervise.c - the launcher's supervision loop (DESIGN.md section 8).
 *
 * One thread and one zmq_poll() over three sources:
 *   - a signalfd for SIGCHLD, SIGINT, SIGTERM and SIGHUP, which main()
 *     blocked before any thread existed, so they arrive only here;
 *   - the REP control socket (status, stop);
 *   - a 1 s timerfd: publish the snapshot on the PUB socket;
 *   - on a multi-node run, the mesh's pipe: results and failures of the
 *     other nodes (cluster.h). A failure there stops this node's run like
 *     a failing stage; a stop here is announced to them (cluster_stopping).
 * While stopping, the poll timeout is cut to the SIGKILL deadline.
 *
 * Rules. A stage that exits non-zero or by a signal while the run is
 * running fails the run. So does a consumer stage (extractor, trainer,
 * releaser) that exits 0 before its input queue reached end of stream
 * (closed and empty): its producer would otherwise block forever. The
 * run ends well when every stage has exited 0 by itself. Failure, SIGINT,
 * SIGTERM, SIGHUP and a "stop" request all start the same stop
 * (launch_stop): close every queue so blocked stages wake with -EPIPE,
 * unlink the run's segments (mappings stay valid until the stages unmap),
 * SIGTERM every stage, SIGKILL those still there LAUNCH_GRACE_S later, and
 * reap them all. A second interrupt while stopping SIGKILLs at once. How
 * stages end after the stop began does not change the outcome. */
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zmq.h>

#include "core/util.h"
#include "launcher/launch.h"

int launch_exit_code(enum launch_outcome o)
{
    switch (o) {
    case LAUNCH_OK:
        return 0;
    case LAUNCH_FAILED:
        return 3;
    case LAUNCH_INTERRUPTED:
    case LAUNCH_STOP_REQUESTED:
        return 130;
    }
    return 3;
}

void launch_stop(struct launch *l, enum launch_outcome outcome, const char *cause)
{
    if (l->phase != LAUNCH_RUNNING && l->phase != LAUNCH_SETUP)
        return;
    l->phase = LAUNCH_STOPPING;
    l->outcome = outcome;
    snprintf(l->cause, sizeof l->cause, "%s", cause);
    if (l->nchildren)
        fprintf(stderr, "%sgnnlaunch: %s; stopping the run\n", sl_err_line_start(), cause);
    layout_close(&l->layout);
    if (l->run_id[0])
        shm_run_unlink(l->run_id);
    for (int i = 0; i < l->nchildren; i++)
        spawn_signal(&l->children[i], SIGTERM);
    l->kill_at = sl_now() + LAUNCH_GRACE_S;
    cluster_stopping(l); /* the other nodes of a multi-node run stop too */
}

/* A consumer that exited 0: did it see its input's end of stream? */
static bool drained_input(const struct launch *l, const struct spawn_child *c, char *why, size_t len)
{
    int q = run_stage_input(c->stage);
    const struct ring *r = q >= 0 ? layout_queue(&l->layout, c->rank, (enum run_queue)q) : NULL;
    if (!r)
        return true;
    bool closed = ring_is_closed(r);
    uint64_t left = ring_count(r);
    if (closed && left == 0)
        return true;
    snprintf(why, len, "before the end of its input queue r%d.%s (%s, %llu batches queued)", c->rank,
             run_queue_name((enum run_queue)q), closed ? "closed" : "still open", (unsigned long long)left);
    return false;
}

/* Looks at every child reaped since the last call. */
static void note_endings(struct launch *l)
{
    for (int i = 0; i < l->nchildren; i++) {
        struct spawn_child *c = &l->children[i];
        if (c->running || c->pid <= 0 || c->noted)
            continue;
        c->noted = true;
        char who[128], how[160], msg[640];
        spawn_describe_child(c, who, sizeof who);
        spawn_describe_status(c->status, how, sizeof how);
        if (l->phase == LAUNCH_RUNNING) {
            char why[256];
            if (WIFEXITED(c->status) && WEXITSTATUS(c->status) == 0) {
                if (drained_input(l, c, why, sizeof why))
                    continue;
                snprintf(msg, sizeof msg, "%s %s %s", who, how, why);
            } else {
                snprintf(msg, sizeof msg, "%s %s", who, how);
            }
            launch_stop(l, LAUNCH_FAILED, msg);
        } else if (WIFSIGNALED(c->status) && !(WTERMSIG(c->status) == SIGTERM && c->term_sent) &&
                   !(WTERMSIG(c->status) == SIGKILL && c->kill_sent)) {
            fprintf(stderr, "gnnlaunch: warning: %s %s while the run was stopping\n", who, how);
        }
    }
}

static void handle_signals(struct launch *l)
{
    struct signalfd_siginfo si;
    for (;;) {
        ssize_t n = read(l->sigfd, &si, sizeof si);
        if (n != (ssize_t)sizeof si)
            break;
        int sig = (int)si.ssi_signo;
        if (sig == SIGCHLD)
            continue; /* reaped below */
        if (l->phase == LAUNCH_RUNNING) {
            char cause[64];
            snprintf(cause, sizeof cause, "interrupted by SIG%s", sigabbrev_np(sig));
            launch_stop(l, LAUNCH_INTERRUPTED, cause);
        } else if (l->phase == LAUNCH_STOPPING && sl_now() < l->kill_at) {
            fprintf(stderr, "gnnlaunch: SIG%s again while stopping: killing the remaining stages now\n",
                    sigabbrev_np(sig));
            l->kill_at = sl_now();
            l->hurry = true;
        }
    }
    /* SIGCHLDs merge: reap on every wake-up so none is missed */
    spawn_reap(l->children, l->nchildren, NULL);
    note_endings(l);
}

static void kill_overdue(struct launch *l)
{
    if (l->phase != LAUNCH_STOPPING || sl_now() < l->kill_at)
        return;
    for (int i = 0; i < l->nchildren; i++) {
        struct spawn_child *c = &l->children[i];
        if (!c->running || c->kill_sent)
            continue;
        char who[128];
        spawn_describe_child(c, who, sizeof who);
        if (l->hurry)
            fprintf(stderr, "gnnlaunch: sending SIGKILL to %s\n", who);
        else
            fprintf(stderr, "gnnlaunch: %s did not exit within %.0f s of SIGTERM; sending SIGKILL\n", who,
                    LAUNCH_GRACE_S);
        spawn_signal(c, SIGKILL);
    }
}

/* Poll timeout in ms: until the SIGKILL deadline while one is pending. */
static long poll_timeout(const struct launch *l)
{
    if (l->phase != LAUNCH_STOPPING)
        return -1;
    for (int i = 0; i < l->nchildren; i++)
        if (l->children[i].running && !l->children[i].kill_sent) {
            double ms = ceil((l->kill_at - sl_now()) * 1000.0);
            return ms < 0 ? 0 : (long)ms;
        }
    return -1;
}

int supervise(struct launch *l)
{
    zmq_pollitem_t items[4] = {
        {.socket = l->ctl.rep, .events = ZMQ_POLLIN},
        {.socket = NULL, .fd = l->sigfd, .events = ZMQ_POLLIN},
        {.socket = NULL, .fd = l->timerfd, .events = ZMQ_POLLIN},
        {.socket = cluster_pollable(l), .events = ZMQ_POLLIN}, /* the other nodes (cluster.h) */
    };
    int nitems = items[3].socket ? 4 : 3;
    spawn_reap(l->children, l->nchildren, NULL);
    note_endings(l);
    while (spawn_running(l->children, l->nchildren) > 0) {
        int n = zmq_poll(items, nitems, poll_timeout(l));
        if (n < 0) {
            int e = zmq_errno();
            if (e == EINTR)
                continue;
            char cause[256];
            snprintf(cause, sizeof cause, "the launcher's poll failed: %s", zmq_strerror(e));
            launch_stop(l, LAUNCH_FAILED, cause);
            l->kill_at = sl_now(); /* cannot wait properly any more */
            kill_overdue(l);
            for (int i = 0; i < l->nchildren; i++)
                spawn_wait(&l->children[i]);
            break;
        }
        if (items[1].revents & ZMQ_POLLIN)
            handle_signals(l);
        if (items[0].revents & ZMQ_POLLIN) {
            if (control_serve(&l->ctl, l) == CONTROL_STOP)
                launch_stop(l, LAUNCH_STOP_REQUESTED, "stopped on request (control socket)");
        }
        if (nitems > 3 && (items[3].revents & ZMQ_POLLIN))
            cluster_poll(l);
        if (items[2].revents & ZMQ_POLLIN) {
            uint64_t ticks;
            ssize_t r = read(l->timerfd, &ticks, sizeof ticks);
            (void)r;
            control_publish(&l->ctl, l);
            cluster_poll(l);
            progress_poll(l);
        }
        kill_overdue(l);
    }
    spawn_reap(l->children, l->nchildren, NULL);
    note_endings(l);
    l->phase = LAUNCH_ENDED;
    return launch_exit_code(l->outcome);
}
