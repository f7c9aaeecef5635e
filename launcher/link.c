/* link.c - gnnlaunch's link-prediction run (launcher/link.h). */
#include "launcher/link.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/util.h"
#include "launcher/ckptdir.h"
#include "launcher/linkout.h"
#include "launcher/progress.h"
#include "ops/ckpt.h"
#include "ops/ops.h"
#include "stages/link.h"
#include "stages/linkenc.h"
#include "stages/linkooc.h"
#include "stages/predict.h"

static volatile sig_atomic_t g_stop;
static int64_t g_epochs; /* train.epochs, for stopped_or_failed */
static void on_stop(int sig)
{
    (void)sig;
    g_stop = 1;
}

/* The progress line on stderr while an epoch trains, as the GNN runs'
 * (docs/metrics.md): rewritten in place on a terminal (at most five times
 * a second), else a plain line every SLUICE_PROGRESS_EVERY seconds (10). */
struct link_progress {
    bool tty, live;
    double every, t_plain, t_draw, t_epoch;
    uint32_t epoch, epochs;
};

static void on_batch(void *arg, uint64_t done, uint64_t total, double loss)
{
    struct link_progress *p = arg;
    double now = sl_now();
    if (p->tty ? now - p->t_draw < 0.2 : now - p->t_plain < p->every)
        return;
    double el = now - p->t_epoch, rate = el > 0 ? (double)done / el : 0;
    double left = rate > 0 ? (double)(total - done) / rate : -1;
    double run_left = rate > 0 ? left + (double)(p->epochs - p->epoch - 1) * (double)total / rate : -1;
    char bar[21], e[32], r[32], eta[32], line[320];
    int fill = total ? (int)(20 * done / total) : 0;
    for (int i = 0; i < 20; i++)
        bar[i] = i < fill ? '#' : '.';
    bar[20] = '\0';
    progress_clock_text(e, sizeof e, el);
    progress_clock_text(r, sizeof r, left);
    progress_clock_text(eta, sizeof eta, run_left);
    snprintf(line, sizeof line,
             "epoch %" PRIu32 "/%" PRIu32 " %3d%% [%s] %" PRIu64 "/%" PRIu64 " batches  %s<%s  %.1f batches/s  loss %.4f"
             "  run ETA %s",
             p->epoch + 1, p->epochs, total ? (int)(100 * done / total) : 0, bar, done, total, e, r, rate, loss, eta);
    if (p->tty) {
        fprintf(stderr, "\r\033[K%s", line);
        p->live = true;
        p->t_draw = now;
    } else {
        fprintf(stderr, "%s\n", line);
        p->t_plain = now;
    }
    fflush(stderr);
}

static void clear_live(struct link_progress *p)
{
    if (p->live) {
        fprintf(stderr, "\r\033[K");
        fflush(stderr);
        p->live = false;
    }
}

/* An evaluation that ended early: stopped by a signal (exit 130, the
 * finished epochs' checkpoints kept) or failed (exit 3). */
static void stopped_or_failed(int rc, uint32_t done, const char *err, int *code)
{
    if (rc == -EINTR && done == (uint32_t)g_epochs) {
        fprintf(stderr, "gnnlaunch: interrupted during the final test evaluation; the checkpoints of all %" PRIu32
                " epochs are kept (the test metrics were not computed)\n", done);
        *code = 130;
    } else if (rc == -EINTR) {
        fprintf(stderr, "gnnlaunch: interrupted while evaluating; the checkpoints of the %" PRIu32 " finished epochs "
                "are kept (--resume continues)\n", done);
        *code = 130;
    } else {
        fprintf(stderr, "gnnlaunch: %s\n", err);
    }
}

/* The training split's file as linkooc's source: triples by range,
 * widened to u64 (the ids were range-checked by linkooc_init's pass). */
struct split_src {
    int fd;
    size_t esz;
    const char *path;
    unsigned char *buf; /* 65536 triples */
};

static int read_split(void *arg, uint64_t first, uint64_t count, uint64_t *dst, char *err, size_t errlen)
{
    struct split_src *s = arg;
    size_t bytes = (size_t)(count * 3 * s->esz), got = 0;
    int rc = sl_pread_full(s->fd, s->esz == 8 ? (void *)dst : (void *)s->buf, bytes, (off_t)(first * 3 * s->esz), &got);
    if (rc < 0 || got != bytes)
        return sl_errf(err, errlen, rc < 0 ? rc : -EIO, "%s: reading triple %" PRIu64 ": %s", s->path, first,
                       rc < 0 ? strerror(-rc) : "the file ends early; run gnnprep check");
    if (s->esz == 4)
        for (uint64_t i = 0; i < count * 3; i++) {
            uint32_t v;
            memcpy(&v, s->buf + i * 4, 4);
            dst[i] = v;
        }
    return 0;
}

