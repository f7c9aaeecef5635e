/* stat_view.c - what gnnstat shows (tools/stat_view.h): the view made
 * from two status snapshots of the launcher (launcher/control.h), and its
 * text rendering.
 *
 * Rates are counter differences over the difference of the snapshots'
 * "uptime_s" (the launcher's clock); a counter that went backwards (it
 * cannot, but a reader must not print negative rates) counts as 0. busy %
 * and wait % are busy_ns and wait_ns per wall-clock second x 100: percent
 * of one core, summed over a stage's threads. The feature buffer's hit
 * rate over the interval is (hits + waits) / (hits + waits + loads), as
 * gnn-extractor --bench counts it: a row being loaded by another extractor
 * thread is not read again. */
#include "tools/stat_view.h"

#include <math.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include "core/util.h"
#include "ipc/run.h"

static const char *const g_queues[RUN_QUEUES] = {"extract", "train", "release"};

/* ---- rates ------------------------------------------------------------------------ */

static const char *str(const json_t *o, const char *key)
{
    const char *s = json_string_value(json_object_get(o, key));
    return s ? s : "?";
}

static double num(const json_t *o, const char *key)
{
    const json_t *v = json_object_get(o, key);
    return json_is_number(v) ? json_number_value(v) : NAN;
}

static uint64_t count(const json_t *o, const char *key)
{
    const json_t *v = json_object_get(o, key);
    return json_is_integer(v) && json_integer_value(v) > 0 ? (uint64_t)json_integer_value(v) : 0;
}

/* A rate as a JSON number (null when unknown). */
static json_t *jrate(double v)
{
    return isfinite(v) ? json_real(v) : json_null();
}

/* The counter's growth per second between a (may be NULL) and b. */
static double per_s(const json_t *a, const json_t *b, const char *key, double dt)
{
    if (!a || !(dt > 0))
        return NAN;
    uint64_t x = count(a, key), y = count(b, key);
    return y >= x ? (double)(y - x) / dt : 0.0;
}

/* The process of prev that is stage `name` of rank `rank`, or NULL. */
static const json_t *find_proc(const json_t *prev, const char *name, json_int_t rank)
{
    size_t i;
    const json_t *p;
    json_array_foreach(json_object_get(prev, "processes"), i, p)
    {
        if (json_integer_value(json_object_get(p, "rank")) == rank && !strcmp(str(p, "name"), name))
            return p;
    }
    return NULL;
}

static const json_t *find_rank(const json_t *snap, json_int_t rank)
{
    size_t i;
    const json_t *r;
    json_array_foreach(json_object_get(snap, "rank_stats"), i, r)
    {
        if (json_integer_value(json_object_get(r, "rank")) == rank)
            return r;
    }
    return NULL;
}

static void set(json_t *o, const char *key, json_t *v)
{
    json_object_set_new(o, key, v ? v : json_null());
}

static json_t *copy(const json_t *o, const char *key)
{
    json_t *v = json_object_get(o, key);
    return v ? json_deep_copy(v) : json_null();
}

static json_t *stage_view(const json_t *a, const json_t *b, double dt)
{
    json_t *s = json_object();
    const char *name = str(b, "name");
    set(s, "stage", json_string(name));
    set(s, "rank", copy(b, "rank"));
    set(s, "pid", copy(b, "pid"));
    set(s, "alive", copy(b, "alive"));
    set(s, "state", copy(b, "state"));
    set(s, "exit", copy(b, "exit"));
    set(s, "items", copy(b, "items"));
    set(s, "items_per_s", jrate(per_s(a, b, "items", dt)));
    set(s, "busy_pct", jrate(per_s(a, b, "busy_ns", dt) / 1e7));
    set(s, "wait_pct", jrate(per_s(a, b, "wait_ns", dt) / 1e7));
    set(s, "mb_per_s", jrate(per_s(a, b, "bytes", dt) / 1e6));
    set(s, "io_per_s", jrate(per_s(a, b, "io_ops", dt)));
    set(s, "errors", copy(b, "errors"));
    set(s, "heartbeat_age_s", copy(b, "heartbeat_age_s"));
    return s;
}

