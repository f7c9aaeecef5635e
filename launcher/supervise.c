/* supervise.c - the launcher's supervision (DESIGN.md section 8): one
 * thread and one event loop (loop.h) over these sources:
 *   - the signalfd for SIGCHLD, SIGINT, SIGTERM and SIGHUP, which main()
 *     blocked before any thread existed, so they arrive only here. Child
 *     exits come this way too (SIGCHLD): every wake-up of this source
 *     reaps, since SIGCHLDs merge;
 *   - the REP control socket (status, stop), through its ZMQ_FD;
 *   - a 1 s timer, on the grid of the run's start: publish the snapshot on
 *     the PUB socket, exchange results with the other nodes, print progress
 *     and the --metrics records (progress.h; the process records carry
 *     every stage's heartbeat age), and look for stalled stages (below);
 *   - on a multi-node run, the mesh's pipe: results and failures of the
 *     other nodes. cluster_poll() only reports why another node stops this
 *     one (struct cluster_stop); what that does is decided here: while the
 *     run runs it stops like a failing stage, afterwards it fails the run.
 *     A stop here is announced to them (launch_stop -> cluster_abort);
 *   - while stopping, a one-shot timer at the SIGKILL deadline.
 * The loop ends once every stage has been reaped.
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
 * stages end after the stop began does not change the outcome.
 *
 * Stalls (pipeline.stall_timeout_s, T). Every stage heartbeats at least
 * every STAGE_POLL_MS while it waits on a queue, an arena slot, a turn or
 * the all-reduce (stages/stage.h), and between batches. A stage that is
 * running, has finished its first batch (its metrics block counts an
 * item: start-up, however long, is not judged) and has work waiting for
 * it (its input queue is not empty; the sampler, which has no input queue,
 * always has) but whose heartbeat is older than T is stalled: stopped by
 * SIGSTOP or a debugger, or stuck. It fails the run like a failing stage,
 * naming stage, rank, pid, the silence and, from /proc, whether the
 * process is stopped. The check runs on the 1 s timer, so the stop comes
 * between T and T + 1 s of silence; T = 0 turns it off.
 *
 * Then, on a multi-node run whose stages all finished well, this node
 * sends END and waits, with a second loop over the mesh, the signalfd and
 * the 1 s timer (no control socket), for every other node's END (the
 * epoch lines keep coming meanwhile), a failure of another node (the run
 * fails, exit 3) or an interrupt (exit 130, announced to the others). */
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/util.h"
#include "launcher/launch.h"
#include "launcher/loop.h"

#define TICK_S 1.0 /* the timer's period */

/* Why a supervision loop ends (loop_stop causes). */
enum supervise_cause {
    SUPERVISE_REAPED = 1, /* every stage has been reaped */
    SUPERVISE_SETTLED,    /* every node ended, or the run failed or was interrupted meanwhile */
};

struct supervisor {
    struct launch *l;
    struct loop lp; /* the loop now running */
    int kill_timer; /* the SIGKILL deadline's timer, -1 when none is armed */
    bool hurry;     /* a second interrupt asked for SIGKILL at once */
    bool told;      /* "waiting for the other nodes" was printed */
};