static struct link_opts opts_of(const struct config *c)
{
    const bool pyg = c->link.sides == LINK_SIDES_KEY_PYG;
    return (struct link_opts){
        .model = c->model.kind == MODEL_COMPLEX ? KGE_COMPLEX : KGE_DISTMULT,
        .loss = c->link.loss == LINK_LOSS_LOGISTIC ? KGE_LOSS_LOGISTIC
                : c->link.loss == LINK_LOSS_MARGIN ? KGE_LOSS_MARGIN
                                                   : KGE_LOSS_SOFTMAX,
        .margin = (float)c->link.margin,
        .dim = (uint32_t)c->model.hidden,
        .lr = (float)c->train.lr,
        .eps = 1e-10f,
        .batch = (uint32_t)c->train.batch_size,
        .chunk = pyg ? 1 : (uint32_t)c->link.chunk,
        .negs = pyg ? 1 : (uint32_t)c->link.negatives,
        .degree_frac = pyg ? 0.0 : c->link.degree_frac, /* PyG draws uniform negatives */
        .sides = pyg ? LINK_SIDES_PYG : c->link.sides == LINK_SIDES_KEY_TAIL ? LINK_SIDES_TAIL : LINK_SIDES_BOTH,
        .init = c->link.init == LINK_INIT_KEY_UNIFORM ? LINK_INIT_UNIFORM : LINK_INIT_XAVIER,
        .init_scale = (float)c->link.init_scale,
        .seed = (uint64_t)c->train.seed,
    };
}

static void model_text(const struct config *c, const struct link_meta *m, char *buf, size_t len)
{
    int w = snprintf(buf, len, "%s dim=%" PRId64 " nodes=%" PRIu64 " relations=%" PRIu64,
                     model_kind_name(c->model.kind), c->model.hidden, m->nodes, m->relations);
    if (c->model.encoder == MODEL_ENCODER_SAGE && w > 0 && (size_t)w < len) {
        char f[128];
        snprintf(buf + w, len - (size_t)w, " encoder=sage layers=%" PRId64 " fanouts=%s", c->model.layers,
                 config_fanouts_str(c->model.fanouts, c->model.n_fanouts, f, sizeof f));
    }
}

static struct linkenc_opts enc_opts_of(const struct config *c)
{
    struct linkenc_opts o = {.layers = (uint32_t)c->model.layers, .aggr = c->model.aggr,
                             .activation = c->model.activation, .dim = (uint32_t)c->model.hidden,
                             .lr = (float)c->link.encoder_lr, .seed = (uint64_t)c->train.seed};
    for (int64_t i = 0; i < c->model.layers; i++)
        o.fanouts[i] = c->model.fanouts[i];
    return o;
}

/* The encoder's tensors in a checkpoint: its weights as "encoder.<name>"
 * and Adam's moments as "adam.m.encoder.<name>", "adam.v.encoder.<name>"
 * (the GNN trainer's names with the prefix), into ts from index at;
 * names into names (3 x MODEL_TENSORS_MAX x 64). Returns the count added. */
static uint32_t enc_tensors(struct linkenc *e, struct ckpt_tensor *ts, char (*names)[64])
{
    uint32_t n = 0, k = model_ntensors(e->net);
    float *base[3] = {model_params(e->net), e->adam.m, e->adam.v};
    const char *pre[3] = {"encoder.", "adam.m.encoder.", "adam.v.encoder."};
    for (int b = 0; b < 3; b++)
        for (uint32_t i = 0; i < k; i++, n++) {
            const struct model_tensor *t = model_tensor(e->net, i);
            snprintf(names[n], 64, "%s%s", pre[b], t->name);
            ts[n] = (struct ckpt_tensor){.name = names[n], .data = base[b] + t->offset, .dtype = "F32",
                                         .ndim = t->ndim, .shape = {t->shape[0], t->shape[1]}};
        }
    return n;
}

/* epoch-NNNNNN.safetensors for `epochs` finished epochs, then best (when
 * best_epoch is this epoch), latest and keep_last (sparing best_epoch; 0:
 * whatever best.safetensors names). 0 or -errno with a message. */