static json_t *featbuf_view(const json_t *a, const json_t *b, double dt)
{
    if (!json_is_object(b))
        return json_null();
    json_t *f = json_object();
    set(f, "slots", copy(b, "slots"));
    set(f, "standby", copy(b, "standby"));
    set(f, "hits", copy(b, "hits"));
    set(f, "waits", copy(b, "waits"));
    set(f, "loads", copy(b, "loads"));
    set(f, "evictions", copy(b, "evictions"));
    set(f, "failed", copy(b, "failed"));
    set(f, "stale", copy(b, "stale"));
    /* hit rate over the interval: rows found valid or being loaded by
     * another extractor, over all rows asked for (as gnn-extractor --bench) */
    double hits = per_s(a, b, "hits", dt), waits = per_s(a, b, "waits", dt), loads = per_s(a, b, "loads", dt);
    double asked = hits + waits + loads;
    set(f, "hit_rate", jrate(asked > 0 ? (hits + waits) / asked : NAN));
    set(f, "rows_per_s", jrate(asked));
    set(f, "loads_per_s", jrate(loads));
    set(f, "evictions_per_s", jrate(per_s(a, b, "evictions", dt)));
    return f;
}

static json_t *rank_view(const json_t *a, const json_t *b, double dt)
{
    json_t *r = json_object(), *q = json_object();
    set(r, "rank", copy(b, "rank"));
    const json_t *qa = json_object_get(b, "queues");
    for (int k = 0; k < RUN_QUEUES; k++) {
        const json_t *x = json_object_get(qa, g_queues[k]);
        if (!json_is_object(x)) {
            set(q, g_queues[k], json_null());
            continue;
        }
        json_t *o = json_object();
        set(o, "used", copy(x, "used"));
        set(o, "capacity", copy(x, "capacity"));
        set(o, "closed", copy(x, "closed"));
        set(q, g_queues[k], o);
    }
    set(r, "queues", q);
    set(r, "featbuf", featbuf_view(a ? json_object_get(a, "featbuf") : NULL, json_object_get(b, "featbuf"), dt));
    return r;
}

/* What gnnstat shows: snapshot b, with rates since snapshot a (NULL: the
 * rates are null). The schema is in docs/profiling.md. */
json_t *stat_view_make(const json_t *a, const json_t *b)
{
    double dt = a ? num(b, "uptime_s") - num(a, "uptime_s") : NAN;
    json_t *v = json_object(), *stages = json_array(), *ranks = json_array();
    static const char *const top[] = {"run_id", "name", "pid", "state", "uptime_s", "ranks"};
    for (size_t i = 0; i < SL_ARRAY_LEN(top); i++)
        set(v, top[i], copy(b, top[i]));
    set(v, "interval_s", jrate(dt));
    set(v, "epoch", copy(b, "epoch"));
    size_t i;
    const json_t *p;
    json_array_foreach(json_object_get(b, "processes"), i, p)
    {
        const char *name = str(p, "name");
        json_int_t rank = json_integer_value(json_object_get(p, "rank"));
        json_array_append_new(stages, stage_view(a ? find_proc(a, name, rank) : NULL, p, dt));
    }
    json_array_foreach(json_object_get(b, "rank_stats"), i, p)
    {
        json_int_t rank = json_integer_value(json_object_get(p, "rank"));
        json_array_append_new(ranks, rank_view(a ? find_rank(a, rank) : NULL, p, dt));
    }
    set(v, "stages", stages);
    set(v, "rank_stats", ranks);
    return v;
}

/* ---- display ---------------------------------------------------------------------- */

/* A number for a column: "-" when unknown. */
static const char *col(char *buf, size_t len, double v, int decimals)
{
    if (!isfinite(v))
        snprintf(buf, len, "-");
    else
        snprintf(buf, len, "%.*f", decimals, v);
    return buf;
}

static void duration(char *buf, size_t len, double s)
{
    if (!isfinite(s) || s < 0)
        snprintf(buf, len, "?");
    else if (s < 60)
        snprintf(buf, len, "%.1fs", s);
    else if (s < 3600)
        snprintf(buf, len, "%dm%02ds", (int)(s / 60), (int)fmod(s, 60));
    else
        snprintf(buf, len, "%dh%02dm%02ds", (int)(s / 3600), (int)fmod(s / 60, 60), (int)fmod(s, 60));
}

static void print_epoch(FILE *f, const json_t *e)
{
    if (!json_is_object(e))
        return;
    fprintf(f, "epoch %" JSON_INTEGER_FORMAT "/%" JSON_INTEGER_FORMAT,
            json_integer_value(json_object_get(e, "current")), json_integer_value(json_object_get(e, "total")));
    size_t i;
    const json_t *p;
    const json_t *pub = json_object_get(e, "published");
    if (json_array_size(pub) > 1) {
        fprintf(f, " (epochs finished per rank:");
        json_array_foreach(pub, i, p) fprintf(f, " %" JSON_INTEGER_FORMAT, json_integer_value(p));
        fprintf(f, ")");
    }
}