/* Exit status for an outcome: 0, 3 or 130. */
static int launch_exit_code(enum launch_outcome o)
{
    switch (o) {
    case LAUNCH_OK:
    case LAUNCH_STOPPED_EARLY:
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
    if (l->nchildren && outcome == LAUNCH_STOPPED_EARLY)
        fprintf(stderr, "gnnlaunch: %s; stopping the run\n", cause);
    else if (l->nchildren)
        fprintf(stderr, "%sgnnlaunch: %s; stopping the run\n", sl_err_line_start(), cause);
    layout_close(&l->layout);
    if (l->run_id[0])
        shm_run_unlink(l->run_id);
    for (int i = 0; i < l->nchildren; i++)
        spawn_signal(&l->children[i], SIGTERM);
    l->kill_at = sl_now() + LAUNCH_GRACE_S;
    cluster_abort(&l->cl, l->cause); /* the other nodes of a multi-node run stop too */
}

/* SIGKILLs the stages still running once the deadline has passed. */
static void kill_overdue(struct supervisor *s)
{
    struct launch *l = s->l;
    if (l->phase != LAUNCH_STOPPING || sl_now() < l->kill_at)
        return;
    for (int i = 0; i < l->nchildren; i++) {
        struct spawn_child *c = &l->children[i];
        if (!c->running || c->kill_sent)
            continue;
        char who[128];
        spawn_describe_child(c, who, sizeof who);
        if (s->hurry)
            fprintf(stderr, "gnnlaunch: sending SIGKILL to %s\n", who);
        else
            fprintf(stderr, "gnnlaunch: %s did not exit within %.0f s of SIGTERM; sending SIGKILL\n", who,
                    LAUNCH_GRACE_S);
        spawn_signal(c, SIGKILL);
    }
}

static void on_kill_due(struct loop *lp, int id, short revents, void *ctx)
{
    (void)lp, (void)id, (void)revents;
    struct supervisor *s = ctx;
    s->kill_timer = -1; /* a one-shot timer is gone once it fires */
    kill_overdue(s);
}

/* (Re)arms the SIGKILL deadline's timer at l->kill_at. Without room for
 * it the deadline is now: better early than never. */
static void arm_kill(struct supervisor *s)
{
    struct launch *l = s->l;
    if (s->kill_timer >= 0)
        loop_remove(&s->lp, s->kill_timer);
    s->kill_timer = loop_add_timer(&s->lp, l->kill_at - sl_now(), 0, on_kill_due, s);
    if (s->kill_timer < 0) {
        l->kill_at = sl_now();
        kill_overdue(s);
    }
}

/* launch_stop, and the SIGKILL deadline's timer when it started the stop. */
static void stop_run(struct supervisor *s, enum launch_outcome outcome, const char *cause)
{
    struct launch *l = s->l;
    bool stopping = l->phase == LAUNCH_STOPPING;
    launch_stop(l, outcome, cause);
    if (!stopping && l->phase == LAUNCH_STOPPING)
        arm_kill(s);
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
static void note_endings(struct supervisor *s)
{
    struct launch *l = s->l;
    for (int i = 0; i < l->nchildren; i++) {
        struct spawn_child *c = &l->children[i];
        if (c->running || c->pid <= 0 || c->noted)
            continue;
        c->noted = true;
        char who[128], how[160], msg[1000];
        spawn_describe_child(c, who, sizeof who);
        spawn_describe_status(c->status, how, sizeof how);
        if (l->phase == LAUNCH_RUNNING) {
            char why[256];
            if (WIFEXITED(c->status) && WEXITSTATUS(c->status) == 0) {
                if (drained_input(l, c, why, sizeof why))
                    continue;
                snprintf(msg, sizeof msg, "%s %s %s", who, how, why);
            } else if (!(WIFSIGNALED(c->status) && WTERMSIG(c->status) == SIGKILL &&
                         memfit_oom_explain(&l->mem, &l->cfg, who, msg, sizeof msg))) {
                snprintf(msg, sizeof msg, "%s %s", who, how);
            }
            stop_run(s, LAUNCH_FAILED, msg);
        } else if (WIFSIGNALED(c->status) && !(WTERMSIG(c->status) == SIGTERM && c->term_sent) &&
                   !(WTERMSIG(c->status) == SIGKILL && c->kill_sent)) {
            fprintf(stderr, "gnnlaunch: warning: %s %s while the run was stopping\n", who, how);
        }
    }
}

/* Reaps, looks at the endings, and ends the loop once none runs. */
static void reap(struct supervisor *s)
{
    struct launch *l = s->l;
    spawn_reap(l->children, l->nchildren, NULL);
    note_endings(s);
    if (spawn_running(l->children, l->nchildren) == 0)
        loop_stop(&s->lp, SUPERVISE_REAPED);
}

/* Another node stops this one (cluster_poll said why): while the stages
 * run, stop them like a failing stage; once they ended well, the run
 * fails all the same. */
static void remote_stop(struct supervisor *s, const struct cluster_stop *st)
{
    struct launch *l = s->l;
    if (l->phase == LAUNCH_RUNNING || l->phase == LAUNCH_SETUP) {
        stop_run(s, LAUNCH_FAILED, st->msg);
    } else if (l->outcome == LAUNCH_OK) {
        l->outcome = LAUNCH_FAILED;
        snprintf(l->cause, sizeof l->cause, "%s", st->msg);
        fprintf(stderr, "%sgnnlaunch: %s\n", sl_err_line_start(), l->cause);
    }
}

/* Exchanges results with the other nodes (a no-op on a single node). */
static void poll_cluster(struct supervisor *s)
{
    struct launch *l = s->l;
    struct cluster_stop st;
    if (cluster_poll(&l->cl, &l->layout.results, l->prog.next_epoch, (uint64_t)l->cfg.train.epochs, &st))
        remote_stop(s, &st);
}

/* progress's epoch results: on several nodes every node's sums (cluster.h). */
static bool run_epoch(void *ctx, uint64_t first, uint64_t e, struct results_rec *sum)
{
    const struct launch *l = ctx;
    return cluster_epoch(&l->cl, &l->layout.results, first, e, sum);
}

/* ---- while the stages run ---------------------------------------------------------------- */

static void on_signals(struct loop *lp, int id, short revents, void *ctx)
{
    (void)lp, (void)id, (void)revents;
    struct supervisor *s = ctx;
    struct launch *l = s->l;
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
            stop_run(s, LAUNCH_INTERRUPTED, cause);
        } else if (l->phase == LAUNCH_STOPPING && sl_now() < l->kill_at) {
            fprintf(stderr, "gnnlaunch: SIG%s again while stopping: killing the remaining stages now\n",
                    sigabbrev_np(sig));
            l->kill_at = sl_now();
            s->hurry = true;
            arm_kill(s);
        }
    }
    reap(s);
}

