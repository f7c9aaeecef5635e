/* test_loop.c - the launcher's event loop (launcher/loop.h): descriptor
 * and ZeroMQ callbacks fire in id order, timers keep their period and
 * never fire early, a stop cause ends the loop after its round, and
 * callbacks may remove and add sources, themselves included. */
#include <errno.h>
#include <poll.h>
#include <time.h>
#include <zmq.h>

#include "launcher/loop.h"
#include "t_util.h"

static double t_mono(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* What the callbacks saw. */
struct seen {
    int calls[8];  /* per source id */
    int order[32]; /* ids in call order */
    int n;
    short revents[8];
    double at[16];  /* a timer's firing times */
    int stop_after; /* loop_stop(cause) once this many calls were made (0: never) */
    int cause;
    bool remove_self; /* the callback removes its own source */
    int remove_other; /* the callback removes this id (-1: none) */
    int added;        /* id of a source the callback added (-1: none) */
    int fd;           /* a descriptor to read one byte from */
    void *sock;       /* a ZeroMQ socket to read one message from */
};

static void note(struct loop *lp, int id, short revents, struct seen *s)
{
    assert_true(id >= 0 && id < 8);
    s->calls[id]++;
    s->revents[id] = revents;
    if (s->n < 32)
        s->order[s->n] = id;
    s->n++;
    if (s->stop_after && s->n >= s->stop_after)
        loop_stop(lp, s->cause);
}

static void cb_note(struct loop *lp, int id, short revents, void *ctx)
{
    note(lp, id, revents, ctx);
}

/* Reads one byte (so the descriptor is readable again only if more wait). */
static void cb_read(struct loop *lp, int id, short revents, void *ctx)
{
    struct seen *s = ctx;
    char c;
    assert_int_equal(read(s->fd, &c, 1), 1);
    note(lp, id, revents, s);
}

static void t_pipe(int fd[2], int bytes)
{
    assert_int_equal(pipe(fd), 0);
    for (int i = 0; i < bytes; i++)
        assert_int_equal(write(fd[1], "x", 1), 1);
}

static void test_fd_callbacks(void **state)
{
    (void)state;
    struct loop lp;
    loop_init(&lp);
    int a[2], b[2], quiet[2];
    t_pipe(a, 1);
    t_pipe(b, 1);
    t_pipe(quiet, 0);
    struct seen s = {.stop_after = 2, .cause = 7, .remove_other = -1, .added = -1};
    int iq = loop_add_fd(&lp, quiet[0], POLLIN, cb_note, &s);
    int ia = loop_add_fd(&lp, a[0], POLLIN, cb_note, &s);
    int ib = loop_add_fd(&lp, b[0], POLLIN, cb_note, &s);
    assert_true(iq >= 0 && ia >= 0 && ib >= 0);
    assert_true(iq != ia && ia != ib && iq != ib);
    assert_int_equal(loop_run(&lp), 7);
    /* both readable ones, in id order, once each; the quiet one never */
    assert_int_equal(s.n, 2);
    assert_int_equal(s.order[0], ia < ib ? ia : ib);
    assert_int_equal(s.order[1], ia < ib ? ib : ia);
    assert_int_equal(s.calls[iq], 0);
    assert_true(s.revents[ia] & POLLIN);
    assert_true(s.revents[ib] & POLLIN);
    /* a closed writer: POLLHUP reaches the callback though only POLLIN was asked for */
    loop_free(&lp);
    loop_init(&lp);
    memset(&s, 0, sizeof s);
    s.stop_after = 1;
    s.cause = 1;
    close(quiet[1]);
    iq = loop_add_fd(&lp, quiet[0], POLLIN, cb_note, &s);
    assert_int_equal(loop_run(&lp), 1);
    assert_true(s.revents[iq] & POLLHUP);
    assert_int_equal(loop_add_fd(&lp, -1, POLLIN, cb_note, &s), -EINVAL);
    loop_free(&lp);
    /* level-triggered: a callback that reads one byte of three is called
     * three times, and the pipe is then empty */
    int d[2];
    t_pipe(d, 3);
    loop_init(&lp);
    memset(&s, 0, sizeof s);
    s.stop_after = 3;
    s.cause = 2;
    s.fd = d[0];
    int id = loop_add_fd(&lp, d[0], POLLIN, cb_read, &s);
    assert_int_equal(loop_run(&lp), 2);
    assert_int_equal(s.calls[id], 3);
    struct pollfd pd = {.fd = d[0], .events = POLLIN};
    assert_int_equal(poll(&pd, 1, 0), 0);
    loop_free(&lp);
    close(d[0]), close(d[1]);
    close(a[0]), close(a[1]), close(b[0]), close(b[1]), close(quiet[0]);
}

static void cb_timer(struct loop *lp, int id, short revents, void *ctx)
{
    struct seen *s = ctx;
    if (s->calls[id] < 16)
        s->at[s->calls[id]] = t_mono();
    note(lp, id, revents, s);
}

static void test_timer_period(void **state)
{
    (void)state;
    const double period = 0.02;
    struct loop lp;
    loop_init(&lp);
    struct seen tick = {.stop_after = 5, .cause = 2}, once = {0};
    double t0 = t_mono();
    int it = loop_add_timer(&lp, period, period, cb_timer, &tick);
    int io = loop_add_timer(&lp, 0.01, 0, cb_timer, &once); /* one-shot */
    assert_true(it >= 0 && io >= 0);
    assert_int_equal(loop_run(&lp), 2);
    assert_int_equal(tick.calls[it], 5);
    assert_int_equal(tick.revents[it], 0);
    /* never early: the k-th firing (from 1) not before t0 + k x period */
    for (int k = 0; k < 5; k++)
        assert_true(tick.at[k] >= t0 + (k + 1) * period);
    for (int k = 1; k < 5; k++)
        assert_true(tick.at[k] > tick.at[k - 1]);
    /* the one-shot fired once, not before its delay, and is gone */
    assert_int_equal(once.calls[io], 1);
    assert_true(once.at[0] >= t0 + 0.01);
    /* bad periods and delays */
    assert_int_equal(loop_add_timer(&lp, 0.1, -1.0, cb_timer, &once), -EINVAL);
    assert_int_equal(loop_add_timer(&lp, 1.0 / 0.0, 1.0, cb_timer, &once), -EINVAL);
    loop_free(&lp);
}

/* A periodic timer that fell behind fires once, then keeps its grid. */
static void test_timer_behind(void **state)
{
    (void)state;
    const double period = 0.02;
    struct loop lp;
    loop_init(&lp);
    struct seen tick = {.stop_after = 2, .cause = 1};
    double t0 = t_mono();
    int it = loop_add_timer(&lp, period, period, cb_timer, &tick);
    nanosleep(&(struct timespec){.tv_nsec = 105000000L}, NULL); /* five periods and a quarter */
    assert_int_equal(loop_run(&lp), 1);
    assert_int_equal(tick.calls[it], 2);
    /* the first at once; the second on the grid t0 + k x period after it */
    assert_true(tick.at[1] - tick.at[0] < 0.5);
    double k = (tick.at[1] - t0) / period;
    assert_true(k >= 6.0);
    loop_free(&lp);
}

static void test_stop_cause(void **state)
{
    (void)state;
    struct loop lp;
    loop_init(&lp);
    int a[2], b[2];
    t_pipe(a, 1);
    t_pipe(b, 1);
    struct seen s = {.remove_other = -1, .added = -1};
    int ia = loop_add_fd(&lp, a[0], POLLIN, cb_note, &s);
    int ib = loop_add_fd(&lp, b[0], POLLIN, cb_note, &s);
    /* set before the run: no round at all, though both are readable */
    assert_false(loop_stopping(&lp));
    loop_stop(&lp, 3);
    loop_stop(&lp, 5); /* the first cause stays */
    assert_true(loop_stopping(&lp));
    assert_int_equal(loop_run(&lp), 3);
    assert_int_equal(s.n, 0);
    /* set by the first callback of a round: the round still finishes */
    loop_free(&lp);
    loop_init(&lp);
    s.stop_after = 1;
    s.cause = 4;
    ia = loop_add_fd(&lp, a[0], POLLIN, cb_note, &s);
    ib = loop_add_fd(&lp, b[0], POLLIN, cb_note, &s);
    assert_int_equal(loop_run(&lp), 4);
    assert_int_equal(s.n, 2);
    assert_int_equal(s.calls[ia], 1);
    assert_int_equal(s.calls[ib], 1);
    loop_stop(&lp, 0); /* not a cause */
    loop_free(&lp);
    close(a[0]), close(a[1]), close(b[0]), close(b[1]);
}

/* Removes its own source, or another one, or adds one, then notes. */
static void cb_change(struct loop *lp, int id, short revents, void *ctx)
{
    struct seen *s = ctx;
    if (s->remove_self)
        loop_remove(lp, id);
    if (s->remove_other >= 0)
        loop_remove(lp, s->remove_other);
    s->remove_other = -1;
    note(lp, id, revents, s);
}

static void cb_add(struct loop *lp, int id, short revents, void *ctx)
{
    struct seen *s = ctx;
    if (s->added < 0) {
        s->added = loop_add_fd(lp, s->fd, POLLIN, cb_note, s);
        assert_true(s->added >= 0);
        assert_true(s->added < 8);
    }
    note(lp, id, revents, s);
}

static void test_remove_self(void **state)
{
    (void)state;
    struct loop lp;
    loop_init(&lp);
    int a[2], b[2], c[2];
    t_pipe(a, 3); /* stays readable: it would be called every round */
    t_pipe(b, 1);
    t_pipe(c, 1);
    struct seen self = {.remove_self = true, .remove_other = -1, .added = -1};
    struct seen tick = {.stop_after = 3, .cause = 9, .remove_other = -1, .added = -1};
    int ia = loop_add_fd(&lp, a[0], POLLIN, cb_change, &self);
    int itimer = loop_add_timer(&lp, 0, 0.005, cb_note, &tick);
    assert_int_equal(loop_run(&lp), 9);
    assert_int_equal(self.calls[ia], 1);     /* removed itself: never again */
    assert_int_equal(tick.calls[itimer], 3); /* while the loop went on */
    loop_free(&lp);

    /* a periodic timer removing itself */
    loop_init(&lp);
    struct seen tself = {.remove_self = true, .remove_other = -1, .added = -1};
    memset(&tick, 0, sizeof tick);
    tick.stop_after = 4;
    tick.cause = 1;
    int it1 = loop_add_timer(&lp, 0, 0.002, cb_change, &tself);
    int it2 = loop_add_timer(&lp, 0.002, 0.005, cb_note, &tick);
    assert_int_equal(loop_run(&lp), 1);
    assert_int_equal(tself.calls[it1], 1);
    assert_int_equal(tick.calls[it2], 4);
    loop_free(&lp);

    /* removing a later source of the same round: it is not called; and a
     * source added in a round is first called in the next one (b and c
     * stay readable: nothing reads them) */
    loop_init(&lp);
    struct seen s = {.remove_other = -1, .added = -1, .fd = c[0], .stop_after = 5, .cause = 6};
    int i0 = loop_add_fd(&lp, b[0], POLLIN, cb_change, &s);
    int i1 = loop_add_fd(&lp, a[0], POLLIN, cb_note, &s);
    s.remove_other = i1;
    int i2 = loop_add_fd(&lp, b[0], POLLIN, cb_add, &s);
    assert_true(i0 < i1 && i1 < i2);
    assert_int_equal(loop_run(&lp), 6);
    assert_int_equal(s.n, 5);
    /* round 1: i0 (removes i1), i2 (adds); round 2: all three, in id order */
    assert_int_equal(s.order[0], i0);
    assert_int_equal(s.order[1], i2);
    assert_int_equal(s.calls[s.added], 1);
    assert_int_equal(s.calls[i0], 2);
    assert_int_equal(s.calls[i2], 2);
    int k = 0;
    int round2[3] = {i0, s.added, i2};
    for (int i = 0; i < 3; i++) /* sort the expected ids */
        for (int j = i + 1; j < 3; j++)
            if (round2[j] < round2[i]) {
                k = round2[i];
                round2[i] = round2[j];
                round2[j] = k;
            }
    for (int i = 0; i < 3; i++)
        assert_int_equal(s.order[2 + i], round2[i]);
    loop_remove(&lp, 1000); /* an id that names nothing */
    loop_free(&lp);
    close(a[0]), close(a[1]), close(b[0]), close(b[1]), close(c[0]), close(c[1]);
}

/* Reads one message per call: the loop must call again while more wait,
 * though ZMQ_FD signals only once. */
static void cb_zmq_one(struct loop *lp, int id, short revents, void *ctx)
{
    struct seen *s = ctx;
    char buf[16];
    assert_true(zmq_recv(s->sock, buf, sizeof buf, ZMQ_DONTWAIT) >= 0);
    note(lp, id, revents, s);
}

struct sender {
    void *sock;
    int sent;
};

static void cb_send(struct loop *lp, int id, short revents, void *ctx)
{
    (void)lp, (void)id, (void)revents;
    struct sender *t = ctx;
    assert_int_equal(zmq_send(t->sock, "late", 4, 0), 4);
    t->sent++;
}

static void test_zmq(void **state)
{
    (void)state;
    void *ctx = zmq_ctx_new();
    void *rx = zmq_socket(ctx, ZMQ_PAIR), *tx = zmq_socket(ctx, ZMQ_PAIR);
    assert_int_equal(zmq_bind(rx, "inproc://test-loop"), 0);
    assert_int_equal(zmq_connect(tx, "inproc://test-loop"), 0);
    for (int i = 0; i < 3; i++)
        assert_int_equal(zmq_send(tx, "hi", 2, 0), 2);
    struct loop lp;
    loop_init(&lp);
    struct seen s = {.stop_after = 4, .cause = 5, .sock = rx};
    struct sender t = {.sock = tx};
    int iz = loop_add_zmq(&lp, rx, cb_zmq_one, &s);
    assert_true(iz >= 0);
    /* a message sent later, from a timer, wakes the loop too */
    assert_true(loop_add_timer(&lp, 0.05, 0, cb_send, &t) >= 0);
    double t0 = t_mono();
    assert_int_equal(loop_run(&lp), 5);
    assert_int_equal(s.calls[iz], 4);
    assert_int_equal(t.sent, 1);
    assert_int_equal(s.revents[iz], POLLIN);
    assert_true(t_mono() - t0 >= 0.05);
    assert_int_equal(loop_add_zmq(&lp, NULL, cb_zmq_one, &s), -EINVAL);
    loop_free(&lp);
    zmq_close(rx);
    zmq_close(tx);
    zmq_ctx_term(ctx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fd_callbacks), cmocka_unit_test(test_timer_period), cmocka_unit_test(test_timer_behind),
        cmocka_unit_test(test_stop_cause),   cmocka_unit_test(test_remove_self),  cmocka_unit_test(test_zmq),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
