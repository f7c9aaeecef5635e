/* gnnstat.c - a live per-stage view of a running gnnlaunch job (DESIGN.md
 * section 7; docs/profiling.md).
 *
 *     gnnstat [--interval S] [--count N] [RUN]   refreshed view
 *     gnnstat --once [--interval S] [RUN]        one JSON snapshot on stdout
 *     gnnstat --stop RUN                         asks the run to stop
 *     gnnstat --list                             the runs and whether they live
 *
 * Finding the run. Run directories live under rundir_base_find()'s base
 * ($XDG_RUNTIME_DIR/sluice or /tmp/sluice-<uid>); RUN is a run name, a run
 * id or a run directory path. Without RUN the one live run is taken; with
 * none or several gnnstat lists what it found and exits 2. A run whose
 * launcher is gone (its directory left behind by a SIGKILLed gnnlaunch) is
 * "stale": reported, never attached to.
 *
 * Protocol. Each refresh sends "status" on the launcher's REP endpoint
 * (launcher/control.h) through a REQ socket made for that one request and
 * closed after it, with send and receive timeouts (--timeout), so a
 * launcher that stopped answering gives an error and exit 2, never a hang,
 * and no REQ socket is left in its "awaiting a reply" state. What is
 * shown, and how rates are computed from two snapshots, is stat_view.c.
 *
 * Exit status: 0; 2 usage, no such run, stale run, launcher not answering
 * (or, for --stop, refusing). A watched run that ends (its directory
 * removed by its launcher) ends the view with status 0. */
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>
#include <zmq.h>

#include "core/util.h"
#include "launcher/rundir.h"
#include "tools/stat_view.h"

#define EXIT_USAGE 2
#define RUNS_MAX 256
#define REPLY_MAX (16u << 20)        /* a snapshot larger than this is refused */
#define ERR_MAX (2 * PATH_MAX + 512) /* messages name paths */

struct opts {
    const char *run;
    bool once, stop, list;
    double interval_s; /* between two snapshots */
    double timeout_s;  /* per request */
    long count;        /* frames before exiting; 0: until the run ends */
};

static volatile sig_atomic_t g_quit;

static void on_signal(int sig)
{
    (void)sig;
    g_quit = 1;
}

static void usage(FILE *f)
{
    fprintf(f, "usage: gnnstat [--interval S] [--count N] [--timeout S] [RUN]\n"
               "       gnnstat --once [--interval S] [RUN]\n"
               "       gnnstat --stop RUN\n"
               "       gnnstat --list\n"
               "\n"
               "Attaches to a running gnnlaunch job over its control socket and shows, per\n"
               "stage and rank, items/s, busy and wait %% (of one core: a stage's threads are\n"
               "summed), MB/s, I/O per second, errors, heartbeat age and state; per rank the\n"
               "queue depths and the feature buffer's hit rate and loads/s; and the epoch.\n"
               "RUN is a run name (--run-name), a run id or a run directory; without it the\n"
               "one live run is used.\n"
               "\n"
               "  --interval S  seconds between refreshes, and between the two snapshots\n"
               "                --once computes rates from (default 1)\n"
               "  --count N     exit 0 after N refreshes\n"
               "  --once        print one JSON snapshot on stdout and exit 0\n"
               "  --stop        ask RUN to stop cleanly (gnnlaunch then exits 130)\n"
               "  --list        list the runs (live and stale) and exit 0\n"
               "  --timeout S   seconds to wait for the launcher's answer (default 3)\n"
               "\n"
               "Exit status: 0; 2 usage, no such run, stale run, launcher not answering.\n");
}