static void print_rank(FILE *f, const json_t *v, json_int_t rank)
{
    char b[6][32], label[32];
    snprintf(label, sizeof label, "rank %" JSON_INTEGER_FORMAT, rank);
    fprintf(f, "%-11s %7s %-8s %8s %6s %6s %7s %7s %4s %6s\n", label, "pid", "state", "items/s", "busy%", "wait%",
            "MB/s", "IO/s", "err", "hb");
    size_t i;
    const json_t *s;
    json_array_foreach(json_object_get(v, "stages"), i, s)
    {
        if (json_integer_value(json_object_get(s, "rank")) != rank)
            continue;
        const char *state = str(s, "state");
        if (!json_is_true(json_object_get(s, "alive")))
            state = !strcmp(state, "done") || !strcmp(state, "failed") ? state : "gone";
        double hb = num(s, "heartbeat_age_s");
        char hbuf[32];
        if (isfinite(hb))
            snprintf(hbuf, sizeof hbuf, "%.2fs", hb);
        else
            snprintf(hbuf, sizeof hbuf, "-");
        fprintf(f, "  %-9s %7" JSON_INTEGER_FORMAT " %-8s %8s %6s %6s %7s %7s %4" JSON_INTEGER_FORMAT " %6s\n",
                str(s, "stage"), json_integer_value(json_object_get(s, "pid")), state,
                col(b[0], sizeof b[0], num(s, "items_per_s"), 1), col(b[1], sizeof b[1], num(s, "busy_pct"), 1),
                col(b[2], sizeof b[2], num(s, "wait_pct"), 1), col(b[3], sizeof b[3], num(s, "mb_per_s"), 1),
                col(b[4], sizeof b[4], num(s, "io_per_s"), 0), json_integer_value(json_object_get(s, "errors")), hbuf);
    }
    const json_t *r = NULL, *x;
    json_array_foreach(json_object_get(v, "rank_stats"), i, x)
    {
        if (json_integer_value(json_object_get(x, "rank")) == rank)
            r = x;
    }
    if (!r)
        return;
    fprintf(f, "  %-9s", "queues");
    for (int k = 0; k < RUN_QUEUES; k++) {
        const json_t *q = json_object_get(json_object_get(r, "queues"), g_queues[k]);
        if (json_is_object(q))
            fprintf(f, "%s%s %" JSON_INTEGER_FORMAT "/%" JSON_INTEGER_FORMAT "%s", k ? "  " : " ", g_queues[k],
                    json_integer_value(json_object_get(q, "used")), json_integer_value(json_object_get(q, "capacity")),
                    json_is_true(json_object_get(q, "closed")) ? " (closed)" : "");
    }
    fprintf(f, "\n  %-9s", "featbuf");
    const json_t *fb = json_object_get(r, "featbuf");
    if (!json_is_object(fb)) {
        fprintf(f, " -\n");
        return;
    }
    double hit = num(fb, "hit_rate");
    fprintf(f, " %s rows/s, hit %s%s  loads %s/s  evictions %s/s\n", col(b[1], sizeof b[1], num(fb, "rows_per_s"), 0),
            col(b[0], sizeof b[0], hit * 100, 1), isfinite(hit) ? "%" : "",
            col(b[2], sizeof b[2], num(fb, "loads_per_s"), 0), col(b[3], sizeof b[3], num(fb, "evictions_per_s"), 0));
    fprintf(f, "  %-9s %" JSON_INTEGER_FORMAT " slots, %" JSON_INTEGER_FORMAT " on standby\n", "",
            json_integer_value(json_object_get(fb, "slots")), json_integer_value(json_object_get(fb, "standby")));
}

/* One frame of the view into f. */
void stat_view_render(FILE *f, const json_t *v, const struct rundir_info *run)
{
    char up[32], now[16] = "";
    duration(up, sizeof up, num(v, "uptime_s"));
    time_t t = time(NULL);
    struct tm tm;
    if (localtime_r(&t, &tm))
        strftime(now, sizeof now, "%H:%M:%S", &tm);
    fprintf(f, "%s  run %s", now, run->name);
    if (strcmp(run->name, run->run_id) != 0)
        fprintf(f, " (%s)", run->run_id);
    fprintf(f, "  launcher pid %" JSON_INTEGER_FORMAT "  %s  up %s\n", json_integer_value(json_object_get(v, "pid")),
            str(v, "state"), up);
    print_epoch(f, json_object_get(v, "epoch"));
    fprintf(f, "%sconfig %s\n\n", json_is_object(json_object_get(v, "epoch")) ? "  " : "",
            run->config[0] ? run->config : "-");
    json_int_t ranks = json_integer_value(json_object_get(v, "ranks"));
    for (json_int_t r = 0; r < ranks; r++) {
        print_rank(f, v, r);
        fprintf(f, "\n");
    }
    fprintf(f, "items: batches. busy%%, wait%%: of one core (a stage's threads are summed).\n"
               "hb: seconds since the stage's last heartbeat.\n");
}