static void on_control(struct loop *lp, int id, short revents, void *ctx)
{
    (void)lp, (void)id, (void)revents;
    struct supervisor *s = ctx;
    if (control_serve(&s->l->ctl, s->l) == CONTROL_STOP)
        stop_run(s, LAUNCH_STOP_REQUESTED, "stopped on request (control socket)");
}

static void on_mesh(struct loop *lp, int id, short revents, void *ctx)
{
    (void)lp, (void)id, (void)revents;
    poll_cluster(ctx);
}

/* "stopped (state T)" when /proc says the process is stopped or traced,
 * else "stuck" (alive, not stopped, but silent). */
static const char *proc_state(pid_t pid, char *buf, size_t len)
{
    char path[64], stat[512];
    snprintf(path, sizeof path, "/proc/%ld/stat", (long)pid);
    FILE *f = fopen(path, "re");
    size_t n = f ? fread(stat, 1, sizeof stat - 1, f) : 0;
    if (f)
        fclose(f);
    stat[n] = '\0';
    const char *p = strrchr(stat, ')'); /* the name may hold spaces and parentheses */
    char st = p && p[1] == ' ' ? p[2] : '?';
    if (st == 'T' || st == 't')
        snprintf(buf, len, "it is stopped (state %c: SIGSTOP, Ctrl-Z or a debugger)", st);
    else
        snprintf(buf, len, "it is alive (state %c) but makes no progress", st);
    return buf;
}