static int parse_args(int argc, char **argv, struct opts *o)
{
    *o = (struct opts){.interval_s = 1.0, .timeout_s = 3.0};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = NULL;
        const char *eq = strchr(a, '=');
        char key[32];
        if (!strncmp(a, "--", 2) && eq && (size_t)(eq - a) < sizeof key) {
            snprintf(key, sizeof key, "%.*s", (int)(eq - a), a);
            v = eq + 1;
            a = key;
        }
        bool takes = !strcmp(a, "--interval") || !strcmp(a, "--count") || !strcmp(a, "--timeout");
        if (takes && !v) {
            if (i + 1 >= argc) {
                fprintf(stderr, "gnnstat: %s needs a value; see gnnstat --help\n", a);
                return -1;
            }
            v = argv[++i];
        } else if (!takes && v) {
            fprintf(stderr, "gnnstat: %s takes no value; see gnnstat --help\n", a);
            return -1;
        }
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            exit(0);
        } else if (!strcmp(a, "--once")) {
            o->once = true;
        } else if (!strcmp(a, "--stop")) {
            o->stop = true;
        } else if (!strcmp(a, "--list")) {
            o->list = true;
        } else if (!strcmp(a, "--interval") || !strcmp(a, "--timeout")) {
            double d;
            if (sl_parse_double(v, &d) != 0 || !(d >= 0.01 && d <= 3600)) {
                fprintf(stderr, "gnnstat: %s '%s' is not a number of seconds in [0.01, 3600]\n", a, v);
                return -1;
            }
            if (!strcmp(a, "--interval"))
                o->interval_s = d;
            else
                o->timeout_s = d;
        } else if (!strcmp(a, "--count")) {
            uint64_t n;
            if (sl_parse_u64(v, false, &n) != 0 || n == 0 || n > 1000000000) {
                fprintf(stderr, "gnnstat: --count '%s' is not a positive whole number\n", v);
                return -1;
            }
            o->count = (long)n;
        } else if (a[0] == '-' && a[1]) {
            fprintf(stderr, "gnnstat: unknown option '%s'; see gnnstat --help\n", argv[i]);
            return -1;
        } else if (o->run) {
            fprintf(stderr, "gnnstat: one RUN at most ('%s' and '%s'); see gnnstat --help\n", o->run, a);
            return -1;
        } else {
            o->run = a;
        }
    }
    if (o->once + o->stop + o->list > 1) {
        fprintf(stderr, "gnnstat: --once, --stop and --list exclude each other\n");
        return -1;
    }
    if (o->stop && !o->run) {
        fprintf(stderr, "gnnstat: --stop needs the RUN to stop (gnnstat --list shows them)\n");
        return -1;
    }
    if (o->list && o->run) {
        fprintf(stderr, "gnnstat: --list takes no RUN\n");
        return -1;
    }
    return 0;
}

/* ---- finding the run ------------------------------------------------------------ */

static void print_runs(FILE *f, const struct rundir_info *runs, int n)
{
    fprintf(f, "  %-24s %-8s %-19s %-6s %s\n", "NAME", "PID", "STARTED", "STATE", "CONFIG");
    for (int i = 0; i < n; i++) {
        char when[32] = "?";
        struct tm tm;
        if (localtime_r(&runs[i].started, &tm))
            strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S", &tm);
        fprintf(f, "  %-24s %-8ld %-19s %-6s %s\n", runs[i].name, (long)runs[i].pid, when,
                runs[i].alive ? "live" : "stale", runs[i].config[0] ? runs[i].config : "-");
    }
}

static void explain_stale(const struct rundir_info *r)
{
    fprintf(stderr,
            "gnnstat: run '%s' is stale: its launcher (pid %ld) is gone, so nothing answers there; the next "
            "gnnlaunch removes %s and the run's shared memory\n",
            r->name, (long)r->pid, r->path);
}

/* Oldest first, then by name. */
static int by_start(const void *pa, const void *pb)
{
    const struct rundir_info *a = pa, *b = pb;
    if (a->started != b->started)
        return a->started < b->started ? -1 : 1;
    return strcmp(a->name, b->name);
}

/* Lists the runs under the base into a malloc'd array (*out, to free),
 * oldest first; *n gets how many (at most RUNS_MAX). -1 after a message
 * when the base is unusable; a base that does not exist yet holds no run. */