static int save(const struct launch_link *r, const struct link_model *m, struct linkooc *x, struct linkenc *enc,
                uint32_t epochs, uint64_t steps, uint32_t best_epoch, char *err, size_t errlen)
{
    const struct config *c = r->cfg;
    const char *dir = c->train.checkpoint_dir;
    char path[4200], msg[1024];
    if (ckpt_path(path, sizeof path, dir, epochs) != 0)
        return sl_errf(err, errlen, -ENAMETOOLONG, "train.checkpoint_dir %s: path too long", dir);
    struct ckpt_tensor ts[4 + 3 * MODEL_TENSORS_MAX] = {
        {.name = "node_emb", .data = m->node, .dtype = "F32", .ndim = 2, .shape = {m->nodes, m->d}},
        {.name = "rel_emb", .data = m->rel, .dtype = "F32", .ndim = 2, .shape = {m->relations, m->d}},
        {.name = "adagrad.node_emb", .data = m->node_g2, .dtype = "F32", .ndim = 2, .shape = {m->nodes, m->d}},
        {.name = "adagrad.rel_emb", .data = m->rel_g2, .dtype = "F32", .ndim = 2, .shape = {m->relations, m->d}},
    };
    char enc_names[3 * MODEL_TENSORS_MAX][64], adam_s[32] = "0";
    uint32_t nts = 4 + (enc ? enc_tensors(enc, ts + 4, enc_names) : 0);
    if (enc)
        snprintf(adam_s, sizeof adam_s, "%" PRIu64, enc->adam.step);
    char epoch_s[32], step_s[32], seed_s[32], model_s[256], rng_s[128], dataset_s[24], run_s[24], run_text[2048];
    snprintf(epoch_s, sizeof epoch_s, "%" PRIu32, epochs);
    snprintf(step_s, sizeof step_s, "%" PRIu64, steps);
    snprintf(seed_s, sizeof seed_s, "%" PRId64, c->train.seed);
    snprintf(rng_s, sizeof rng_s, "counter-based: splitmix64 of (seed %" PRId64 ", epoch, batch)", c->train.seed);
    model_text(c, &r->meta, model_s, sizeof model_s);
    uint64_t dataset_id = link_meta_identity(&r->meta);
    snprintf(dataset_s, sizeof dataset_s, "%016" PRIx64, dataset_id);
    snprintf(run_s, sizeof run_s, "%016" PRIx64, config_run_identity(c, dataset_id));
    config_run_text(c, run_text, sizeof run_text);
    char *cfg_text = NULL;
    size_t cfg_len;
    int rc = sl_read_file(r->config_path, 1 << 20, &cfg_text, &cfg_len, err, errlen);
    if (rc)
        return rc;
    const char *base[] = {"format", "sluice-checkpoint", "version", "1", "epoch", epoch_s, "step", step_s,
                          "seed", seed_s, "rng", rng_s, "model", model_s, "config", cfg_text,
                          CKPT_META_DATASET, dataset_s, CKPT_META_DATASET_PATH, c->dataset.path,
                          CKPT_META_RUN, run_s, CKPT_META_RUN_CONFIG, run_text, "encoder_adam_step", adam_s};
    size_t nkeys = config_key_count(), nbase = SL_ARRAY_LEN(base), m2 = nbase;
    const char **kv = calloc(nbase + 2 * nkeys, sizeof *kv);
    char *vals = calloc(nkeys, 256);
    if (!kv || !vals) {
        free(kv), free(vals), free(cfg_text);
        return sl_errf(err, errlen, -ENOMEM, "out of memory writing a checkpoint");
    }
    memcpy(kv, base, sizeof base);
    for (size_t i = 0; i < nkeys; i++) {
        config_key_text(c, i, vals + i * 256, 256);
        kv[m2++] = config_key_name(i);
        kv[m2++] = vals + i * 256;
    }
    /* out of core: the node table and its sums from the layout's file */
    struct ckpt_fill fills[SL_ARRAY_LEN(ts)] = {{x ? linkooc_table_bytes : NULL, x ? &x->view[0] : NULL},
                                               {NULL, NULL},
                                               {x ? linkooc_table_bytes : NULL, x ? linkooc_g2_arg(x) : NULL},
                                               {NULL, NULL}};
    rc = ckpt_write_from(path, ts, fills, nts, kv, (uint32_t)(m2 / 2), msg, sizeof msg);
    free(kv), free(vals), free(cfg_text);
    if (rc)
        return sl_errf(err, errlen, rc, "epoch %" PRIu32 ": %s; %s", epochs, msg,
                       epochs > 1 ? "the checkpoints before it are untouched: make room, then continue from the newest "
                                    "with gnnlaunch --resume"
                                  : "no checkpoint was kept: make room, then start the run again");
    if (best_epoch == epochs && (rc = ckptdir_point(dir, CKPTDIR_BEST, epochs, msg, sizeof msg)) != 0)
        return sl_errf(err, errlen, rc, "%s", msg);
    if ((rc = ckptdir_point(dir, CKPTDIR_LATEST, epochs, msg, sizeof msg)) != 0)
        return sl_errf(err, errlen, rc, "%s", msg);
    if (c->train.keep_last > 0 &&
        (rc = ckptdir_prune(dir, epochs, (uint32_t)c->train.keep_last, best_epoch, msg, sizeof msg)) < 0)
        return sl_errf(err, errlen, rc, "%s", msg);
    return 0;
}

/* The tables and Adagrad sums of epoch `epochs`' checkpoint into m (the
 * node table out of core: into x's layout). */