/* Fails the run when a stage is stalled (the rule above). */
static void check_stalls(struct supervisor *s)
{
    struct launch *l = s->l;
    double limit = l->cfg.pipeline.stall_timeout_s;
    if (l->phase != LAUNCH_RUNNING || !(limit > 0))
        return;
    uint64_t now = sl_now_ns();
    for (int i = 0; i < l->nchildren; i++) {
        const struct spawn_child *c = &l->children[i];
        struct metrics_block *b = metrics_block(&l->layout.metrics, run_block(c->rank, c->stage));
        if (!c->running || !b)
            continue;
        if (atomic_load_explicit(&b->state, memory_order_acquire) != METRICS_RUNNING ||
            atomic_load_explicit(&b->pid, memory_order_relaxed) != (int32_t)c->pid ||
            atomic_load_explicit(&b->items, memory_order_relaxed) == 0)
            continue; /* not started, finished, or still before its first batch */
        uint64_t hb = atomic_load_explicit(&b->heartbeat_ns, memory_order_relaxed);
        double age = hb && now > hb ? (double)(now - hb) / 1e9 : 0.0;
        if (age <= limit)
            continue;
        int q = run_stage_input(c->stage);
        const struct ring *r = q >= 0 ? layout_queue(&l->layout, c->rank, (enum run_queue)q) : NULL;
        uint64_t waiting = r ? ring_count(r) : 1;
        if (waiting == 0)
            continue; /* nothing to do: silence is not a stall */
        char who[128], what[160], how[128], cause[768];
        spawn_describe_child(c, who, sizeof who);
        if (r)
            snprintf(what, sizeof what, "while %llu batch%s waited in its input queue r%d.%s",
                     (unsigned long long)waiting, waiting == 1 ? "" : "es", c->rank, run_queue_name((enum run_queue)q));
        else
            snprintf(what, sizeof what, "while it had batches to sample");
        snprintf(cause, sizeof cause,
                 "%s stalled: no heartbeat for %.1f s %s (pipeline.stall_timeout_s = %g); %s. Look at it with "
                 "gdb -p %ld or perf top -p %ld, or raise pipeline.stall_timeout_s",
                 who, age, what, limit, proc_state(c->pid, how, sizeof how), (long)c->pid, (long)c->pid);
        stop_run(s, LAUNCH_FAILED, cause);
        return;
    }
}

static void on_tick(struct loop *lp, int id, short revents, void *ctx)
{
    (void)lp, (void)id, (void)revents;
    struct supervisor *s = ctx;
    struct launch *l = s->l;
    check_stalls(s);
    control_publish(&l->ctl, l);
    poll_cluster(s);
    progress_poll(&l->prog, l->phase == LAUNCH_RUNNING);
    if (l->prog.stop_early && l->phase == LAUNCH_RUNNING)
        stop_run(s, LAUNCH_STOPPED_EARLY, l->prog.stop_why);
}

/* The poll cannot go on: stop, SIGKILL at once and wait for every stage. */
static void cannot_poll(struct supervisor *s, const char *what, int rc)
{
    struct launch *l = s->l;
    char cause[256];
    snprintf(cause, sizeof cause, "%s: %s", what, strerror(-rc));
    stop_run(s, LAUNCH_FAILED, cause);
    l->kill_at = sl_now(); /* cannot wait properly any more */
    kill_overdue(s);
    for (int i = 0; i < l->nchildren; i++)
        spawn_wait(&l->children[i]);
}

/* The first tick one period after the run's start (at once when setup
 * took longer), then every period. */
static double first_tick(const struct launch *l)
{
    double since = sl_now() - l->t_start;
    return since < TICK_S ? TICK_S - since : 0;
}

/* The main loop: until every stage has been reaped. */
static void run_stages(struct supervisor *s)
{
    struct launch *l = s->l;
    loop_init(&s->lp);
    s->kill_timer = -1;
    int rc = 0;
    void *mesh = cluster_pollable(&l->cl); /* the other nodes (cluster.h), NULL on one node */
    if ((rc = loop_add_fd(&s->lp, l->sigfd, POLLIN, on_signals, s)) < 0 ||
        (rc = loop_add_zmq(&s->lp, l->ctl.rep, on_control, s)) < 0 ||
        (mesh && (rc = loop_add_zmq(&s->lp, mesh, on_mesh, s)) < 0) ||
        (rc = loop_add_timer(&s->lp, first_tick(l), TICK_S, on_tick, s)) < 0) {
        cannot_poll(s, "the launcher cannot watch its stages", rc);
    } else {
        if (l->phase == LAUNCH_STOPPING) /* a stage could not start */
            arm_kill(s);
        reap(s); /* none may be running at all */
        rc = loop_run(&s->lp);
        if (rc < 0)
            cannot_poll(s, "the launcher's poll failed", rc);
    }
    spawn_reap(l->children, l->nchildren, NULL);
    note_endings(s);
    loop_free(&s->lp); /* after the last stop_run that may arm a timer */
    l->phase = LAUNCH_ENDED;
}

/* ---- waiting for the other nodes ---------------------------------------------------------- */