static int scan_runs(char *base, size_t len, struct rundir_info **out, int *n)
{
    char err[ERR_MAX];
    *out = NULL;
    *n = 0;
    int rc = rundir_base_find(base, len, err, sizeof err);
    if (rc == -ENOENT)
        return 0;
    if (rc) {
        fprintf(stderr, "gnnstat: %s\n", err);
        return -1;
    }
    *out = calloc(RUNS_MAX, sizeof **out);
    if (!*out) {
        fprintf(stderr, "gnnstat: out of memory\n");
        return -1;
    }
    int got = rundir_list(base, *out, RUNS_MAX);
    if (got < 0) {
        fprintf(stderr, "gnnstat: cannot read %s: %s\n", base, strerror(-got));
        free(*out);
        *out = NULL;
        return -1;
    }
    *n = SL_MIN(got, (int)RUNS_MAX);
    qsort(*out, (size_t)*n, sizeof **out, by_start);
    return 0;
}

/* Resolves RUN (want; NULL: the one live run) into *info: 0, or -1 after
 * a message (no such run, none or several live, stale). */
static int find_run(const char *want, struct rundir_info *info)
{
    char base[PATH_MAX], err[ERR_MAX];
    if (want && strchr(want, '/')) { /* a run directory */
        if (rundir_read_info(want, info, err, sizeof err) != 0) {
            fprintf(stderr, "gnnstat: %s\n", err);
            return -1;
        }
        if (!info->alive) {
            explain_stale(info);
            return -1;
        }
        return 0;
    }
    struct rundir_info *runs;
    int n;
    if (scan_runs(base, sizeof base, &runs, &n) != 0)
        return -1;
    int rc = -1, live = 0, pick = -1;
    for (int i = 0; i < n; i++) {
        if (want ? !strcmp(runs[i].name, want) || !strcmp(runs[i].run_id, want) : runs[i].alive) {
            pick = i;
            live += runs[i].alive;
            if (want)
                break;
        }
    }
    if (want && pick < 0) {
        fprintf(stderr, "gnnstat: no run named '%s' under %s", want, base);
        if (n) {
            fprintf(stderr, "; these are there:\n");
            print_runs(stderr, runs, n);
        } else {
            fprintf(stderr, " (no run at all; is XDG_RUNTIME_DIR what it was for gnnlaunch?)\n");
        }
    } else if (want && !runs[pick].alive) {
        explain_stale(&runs[pick]);
    } else if (!want && live == 0) {
        fprintf(stderr, "gnnstat: no running gnnlaunch job under %s%s\n", base,
                n ? "; only stale runs (their launcher is gone):" : " (is XDG_RUNTIME_DIR what it was for gnnlaunch?)");
        if (n)
            print_runs(stderr, runs, n);
    } else if (!want && live > 1) {
        fprintf(stderr, "gnnstat: %d runs are live under %s; name one (gnnstat RUN):\n", live, base);
        print_runs(stderr, runs, n);
    } else {
        *info = runs[pick];
        rc = 0;
    }
    free(runs);
    return rc;
}

static int list_runs(void)
{
    char base[PATH_MAX];
    struct rundir_info *runs;
    int n;
    if (scan_runs(base, sizeof base, &runs, &n) != 0)
        return EXIT_USAGE;
    if (n == 0)
        printf("no runs under %s\n", base);
    else
        print_runs(stdout, runs, n);
    free(runs);
    return 0;
}

/* ---- talking to the launcher ---------------------------------------------------- */

/* Sends req on the run's REP endpoint and waits at most timeout_s for the
 * answer: a malloc'd NUL-terminated reply, or NULL with the reason in err.
 * The REQ socket lives for this one request. Not ZMQ_IMMEDIATE: with it a
 * disconnect drops the pipe and the reply in it, and the launcher often
 * closes its socket right after answering "stop". */