static int load(const struct launch_link *r, struct link_model *m, struct linkooc *x, struct linkenc *enc,
                uint32_t epochs, uint64_t *steps, char *err, size_t errlen)
{
    const struct config *c = r->cfg;
    char path[4200], msg[1024], want[256];
    if (ckpt_path(path, sizeof path, c->train.checkpoint_dir, epochs) != 0)
        return sl_errf(err, errlen, -ENAMETOOLONG, "train.checkpoint_dir: path too long");
    struct ckpt k;
    if (ckpt_read(&k, path, msg, sizeof msg) != 0)
        return sl_errf(err, errlen, -EINVAL, "--resume: %s", msg);
    model_text(c, &r->meta, want, sizeof want);
    const char *model = ckpt_meta(&k, "model"), *step = ckpt_meta(&k, "step");
    int rc = 0;
    if (!model || strcmp(model, want) || !step)
        rc = sl_errf(err, errlen, -EINVAL, "--resume: %s holds the model '%s', not '%s'", path, model ? model : "?",
                     want);
    struct {
        const char *name;
        float *dst;
        uint64_t rows;
    } t[] = {{"node_emb", m->node, m->nodes},
             {"rel_emb", m->rel, m->relations},
             {"adagrad.node_emb", m->node_g2, m->nodes},
             {"adagrad.rel_emb", m->rel_g2, m->relations}};
    const void *found[4] = {NULL};
    for (size_t i = 0; rc == 0 && i < SL_ARRAY_LEN(t); i++) {
        uint32_t nd;
        uint64_t shape[CKPT_MAX_NDIM];
        const void *p = ckpt_find(&k, t[i].name, "F32", &nd, shape);
        if (!p || nd != 2 || shape[0] != t[i].rows || shape[1] != m->d)
            rc = sl_errf(err, errlen, -EINVAL, "--resume: %s has no F32 tensor %s of shape [%" PRIu64 ", %u]", path,
                         t[i].name, t[i].rows, m->d);
        else if (t[i].dst)
            memcpy(t[i].dst, p, t[i].rows * m->d * sizeof(float));
        found[i] = p;
    }
    if (rc == 0 && enc) { /* the encoder's weights, Adam's moments and step */
        struct ckpt_tensor ts[3 * MODEL_TENSORS_MAX];
        char names[3 * MODEL_TENSORS_MAX][64];
        uint32_t n = enc_tensors(enc, ts, names);
        const char *as = ckpt_meta(&k, "encoder_adam_step");
        for (uint32_t i = 0; rc == 0 && i < n; i++) {
            uint32_t nd;
            uint64_t shape[CKPT_MAX_NDIM];
            const void *p = ckpt_find(&k, ts[i].name, "F32", &nd, shape);
            if (!p || nd != ts[i].ndim || shape[0] != ts[i].shape[0] || (nd == 2 && shape[1] != ts[i].shape[1]))
                rc = sl_errf(err, errlen, -EINVAL, "--resume: %s has no F32 tensor %s of the encoder's shape", path,
                             ts[i].name);
            else
                memcpy((void *)ts[i].data, p, ts[i].shape[0] * (nd == 2 ? ts[i].shape[1] : 1) * sizeof(float));
        }
        if (rc == 0 && !as)
            rc = sl_errf(err, errlen, -EINVAL, "--resume: %s has no encoder_adam_step", path);
        if (rc == 0)
            enc->adam.step = strtoull(as, NULL, 10);
    }
    if (rc == 0 && x) /* the checkpoint is mapped: its pages come and go as the partitions are written */
        rc = linkooc_restore(x, found[0], found[2], err, errlen);
    if (rc == 0)
        *steps = strtoull(step, NULL, 10);
    ckpt_free(&k);
    return rc;
}

/* Where the encoded table goes: in memory (table), or out of core into
 * the file path, read back through file (fd -1 until made). */
struct enc_out {
    bool fresh; /* it encodes the tables as they are now (no training since): evaluations reuse it */
    float *table;
    char path[4300];
    struct linkenc_file file;
};

/* Every node encoded (full neighbourhoods): into o->table in memory; out
 * of core (m->node NULL) streamed from the layout through e->rows into
 * o->path, opened as o->file. */
static int encode_table(const struct link_model *m, struct linkenc *enc, struct enc_out *o,
                        const struct link_eval_opts *e, char *err, size_t errlen)
{
    if (o->fresh)
        return 0;
    if (m->node) {
        int rc = linkenc_encode_all(enc, m->node, o->table, err, errlen);
        o->fresh = rc == 0;
        return rc;
    }
    if (o->file.fd >= 0) {
        close(o->file.fd);
        o->file.fd = -1;
    }
    int rc = linkenc_encode_file(enc, e->rows, e->rows_arg, o->path, err, errlen);
    if (rc == 0 && (o->file.fd = open(o->path, O_RDONLY | O_CLOEXEC)) < 0)
        rc = sl_errf(err, errlen, -errno, "%s: cannot open: %s", o->path, strerror(errno));
    o->file.d = m->d;
    o->fresh = rc == 0;
    return rc;
}

/* ckpt_fill's shape over the encoded file (node_enc.npy out of core). */
static int enc_bytes(void *arg, uint64_t off, void *dst, size_t len, char *err, size_t errlen)
{
    const struct enc_out *o = arg;
    size_t got = 0;
    int rc = sl_pread_full(o->file.fd, dst, len, (off_t)off, &got);
    if (rc < 0 || got != len)
        return sl_errf(err, errlen, rc < 0 ? rc : -EIO, "%s: %s", o->path, rc < 0 ? strerror(-rc) : "ends early");
    return 0;
}

/* link_evaluate, through the encoder when there is one. */
static int evaluate(const struct link_model *m, struct linkenc *enc, struct enc_out *eo, const struct link_opts *o,
                    const uint64_t *triples, uint64_t n, const struct link_eval_opts *e, struct link_metrics *out,
                    char *err, size_t errlen)
{
    if (!enc)
        return link_evaluate(m, o, triples, n, e, out, err, errlen);
    int rc = encode_table(m, enc, eo, e, err, errlen);
    if (rc)
        return rc;
    struct link_model em = *m;
    struct link_eval_opts ee = *e;
    em.node = m->node ? eo->table : NULL;
    ee.rows = m->node ? NULL : linkenc_file_rows;
    ee.rows_arg = m->node ? NULL : &eo->file;
    return link_evaluate(&em, o, triples, n, &ee, out, err, errlen);
}