/* What every wake-up does: take in the other nodes' news, print the
 * epochs complete now, and end once all ended or the run failed. */
static void settle_step(struct supervisor *s)
{
    struct launch *l = s->l;
    poll_cluster(s);
    progress_poll(&l->prog, false);
    if (l->outcome != LAUNCH_OK || cluster_all_ended(&l->cl)) {
        loop_stop(&s->lp, SUPERVISE_SETTLED);
        return;
    }
    if (!s->told) {
        fprintf(stderr, "gnnlaunch: this node's stages finished; waiting for the other nodes\n");
        s->told = true;
    }
}

static void on_settle_wake(struct loop *lp, int id, short revents, void *ctx)
{
    (void)lp, (void)id, (void)revents;
    settle_step(ctx);
}

static void on_settle_signals(struct loop *lp, int id, short revents, void *ctx)
{
    (void)lp, (void)id, (void)revents;
    struct supervisor *s = ctx;
    struct launch *l = s->l;
    struct signalfd_siginfo si;
    while (read(l->sigfd, &si, sizeof si) == (ssize_t)sizeof si) {
        if (si.ssi_signo == SIGCHLD)
            continue;
        l->outcome = LAUNCH_INTERRUPTED;
        snprintf(l->cause, sizeof l->cause, "interrupted by SIG%s while waiting for the other nodes",
                 sigabbrev_np((int)si.ssi_signo));
        cluster_abort(&l->cl, l->cause);
    }
    settle_step(s);
}

/* A multi-node run whose stages all finished well: END to the others,
 * then wait for theirs (or a failure, or an interrupt). */
static void wait_for_nodes(struct supervisor *s)
{
    struct launch *l = s->l;
    if (!cluster_joined(&l->cl) || l->outcome != LAUNCH_OK)
        return;
    double mine = sl_now() - l->t_start;
    cluster_mark_end(&l->cl, mine);
    poll_cluster(s); /* the last epochs go out before END */
    cluster_send_end(&l->cl, mine);
    loop_init(&s->lp);
    int rc;
    if ((rc = loop_add_zmq(&s->lp, cluster_pollable(&l->cl), on_settle_wake, s)) < 0 ||
        (rc = loop_add_fd(&s->lp, l->sigfd, POLLIN, on_settle_signals, s)) < 0 ||
        (rc = loop_add_timer(&s->lp, TICK_S, TICK_S, on_settle_wake, s)) < 0) {
        fprintf(stderr, "gnnlaunch: warning: cannot wait for the other nodes: %s\n", strerror(-rc));
    } else {
        settle_step(s);   /* the first step at once */
        loop_run(&s->lp); /* a failed poll ends the wait, as an ended one */
    }
    loop_free(&s->lp);
}

int supervise(struct launch *l)
{
    struct supervisor s = {.l = l, .kill_timer = -1};
    progress_start(&l->prog, &(struct progress_run){.cfg = &l->cfg,
                                                    .layout = &l->layout,
                                                    .ranks = l->ranks,
                                                    .node = l->cl.on ? l->cl.node : 0,
                                                    .nodes = l->cl.on ? l->cl.nodes : 1,
                                                    .start_epoch = l->start_epoch,
                                                    .t_start = l->t_start,
                                                    .metrics_file = l->metrics_file,
                                                    .csv_file = l->csv_file,
                                                    .tboard_dir = l->tboard_dir,
                                                    .epoch = run_epoch,
                                                    .epoch_ctx = l,
                                                    .predict = l->predict.which});
    run_stages(&s);
    wait_for_nodes(&s);
    progress_final(&l->prog, l->outcome == LAUNCH_OK || l->outcome == LAUNCH_STOPPED_EARLY,
                   cluster_seconds(&l->cl, sl_now() - l->t_start));
    if (l->prog.stop_early && l->outcome == LAUNCH_OK) /* decided at the end: the stages had run past it */
        fprintf(stderr, "gnnlaunch: %s; the stages had finished the later epochs before the launcher looked, so "
                "only the epochs up to the stop are reported\n", l->prog.stop_why);
    return launch_exit_code(l->outcome);
}