static char *request(void *ctx, const struct rundir_info *run, const char *req, double timeout_s, char *err,
                     size_t errlen)
{
    const char *sock = run->control;
    if (strncmp(sock, "ipc://", 6) != 0 || access(sock + 6, F_OK) != 0) {
        snprintf(err, errlen, "run '%s' has no control socket at %s", run->name, sock);
        return NULL;
    }
    int ms = (int)(timeout_s * 1000), zero = 0;
    char *out = NULL;
    zmq_msg_t msg;
    zmq_msg_init(&msg);
    void *s = zmq_socket(ctx, ZMQ_REQ);
    if (!s || zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof zero) != 0 ||
        zmq_setsockopt(s, ZMQ_RCVTIMEO, &ms, sizeof ms) != 0 || zmq_setsockopt(s, ZMQ_SNDTIMEO, &ms, sizeof ms) != 0 ||
        zmq_connect(s, sock) != 0) {
        snprintf(err, errlen, "cannot connect to %s: %s", sock, zmq_strerror(zmq_errno()));
        goto out;
    }
    if (zmq_send(s, req, strlen(req), 0) < 0 || zmq_msg_recv(&msg, s, 0) < 0) {
        int e = zmq_errno();
        snprintf(err, errlen, "the launcher of run '%s' (pid %ld) is not answering on %s (%s)", run->name,
                 (long)run->pid, sock, e == EAGAIN ? "no answer within the timeout" : zmq_strerror(e));
        goto out;
    }
    size_t len = zmq_msg_size(&msg);
    if (len > REPLY_MAX || !(out = malloc(len + 1))) {
        snprintf(err, errlen, "the answer of run '%s' is %zu bytes; too large", run->name, len);
        goto out;
    }
    memcpy(out, zmq_msg_data(&msg), len);
    out[len] = '\0';
out:
    zmq_msg_close(&msg);
    if (s)
        zmq_close(s);
    return out;
}

/* A "status" snapshot, parsed and checked for what gnnstat reads. */
static json_t *status(void *ctx, const struct rundir_info *run, double timeout_s, char *err, size_t errlen)
{
    char *text = request(ctx, run, "status", timeout_s, err, errlen);
    if (!text)
        return NULL;
    json_error_t je;
    json_t *root = json_loads(text, 0, &je);
    free(text);
    if (!root || !json_is_array(json_object_get(root, "processes")) || !json_object_get(root, "uptime_s")) {
        snprintf(err, errlen, "the launcher of run '%s' sent a status gnnstat cannot read%s%s", run->name,
                 root ? "" : ": ", root ? "" : je.text);
        json_decref(root);
        return NULL;
    }
    const char *id = json_string_value(json_object_get(root, "run_id"));
    if (!id || strcmp(id, run->run_id) != 0) { /* the name was taken over by a new run */
        snprintf(err, errlen, "run '%s' (%s) has ended; the name now belongs to run %s", run->name, run->run_id,
                 id ? id : "?");
        json_decref(root);
        return NULL;
    }
    return root;
}

/* ---- modes ------------------------------------------------------------------------ */

