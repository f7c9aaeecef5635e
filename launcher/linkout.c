/* linkout.c - a link-prediction run's --metrics and --tensorboard
 * (linkout.h). */
#include "launcher/linkout.h"

#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>

#include "core/util.h"

void linkout_open(struct linkout *o, const char *metrics_file, const char *tboard_dir, double t0)
{
    char msg[PATH_MAX + 256];
    o->t0 = t0;
    o->test_step = 0;
    o->tboard_failed = false;
    o->tb.fd = -1;
    jsonl_open(&o->metrics, metrics_file);
    if (tboard_dir && tboard_dir[0] && tboard_open(&o->tb, tboard_dir, msg, sizeof msg) != 0) {
        fprintf(stderr, "gnnlaunch: warning: %s; continuing without it\n", msg);
        o->tboard_failed = true;
    }
}

/* "<pre>_mrr", "<pre>_hits@1", "<pre>_hits@10" of m, or nulls. */
static void json_ranks(FILE *f, const char *pre, const struct link_metrics *m)
{
    char k[32];
    snprintf(k, sizeof k, "%s_mrr", pre);
    jsonl_num(f, k, m ? m->mrr : NAN, true);
    snprintf(k, sizeof k, "%s_hits@1", pre);
    jsonl_num(f, k, m ? m->hits1 : NAN, true);
    snprintf(k, sizeof k, "%s_hits@10", pre);
    jsonl_num(f, k, m ? m->hits10 : NAN, true);
}

static void add_ranks(struct tboard_batch *s, bool test, const struct link_metrics *m)
{
    if (!m)
        return;
    tboard_add(s, test ? "test/mrr" : "val/mrr", m->mrr);
    tboard_add(s, test ? "test/hits@1" : "val/hits@1", m->hits1);
    tboard_add(s, test ? "test/hits@10" : "val/hits@10", m->hits10);
}

void linkout_epoch(struct linkout *o, const struct linkout_epoch *e)
{
    FILE *f = o->metrics.f;
    const double eval_s = SL_MAX(e->seconds - e->train_s, 0.0);
    if (f) {
        fprintf(f, "{\"type\":\"epoch\",\"t\":%.3f,\"epoch\":%" PRIu32 ",\"epochs\":%" PRIu32 ",", sl_now() - o->t0,
                e->epoch, e->epochs);
        jsonl_num(f, "loss", e->loss, true);
        jsonl_num(f, "lr", e->lr, true);
        json_ranks(f, "valid", e->valid);
        if (e->test)
            json_ranks(f, "test", e->test);
        fprintf(f, "\"seconds\":%.6f,\"train_s\":%.6f,\"eval_s\":%.6f,", e->seconds, e->train_s, eval_s);
        jsonl_num(f, "edges_per_s", e->edges_per_s, e->ooc || e->encoder);
        if (e->ooc)
            fprintf(f,
                    "\"swaps\":%" PRIu64 ",\"swaps_planned\":%" PRIu64 ",\"written_back\":%" PRIu64
                    ",\"read_bytes\":%" PRIu64 ",\"write_bytes\":%" PRIu64
                    ",\"buffer_wait_s\":%.6f,\"bucket_read_s\":%.6f,\"slices_train_s\":%.6f%s",
                    e->swaps, e->swaps_planned, e->written_back, e->read_bytes, e->write_bytes, e->buffer_wait_s,
                    e->bucket_read_s, e->slices_train_s, e->encoder ? "," : "");
        if (e->encoder) {
            jsonl_num(f, "encoder_nodes_per_batch", e->enc_nodes, true);
            jsonl_num(f, "encoder_edges_per_batch", e->enc_edges, false);
        }
        fputs("}\n", f);
        jsonl_flush(&o->metrics);
    }
    struct tboard_batch s = {.n = 0};
    tboard_add(&s, "train/loss", e->loss);
    tboard_add(&s, "train/lr", e->lr);
    tboard_add(&s, "train/edges_per_s", e->edges_per_s);
    add_ranks(&s, false, e->valid);
    add_ranks(&s, true, e->test);
    tboard_add(&s, "time/epoch_s", e->seconds);
    tboard_add(&s, "time/train_s", e->train_s);
    tboard_add(&s, "time/eval_s", eval_s);
    if (e->ooc && e->seconds > 0) {
        tboard_add(&s, "io/read_MBps", (double)e->read_bytes / 1e6 / e->seconds);
        tboard_add(&s, "io/write_MBps", (double)e->write_bytes / 1e6 / e->seconds);
        tboard_add(&s, "io/swaps", (double)e->swaps);
        tboard_add(&s, "io/buffer_wait_s", e->buffer_wait_s);
    }
    if (e->test)
        o->test_step = e->epoch;
    tboard_write_batch(&o->tb, e->epoch, &s, &o->tboard_failed);
}

void linkout_final(struct linkout *o, const struct linkout_final *fi)
{
    FILE *f = o->metrics.f;
    if (f) {
        fprintf(f, "{\"type\":\"final\",\"t\":%.3f,\"complete\":%s,", fi->seconds, fi->complete ? "true" : "false");
        json_ranks(f, "test", fi->test);
        json_ranks(f, "valid", fi->valid);
        fprintf(f, "\"epochs\":%" PRIu32 ",\"best_epoch\":%" PRIu32 ",\"stopped_early\":%s,\"seconds\":%.3f}\n",
                fi->epochs, fi->best_epoch, fi->stopped_early ? "true" : "false", fi->seconds);
        jsonl_flush(&o->metrics);
    }
    jsonl_close(&o->metrics);
    if (fi->test && fi->epochs > 0 && o->test_step != fi->epochs) {
        struct tboard_batch s = {.n = 0};
        add_ranks(&s, true, fi->test);
        tboard_write_batch(&o->tb, fi->epochs, &s, &o->tboard_failed);
    }
    char msg[PATH_MAX + 128];
    if (tboard_close(&o->tb, msg, sizeof msg) != 0) {
        fprintf(stderr, "gnnlaunch: warning: --tensorboard: %s\n", msg);
        o->tboard_failed = true;
    }
}