int launch_link_run(const struct launch_link *r, struct launch_link_out *lout)
{
    const struct config *c = r->cfg;
    const struct link_meta *meta = &r->meta;
    const char *dir = c->dataset.path;
    double t0 = sl_now();
    /* --metrics and --tensorboard from the start: a run that fails early
     * still ends the file with its final object */
    struct linkout mo;
    linkout_open(&mo, r->metrics_file, r->tboard_dir, t0);
    /* the best validation MRR since the start (or the resume) and early
     * stopping, as a GNN run's progress keeps them (progress.c) */
    const int64_t patience = c->train.early_stop_patience;
    double best = NAN;
    uint32_t best_epoch = 0, since_best = 0, done = r->start_epoch;
    struct link_metrics best_v = {0}, best_t = {0}, last_v = {0}, last_t = {0};
    bool best_has_t = false, have_v = false, have_last_t = false, stopped = false, finished = false;
    char err[4096];
    uint64_t *split[LINK_SPLITS] = {NULL};
    struct link_model m;
    struct link_trainer t;
    struct link_known known;
    struct linkooc x;
    struct linkenc enc;
    const bool enc_on = c->model.encoder == MODEL_ENCODER_SAGE;
    struct enc_out eout = {.file = {.fd = -1}}; /* the encoded table an evaluation ranks */
    memset(&enc, 0, sizeof enc);
    memset(&x, 0, sizeof x);
    x.rfd = x.bfd = -1;
    bool ooc_open = false;
    memset(&m, 0, sizeof m);
    memset(&t, 0, sizeof t);
    memset(&known, 0, sizeof known);
    int code = 3, rc = 0;
    /* the first SIGINT/SIGTERM stops at the next batch or evaluation block;
     * a second one (the handler is reset) ends the process as usual */
    struct sigaction sa = {.sa_handler = on_stop, .sa_flags = SA_RESETHAND}, old_int, old_term;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old_int);
    sigaction(SIGTERM, &sa, &old_term);
    int threads = c->pipeline.trainer_threads > 0 ? (int)c->pipeline.trainer_threads : (int)sysconf(_SC_NPROCESSORS_ONLN);
    ops_set_threads(SL_MAX(1, SL_MIN(threads, 64)));
    struct link_opts o = opts_of(c);
    g_epochs = c->train.epochs;
    /* out of core the training triples go to the buckets from the file;
     * in memory only for the filtered ranking's known triples (then freed) */
    for (int s = 0; rc == 0 && s < LINK_SPLITS; s++)
        if (s != LINK_TRAIN || !r->ooc || c->link.eval == LINK_EVAL_FILTERED)
            rc = link_load_split(dir, meta, s, &split[s], err, sizeof err);
    char ooc_dir[4200];
    snprintf(ooc_dir, sizeof ooc_dir, "%s/link-partitions", c->train.checkpoint_dir);
    if (rc == 0 && r->ooc) {
        struct linkooc_params pp = {.parts = r->parts, .slots = r->slots,
                                    .buffered = c->pipeline.io == EXTRACT_IO_BUFFERED, .comet = r->comet};
        double tl = sl_now();
        char tp[4200];
        snprintf(tp, sizeof tp, "%s/%s", dir, meta->split[LINK_TRAIN].file);
        struct split_src ss = {.fd = open(tp, O_RDONLY | O_CLOEXEC), .esz = dtype_size(meta->split[LINK_TRAIN].dtype),
                               .path = tp, .buf = malloc(65536 * 3 * 4)};
        struct linkooc_triples src = {read_split, &ss};
        if (ss.fd < 0 || !ss.buf)
            rc = sl_errf(err, sizeof err, ss.fd < 0 ? -errno : -ENOMEM, "%s: cannot read: %s", tp,
                         ss.fd < 0 ? strerror(errno) : "out of memory");
        else
            rc = linkooc_init(&x, ooc_dir, &pp, &o, meta->nodes, meta->relations, &src, meta->split[LINK_TRAIN].rows,
                              &m, err, sizeof err);
        ooc_open = rc == 0;
        if (rc == 0 && enc_on) { /* the encoder's graph from the same file */
            struct linkenc_opts eo = enc_opts_of(c);
            struct linkenc_triples es = {read_split, &ss};
            rc = linkenc_init_read(&enc, meta->nodes, &es, meta->split[LINK_TRAIN].rows, link_batch_rows(&o), &eo, err,
                                   sizeof err);
        }
        if (ss.fd >= 0)
            close(ss.fd);
        free(ss.buf);
        if (rc == 0) {
            char b1[32], b2[32];
            fprintf(stderr,
                    "gnnlaunch: link prediction out of core: %" PRIu32 " partitions of %s (%" PRIu64 " nodes with "
                    "their Adagrad sums), %" PRIu32 " in the buffer (%s with the spare frame); %" PRIu32
                    " buffer states an epoch, %" PRIu64 " swaps an epoch (%s; lower bound %" PRIu64
                    "); layout written to %s in %.1f s\n",
                    x.parts, sl_fmt_bytes(x.part_bytes, b1, sizeof b1), x.part_nodes, x.slots,
                    sl_fmt_bytes((uint64_t)x.buf.frames * x.part_bytes, b2, sizeof b2), x.plan.states, x.plan.swaps,
                    x.order == PO_ORDER_COMET ? "COMET" : "BETA", po_lower_bound_pairs(x.parts, x.slots), ooc_dir,
                    sl_now() - tl);
        }
    } else if (rc == 0) {
        rc = link_model_init(&m, meta->nodes, meta->relations, &o, err, sizeof err);
    }
    if (rc == 0)
        rc = r->ooc ? link_trainer_init(&t, &m, &o, NULL, 1, err, sizeof err)
                    : link_trainer_init(&t, &m, &o, split[LINK_TRAIN], meta->split[LINK_TRAIN].rows, err, sizeof err);
    struct link_progress prog = {.tty = isatty(STDERR_FILENO) == 1, .every = 10, .epochs = (uint32_t)c->train.epochs};
    const char *every = getenv("SLUICE_PROGRESS_EVERY");
    if (every && *every && (sl_parse_double(every, &prog.every) != 0 || !(prog.every >= 0)))
        prog.every = 10;
    if (rc == 0 && enc_on) {
        struct linkenc_opts eo = enc_opts_of(c);
        if (!r->ooc)
            rc = linkenc_init(&enc, meta->nodes, split[LINK_TRAIN], meta->split[LINK_TRAIN].rows, link_batch_rows(&o),
                              &eo, err, sizeof err);
        if (rc == 0 && !r->ooc && !(eout.table = malloc(meta->nodes * o.dim * sizeof *eout.table)))
            rc = sl_errf(err, sizeof err, -ENOMEM, "model.encoder: out of memory for the encoded table");
        snprintf(eout.path, sizeof eout.path, "%s/encoded.bin", ooc_dir);
        if (rc == 0)
            t.enc = &enc;
    }
    if (rc == 0) {
        t.stop = &g_stop;
        t.on_batch = on_batch;
        t.on_batch_arg = &prog;
        if (c->link.eval == LINK_EVAL_FILTERED) {
            const uint64_t *arr[3] = {split[0], split[1], split[2]};
            uint64_t ns[3] = {meta->split[0].rows, meta->split[1].rows, meta->split[2].rows};
            rc = link_known_init(&known, arr, ns, 3, err, sizeof err);
        }
    }
    if (rc == 0 && r->ooc) { /* the buckets hold the training triples now */
        free(split[LINK_TRAIN]);
        split[LINK_TRAIN] = NULL;
    }
    uint64_t steps = 0;
    if (rc == 0 && r->start_epoch)
        rc = load(r, &m, ooc_open ? &x : NULL, enc_on ? &enc : NULL, r->start_epoch, &steps, err, sizeof err);
    if (rc) {
        fprintf(stderr, "gnnlaunch: %s\n", err);
        goto out;
    }
    struct link_eval_opts e = {.filter = c->link.eval == LINK_EVAL_FILTERED ? &known : NULL,
                               .heads_too = c->link.eval_heads,
                               .sampled = (uint32_t)c->link.eval_sampled,
                               .seed = (uint64_t)c->train.seed,
                               .stop = &g_stop,
                               .rows = r->ooc ? linkooc_rows : NULL,
                               .rows_arg = r->ooc ? &x : NULL};
    /* a previous run's final tables must not stand beside this run's checkpoints */
    char np[3][4200];
    snprintf(np[0], sizeof np[0], "%s/node_emb.npy", c->train.checkpoint_dir);
    snprintf(np[1], sizeof np[1], "%s/rel_emb.npy", c->train.checkpoint_dir);
    snprintf(np[2], sizeof np[2], "%s/node_enc.npy", c->train.checkpoint_dir);
    for (int i = 0; i < 3; i++)
        unlink(np[i]);
    fprintf(stderr,
            "gnnlaunch: link prediction %s: %s, dim %" PRId64 ", %" PRIu64 " nodes, %" PRIu64
            " relations, %" PRIu64 " training triples; %s loss, %s negatives, Adagrad lr %g; %d thread%s\n",
            r->ooc ? "out of core" : "in memory", model_kind_name(c->model.kind), c->model.hidden, meta->nodes, meta->relations, meta->split[LINK_TRAIN].rows,
            c->link.loss == LINK_LOSS_SOFTMAX ? "softmax" : c->link.loss == LINK_LOSS_LOGISTIC ? "logistic" : "margin",
            c->link.sides == LINK_SIDES_KEY_PYG ? "one per positive (pyg)" : "chunk-shared", c->train.lr, ops_threads(),
            ops_threads() == 1 ? "" : "s");
    if (enc_on) {
        char f[128];
        fprintf(stderr,
                "gnnlaunch: encoder: sage, %" PRId64 " layer%s of %" PRId64 " -> %" PRId64 ", fanouts %s, %s aggregation, "
                "%zu weights (Adam lr %g); the training graph both ways: %" PRIu64 " edges, max degree %" PRIu64
                "; evaluation encodes every node with its full neighbourhood\n",
                c->model.layers, c->model.layers == 1 ? "" : "s", c->model.hidden, c->model.hidden,
                config_fanouts_str(c->model.fanouts, c->model.n_fanouts, f, sizeof f),
                c->model.aggr == MODEL_AGGR_MEAN ? "mean" : c->model.aggr == MODEL_AGGR_SUM ? "sum" : "max",
                linkenc_nparams(&enc), c->link.encoder_lr, enc.topo.edges, enc.topo.max_in_degree);
    }
    const uint64_t per_epoch = (meta->split[LINK_TRAIN].rows + o.batch - 1) / o.batch;
    struct embbuf_stats before = {0}, ep_out = {0}; /* the buffer's counters at the epoch's start; the epoch's */
    uint64_t enc_before[3] = {0};     /* the encoder's: nodes, edges sampled, batches */
    for (uint32_t ep = r->start_epoch; ep < (uint32_t)c->train.epochs; ep++) {
        double t1 = sl_now(), loss;
        prog.epoch = ep;
        prog.t_epoch = prog.t_plain = t1;
        eout.fresh = false; /* the tables change */
        rc = r->ooc ? linkooc_epoch(&x, &t, ep, &loss, err, sizeof err)
                    : link_train_epoch(&t, ep, &loss, err, sizeof err);
        clear_live(&prog);
        if (rc == -EINTR) {
            fprintf(stderr, "gnnlaunch: interrupted in epoch %" PRIu32 "; the checkpoints of the %" PRIu32
                    " finished epochs are kept (--resume continues)\n", ep + 1, ep);
            code = 130;
            goto out;
        }
        if (rc) {
            fprintf(stderr, "gnnlaunch: %s\n", err);
            goto out;
        }
        steps += r->ooc ? t.slice_batches : per_epoch;
        double train_s = sl_now() - t1;
        if (r->ooc) {
            const struct embbuf_stats *a = &x.st.buf;
            char b1[32], b2[32];
            fprintf(stderr,
                    "gnnlaunch: epoch %" PRIu32 " out of core: %" PRIu64 " partitions loaded (%s %" PRIu64
                    " swaps an epoch, lower bound %" PRIu64 "), %" PRIu64 " written back; read %s, wrote %s; "
                    "waited %.2f s for the buffer, %.2f s reading buckets, %.2f s training\n",
                    ep + 1, x.st.swaps, x.order == PO_ORDER_COMET ? "COMET" : "BETA", x.plan.swaps, po_lower_bound_pairs(x.parts, x.slots), a->writes - before.writes,
                    sl_fmt_bytes(a->bytes_read - before.bytes_read, b1, sizeof b1),
                    sl_fmt_bytes(a->bytes_written - before.bytes_written, b2, sizeof b2),
                    (double)(a->wait_ns - before.wait_ns) * 1e-9, x.st.read_buckets_s, x.st.train_s);
            ep_out = (struct embbuf_stats){.writes = a->writes - before.writes,
                                           .bytes_read = a->bytes_read - before.bytes_read,
                                           .bytes_written = a->bytes_written - before.bytes_written,
                                           .wait_ns = a->wait_ns - before.wait_ns};
            before = *a;
        }
        double enc_avg[2] = {NAN, NAN}; /* nodes and edges sampled a batch */
        if (enc_on) {
            enc_avg[0] = (double)(enc.nodes_sampled - enc_before[0]) / (double)SL_MAX(enc.batches - enc_before[2], 1);
            enc_avg[1] = (double)(enc.edges_sampled - enc_before[1]) / (double)SL_MAX(enc.batches - enc_before[2], 1);
            fprintf(stderr,
                    "gnnlaunch: epoch %" PRIu32 " encoder: %.0f nodes and %.0f edges sampled a batch on average "
                    "(%" PRIu64 " nodes)\n",
                    ep + 1, enc_avg[0], enc_avg[1], meta->nodes);
            enc_before[0] = enc.nodes_sampled, enc_before[1] = enc.edges_sampled, enc_before[2] = enc.batches;
        }
        printf("epoch %" PRIu32 "/%" PRId64 " loss=%.6f", ep + 1, c->train.epochs, loss);
        bool last = ep + 1 == (uint32_t)c->train.epochs, evald = false, tested = false;
        struct link_metrics v = {0}, tv = {0};
        if (meta->split[LINK_VALID].rows && ((ep + 1) % (uint32_t)c->train.eval_every == 0 || last)) {
            if ((rc = evaluate(&m, t.enc, &eout, &o, split[LINK_VALID], meta->split[LINK_VALID].rows, &e, &v, err,
                               sizeof err))) {
                stopped_or_failed(rc, ep, err, &code);
                goto out;
            }
            evald = true;
            printf(" valid_mrr=%.6f valid_hits@1=%.6f valid_hits@10=%.6f", v.mrr, v.hits1, v.hits10);
            /* with early stopping, the test split with every validation:
             * the final line then gives the best epoch's */
            if (patience > 0 && meta->split[LINK_TEST].rows) {
                if ((rc = evaluate(&m, t.enc, &eout, &o, split[LINK_TEST], meta->split[LINK_TEST].rows, &e, &tv, err,
                                   sizeof err))) {
                    stopped_or_failed(rc, ep, err, &code);
                    goto out;
                }
                tested = true;
            }
        }
        const double seconds = sl_now() - t1, edges_per_s = (double)meta->split[LINK_TRAIN].rows / train_s;
        printf(" seconds=%.3f edges_per_s=%.0f\n", seconds, edges_per_s);
        fflush(stdout);
        if (evald) { /* a tie is not better: the first of equal epochs is the best */
            last_v = v, have_v = true;
            if (isnan(best) || v.mrr > best) {
                best = v.mrr, best_epoch = ep + 1, best_v = v, best_t = tv, best_has_t = tested;
                since_best = 0;
            } else {
                since_best++;
            }
            stopped = patience > 0 && since_best >= (uint64_t)patience && !last;
        }
        last_t = tv, have_last_t = tested;
        if ((rc = save(r, &m, ooc_open ? &x : NULL, t.enc, ep + 1, steps, best_epoch, err, sizeof err))) {
            fprintf(stderr, "gnnlaunch: %s\n", err);
            goto out;
        }
        done = ep + 1;
        struct linkout_epoch rec = {.epoch = ep + 1, .epochs = (uint32_t)c->train.epochs, .loss = loss,
                                    .lr = c->train.lr, .seconds = seconds, .train_s = train_s,
                                    .edges_per_s = edges_per_s, .valid = evald ? &v : NULL,
                                    .test = tested ? &tv : NULL, .ooc = r->ooc, .encoder = enc_on};
        if (r->ooc) {
            rec.swaps = x.st.swaps, rec.swaps_planned = x.plan.swaps, rec.written_back = ep_out.writes;
            rec.read_bytes = ep_out.bytes_read, rec.write_bytes = ep_out.bytes_written;
            rec.buffer_wait_s = (double)ep_out.wait_ns * 1e-9;
            rec.bucket_read_s = x.st.read_buckets_s, rec.slices_train_s = x.st.train_s;
        }
        rec.enc_nodes = enc_avg[0], rec.enc_edges = enc_avg[1];
        linkout_epoch(&mo, &rec);
        if (stopped) {
            fprintf(stderr,
                    "gnnlaunch: early stop after epoch %" PRIu32 ": valid_mrr has not improved for %" PRId64
                    " evaluation%s (train.early_stop_patience); the best was epoch %" PRIu32
                    " with valid_mrr %.4f; stopping the run\n",
                    ep + 1, patience, patience == 1 ? "" : "s", best_epoch, best);
            break;
        }
    }
    /* the test metrics: stopped early, the best epoch's (ranked with its
     * validation); else the last epoch's tables, ranked with its validation
     * under early stopping, else now */
    struct link_metrics tm = {0};
    if (stopped)
        tm = best_has_t ? best_t : tm;
    else if (have_last_t)
        tm = last_t;
    else if (meta->split[LINK_TEST].rows &&
             (rc = evaluate(&m, t.enc, &eout, &o, split[LINK_TEST], meta->split[LINK_TEST].rows, &e, &tm, err,
                            sizeof err))) {
        stopped_or_failed(rc, (uint32_t)c->train.epochs, err, &code);
        goto out;
    }
    /* the final tables as plain .npy beside the checkpoints; a failure
     * here loses nothing the checkpoint does not hold: a warning */
    if ((r->ooc ? predict_write_npy_from(np[0], "<f4", m.nodes, m.d, 4, linkooc_table_bytes, &x.view[0], err, sizeof err)
                : predict_write_npy(np[0], "<f4", m.nodes, m.d, 4, m.node, err, sizeof err)) ||
        predict_write_npy(np[1], "<f4", m.relations, m.d, 4, m.rel, err, sizeof err))
        fprintf(stderr, "gnnlaunch: warning: %s; the tables are in the last checkpoint's node_emb and rel_emb\n", err);
    else
        fprintf(stderr, "gnnlaunch: embeddings written to %s and %s\n", np[0], np[1]);
    /* with the encoder, also what the decoder scores: every node encoded */
    if (enc_on && (encode_table(&m, &enc, &eout, &e, err, sizeof err) ||
                   (r->ooc ? predict_write_npy_from(np[2], "<f4", m.nodes, m.d, 4, enc_bytes, &eout, err, sizeof err)
                           : predict_write_npy(np[2], "<f4", m.nodes, m.d, 4, eout.table, err, sizeof err))))
        fprintf(stderr, "gnnlaunch: warning: %s; the encoder's weights are in the last checkpoint\n", err);
    else if (enc_on)
        fprintf(stderr, "gnnlaunch: encoded embeddings written to %s\n", np[2]);
    const double secs = sl_now() - t0;
    printf("test_mrr=%.6f test_hits@1=%.6f test_hits@10=%.6f epochs=%" PRIu32 " seconds=%.2f\n", tm.mrr, tm.hits1,
           tm.hits10, done, secs);
    fflush(stdout);
    linkout_final(&mo, &(struct linkout_final){.complete = true, .test = meta->split[LINK_TEST].rows ? &tm : NULL,
                                               .valid = stopped ? &best_v : have_v ? &last_v : NULL,
                                               .epochs = done, .best_epoch = best_epoch, .stopped_early = stopped,
                                               .seconds = secs});
    finished = true;
    code = 0;
out:
    if (!finished) /* failed or interrupted: the file still ends with its final object */
        linkout_final(&mo, &(struct linkout_final){.valid = have_v ? &last_v : NULL, .epochs = done,
                                                   .best_epoch = best_epoch, .seconds = sl_now() - t0});
    lout->metrics_failed = mo.metrics.failed;
    lout->tboard_failed = mo.tboard_failed;
    /* the layout is a working copy: the checkpoints hold every finished epoch */
    if (ooc_open)
        linkooc_free(&x, true);
    link_known_free(&known);
    link_trainer_free(&t);
    linkenc_free(&enc);
    free(eout.table);
    if (eout.file.fd >= 0)
        close(eout.file.fd);
    link_model_free(&m);
    for (int s = 0; s < LINK_SPLITS; s++)
        free(split[s]);
    sigaction(SIGINT, &old_int, NULL);
    sigaction(SIGTERM, &old_term, NULL);
    return code;
}