/* Sleeps s seconds unless a signal asks to quit: false when it did. */
static bool pause_s(double s)
{
    struct timespec ts = {.tv_sec = (time_t)s, .tv_nsec = (long)(fmod(s, 1.0) * 1e9)};
    while (!g_quit && nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
    return !g_quit;
}

/* After a failed request while watching: 0 when the run simply ended (its
 * directory is gone, or belongs to a new run of the same name), else 2
 * after saying why. */
static int lost(const struct rundir_info *run, const char *err)
{
    /* the launcher first, then its directory: one that exits normally has
     * removed the directory before it is gone */
    bool alive = shm_pid_alive(run->pid, run->pid_start);
    struct rundir_info now;
    int rc = rundir_read_info(run->path, &now, NULL, 0);
    if (rc == -ENOENT || (rc == 0 && strcmp(now.run_id, run->run_id) != 0)) {
        fprintf(stderr, "gnnstat: run '%s' has ended\n", run->name);
        return 0;
    }
    if (!alive)
        explain_stale(run);
    else
        fprintf(stderr, "gnnstat: %s\n", err);
    return EXIT_USAGE;
}

static int do_once(void *ctx, const struct rundir_info *run, const struct opts *o)
{
    char err[ERR_MAX];
    json_t *a = status(ctx, run, o->timeout_s, err, sizeof err), *b = NULL;
    if (!a || !pause_s(o->interval_s) || !(b = status(ctx, run, o->timeout_s, err, sizeof err))) {
        int rc = g_quit ? 130 : EXIT_USAGE;
        if (!g_quit)
            fprintf(stderr, "gnnstat: %s\n", err);
        json_decref(a);
        return rc;
    }
    json_t *v = stat_view_make(a, b);
    char *text = json_dumps(v, JSON_COMPACT | JSON_REAL_PRECISION(9));
    int rc = text && printf("%s\n", text) > 0 && fflush(stdout) == 0 ? 0 : EXIT_USAGE;
    free(text);
    json_decref(v);
    json_decref(a);
    json_decref(b);
    return rc;
}

static int do_watch(void *ctx, const struct rundir_info *run, const struct opts *o)
{
    bool tty = isatty(STDOUT_FILENO) == 1;
    char err[ERR_MAX];
    json_t *prev = status(ctx, run, o->timeout_s, err, sizeof err);
    if (!prev) {
        fprintf(stderr, "gnnstat: %s\n", err);
        return EXIT_USAGE;
    }
    if (tty)
        fputs("\033[?25l", stdout); /* hide the cursor while redrawing */
    int rc = 0;
    for (long frame = 0; (o->count == 0 || frame < o->count) && pause_s(o->interval_s); frame++) {
        json_t *cur = status(ctx, run, o->timeout_s, err, sizeof err);
        if (!cur) {
            rc = lost(run, err);
            break;
        }
        json_t *v = stat_view_make(prev, cur);
        char *text = NULL;
        size_t len = 0;
        FILE *m = open_memstream(&text, &len);
        if (m) {
            stat_view_render(m, v, run);
            fclose(m);
            /* one write per frame: home, the frame, clear what the last one left below */
            if (tty)
                printf("\033[H\033[2J%s", text);
            else
                printf("%s\n", text);
            fflush(stdout);
        }
        free(text);
        json_decref(v);
        json_decref(prev);
        prev = cur;
    }
    json_decref(prev);
    if (tty)
        fputs("\033[?25h", stdout);
    fflush(stdout);
    return rc;
}

static int do_stop(void *ctx, const struct rundir_info *run, const struct opts *o)
{
    char err[ERR_MAX];
    char *text = request(ctx, run, "stop", o->timeout_s, err, sizeof err);
    if (!text) {
        fprintf(stderr, "gnnstat: %s\n", err);
        return EXIT_USAGE;
    }
    printf("%s\n", text);
    json_t *root = json_loads(text, 0, NULL);
    bool ok = json_is_true(json_object_get(root, "ok"));
    json_decref(root);
    free(text);
    if (!ok)
        fprintf(stderr, "gnnstat: run '%s' refused to stop\n", run->name);
    return ok ? 0 : EXIT_USAGE;
}

int main(int argc, char **argv)
{
    struct opts o;
    if (parse_args(argc, argv, &o) != 0)
        return EXIT_USAGE;
    if (o.list)
        return list_runs();
    struct rundir_info run;
    if (find_run(o.run, &run) != 0)
        return EXIT_USAGE;

    struct sigaction sa = {.sa_handler = on_signal}; /* no SA_RESTART: a signal ends the sleep */
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);

    void *ctx = zmq_ctx_new();
    if (!ctx) {
        fprintf(stderr, "gnnstat: cannot create a ZeroMQ context: %s\n", zmq_strerror(zmq_errno()));
        return EXIT_USAGE;
    }
    int rc = o.stop ? do_stop(ctx, &run, &o) : o.once ? do_once(ctx, &run, &o) : do_watch(ctx, &run, &o);
    zmq_ctx_term(ctx);
    return rc;
}
