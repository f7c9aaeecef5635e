/* trainer_main.c - gnn-trainer's training loop (DESIGN.md sections 2 and
 * 6; docs/training.md): pops extracted batches, has the compute backend
 * (stages/trainer_backend.h; the CPU one, trainer_cpu.c) gather their
 * input rows from the feature buffer by slot alias, train on training
 * batches (forward, backward, gradient all-reduce over the ranks through a
 * reducer (stages/reducer.h), Adam step) and evaluate validation and test
 * batches with gradients off, then passes each batch on to the releaser.
 * This file knows no arithmetic: epochs, padding steps, evaluation, the
 * results page, checkpoints and resume, the same for every backend.
 *
 * Batches and epochs. The trainer knows the rank's batch stream
 * (struct schedule, the same definition the sampler uses): batch
 * number g says which epoch and split a batch belongs to. Batches may
 * arrive out of order (several extractor threads); each is handled as it
 * comes and counted against its epoch. An epoch is complete when all its
 * training batches, its validation batches (evaluation epochs) and, for
 * the last one, the test batches are in; the trainer then publishes the
 * epoch's counts in the results page (ipc/results.h), from which the
 * launcher prints the epoch line.
 *
 * Steps across ranks. Ranks' shares of the training split differ by at
 * most one target, so their batch counts per epoch may differ by one.
 * Every rank takes the same number of steps per epoch - the largest batch
 * count of any rank: after its last training batch of an epoch a rank with
 * fewer batches takes padding steps that contribute zero gradient and zero
 * weight. Each step all-reduces [gradients, weight] (rank-order sum, so
 * every rank gets the same bits) and applies Adam to gradients / total
 * weight when the weight is positive; so every rank holds the same
 * parameters after every step. With one rank there is no all-reduce.
 * A multi-node run (docs/multinode.md) is the same with the global rank
 * and world (layout.h): the sum runs over every rank of every node in
 * global rank order (stages/trainer_reduce.h), so K nodes of R ranks take
 * the steps one node of K*R ranks would, and only global rank 0 writes
 * checkpoints.
 *
 * Checkpoints. When an epoch's training pass is complete, rank 0 writes
 * <train.checkpoint_dir>/epoch-<N>.safetensors (N = epochs complete):
 * every parameter, Adam's moments (adam.m.<name>, adam.v.<name>) and
 * metadata (format, version, epoch, step, seed, model, config), atomically
 * (ops/ckpt.h). With --resume (and --start-epoch=E from the launcher)
 * every rank loads epoch-E's checkpoint before its first batch.
 * Randomness needs no saved state: dropout masks derive from (seed, epoch,
 * rank, batch number) and the sampler's streams from the same numbers.
 *
 * The dataset. At every epoch boundary (its training pass complete, and
 * before it is published) every rank compares the dataset's files with
 * the stamp gnnlaunch verified them with (core/dataset_verify.h; the run
 * directory's copy): a file written, replaced or resized during the run
 * fails the stage before the epoch's checkpoint is written, so no
 * checkpoint holds training on bytes that changed.
 *
 * Non-finite values (train.on_nonfinite). A batch whose loss (any split)
 * or, for a training batch, whose gradient holds a NaN or an infinity is
 * never stepped on. "fail" (the default) stops the stage at once, naming
 * the epoch, the batch and the nodes whose input rows are not finite (or
 * saying that none is: the model diverged), so no checkpoint is written
 * from that epoch; "skip-batch" leaves the parameters as they were (on
 * several ranks this rank contributes nothing to the step), keeps the
 * batch out of the epoch's counts and says so on stderr.
 *
 * Exit: 0 at the end of the stream with every epoch published; 3 with a
 * message on failure (a damaged batch, a checkpoint that cannot be
 * written or does not match the model, a stream that ended early, a
 * dataset file changed during the run, a non-finite loss or gradient
 * under train.on_nonfinite = "fail"). */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include "core/dataset_verify.h"
#include "stages/trainer_reduce.h"
#include "ipc/results.h"
#include "ops/ckpt.h"
#include "ops/model.h"
#include "stages/sampler.h"
#include "stages/schedule.h"
#include "stages/stage.h"
#include "stages/trainer.h"
#include "stages/trainer_backend.h"
#include "stages/predict.h"
#ifdef SLUICE_TRAINER_CUDA
#include "stages/featbuf_cuda.h"
#endif

#define DROPOUT_SALT 0xd20b0f1e5eedull

/* One epoch's tallies at this rank. */
struct epoch {
    uint64_t batches[BATCH_SPLITS];
    double loss_sum, val_loss_sum;
    uint64_t labelled[BATCH_SPLITS], correct[BATCH_SPLITS];
    double busy_s, reduce_s;
    double t_trained; /* now_s() after the epoch's last training step (0: not yet) */
    bool trained, published;
};

struct trainer {
    struct stage st;
    struct model_config mc;
    const struct trainer_backend_ops *be;
    struct trainer_backend *b;
    struct model_tensor tensors[MODEL_TENSORS_MAX]; /* the parameters' layout (checkpoints) */
    uint32_t ntensors;
#ifdef SLUICE_TRAINER_CUDA
    struct featbuf_cuda fbc; /* a GPU rank's feature rows, exported to the extractors */
#endif
    struct reducer *coll;       /* the gradient collective (shm within the node, TCP across nodes); NULL: one rank */
    struct results res;
    struct schedule sched;
    uint64_t steps_per_epoch; /* the most training batches any rank has in an epoch */
    uint64_t steps_done;      /* steps taken in the run (resumed ones included): the learning rate's clock */
    float lr;                 /* the learning rate of the last step */
    struct epoch *ep;         /* (epochs) */
    uint32_t epochs, start_epoch, published;
    size_t nparams;
    double t_epoch; /* when the previous epoch was published */
    struct dataset_verify_stamp data_stamp; /* the dataset's files at launch */
    uint64_t skipped;     /* batches skipped for non-finite values (on_nonfinite = "skip-batch") */
    bool in_step_said;    /* check_in_step's line is out */
    int64_t drift_rank;   /* SLUICE_FAULT_DRIFT_RANK: the global rank whose parameters drift; -1: none */
    int64_t nan_node;     /* SLUICE_FAULT_NAN_NODE: the node whose input row is poisoned; -1: none */
    struct predict_out {  /* --predict: where the outputs go */
        struct predict_files files;
        uint32_t classes, width;
        float *hl, *he; /* one batch's logits and embeddings on the host */
    } pr;
};

static double now_s(void)
{
    return (double)sl_now_ns() / 1e9;
}

/* The compute backend of this rank (stages/trainer_backend.h): the CPU
 * one for a rank without a device, the CUDA one for a GPU rank (gnnlaunch
 * --gpus: --device). A gnn-trainer built without CUDA refuses a GPU rank
 * plainly rather than train on the CPU while the user asked for a GPU. */
static const struct trainer_backend_ops *pick_backend(struct stage *st)
{
    if (st->args.device < 0)
        return &trainer_cpu_backend;
#ifdef SLUICE_TRAINER_CUDA
    return &trainer_cuda_backend;
#else
    stage_fail(st,
               "--device=%d: this gnn-trainer was built without CUDA, so it cannot train on a GPU, and no "
               "gnn-trainer-gpu was built next to it; rebuild with the CUDA toolkit and NCCL (docs/gpu.md) or train "
               "on the CPU with gnnlaunch --cpu",
               st->args.device);
#endif
}

/* The backend's host view of the parameters and Adam's state. */
static void host_state(struct trainer *t, struct trainer_state *hs)
{
    char msg[1024];
    if (t->be->state(t->b, hs, msg, sizeof msg) != 0)
        stage_fail(&t->st, "%s", msg);
    if (hs->n != t->nparams)
        stage_fail(&t->st, "the %s backend holds %zu parameters, the model has %zu", t->be->name, hs->n, t->nparams);
}

/* ---- the dataset under the run ---------------------------------------------------------- */

/* The dataset's files as gnnlaunch verified them (the run directory's
 * copy), or as they are now when the run directory has none (a stage
 * started by a test, not by gnnlaunch). */
static void dataset_stamp_load(struct trainer *t)
{
    struct stage *st = &t->st;
    char path[PATH_MAX], msg[1024];
    if (sl_path_join(path, sizeof path, st->args.run_dir, DATASET_VERIFY_RUN_STAMP) != 0)
        stage_fail(st, "%s: path too long", st->args.run_dir);
    int rc = dataset_verify_stamp_read(path, &t->data_stamp, msg, sizeof msg);
    if (rc == -ENOENT)
        rc = dataset_verify_stamp_take(st->cfg.dataset.path, &st->meta, &t->data_stamp, msg, sizeof msg);
    if (rc)
        stage_fail(st, "%s", msg);
}

/* Fails the stage (exit 3) when a file of the dataset is not the one the
 * run was launched with. A few stat calls; at every epoch boundary. */
static void dataset_unchanged(struct trainer *t, uint32_t epoch)
{
    struct stage *st = &t->st;
    struct dataset_verify_stamp now;
    char msg[1024], what[512];
    if (dataset_verify_stamp_take(st->cfg.dataset.path, &st->meta, &now, msg, sizeof msg) != 0)
        stage_fail(st, "epoch %" PRIu32 ": the dataset changed during the run: %s; no checkpoint is written from this "
                   "epoch", epoch, msg);
    int d = dataset_verify_stamp_diff(&t->data_stamp, &now);
    if (d < 0)
        return;
    dataset_verify_stamp_explain(&t->data_stamp, &now, d, what, sizeof what);
    stage_fail(st, "epoch %" PRIu32 ": %s/%s changed during the run: %s; the epoch may have read the changed bytes, so "
               "no checkpoint is written from it (the earlier ones are from the dataset as verified). Put the dataset "
               "back or make it again; the next gnnlaunch verifies it again", epoch, st->cfg.dataset.path,
               d < DATASET_FILES ? st->meta.f[d].file : DATASET_META_FILE, what);
}

/* ---- checkpoints ------------------------------------------------------------------------ */

static int mkdir_p(const char *dir)
{
    char tmp[PATH_MAX];
    snprintf(tmp, sizeof tmp, "%s", dir);
    for (char *p = tmp + 1; *p; p++)
        if (*p == '/') {
            *p = '\0';
            if (mkdir(tmp, 0755) != 0 && errno != EEXIST)
                return -errno;
            *p = '/';
        }
    if (mkdir(tmp, 0755) != 0 && errno != EEXIST)
        return -errno;
    return 0;
}

static void save_checkpoint(struct trainer *t, uint32_t epochs_done)
{
    struct stage *st = &t->st;
    const char *dir = st->cfg.train.checkpoint_dir;
    char path[PATH_MAX], msg[1024];
    int rc = mkdir_p(dir);
    if (rc)
        stage_fail(st, "cannot create train.checkpoint_dir %s: %s", dir, strerror(-rc));
    if (ckpt_path(path, sizeof path, dir, epochs_done) != 0)
        stage_fail(st, "train.checkpoint_dir %s: path too long", dir);
    uint32_t nt = t->ntensors;
    struct trainer_state hs;
    host_state(t, &hs);
    struct ckpt_tensor *ts = calloc((size_t)nt * 3, sizeof *ts);
    char(*names)[64] = calloc((size_t)nt * 2, sizeof *names);
    if (!ts || !names)
        stage_fail(st, "out of memory writing a checkpoint");
    const float *p = hs.params;
    for (uint32_t i = 0; i < nt; i++) {
        const struct model_tensor *mt = &t->tensors[i];
        snprintf(names[2 * i], sizeof names[0], "adam.m.%s", mt->name);
        snprintf(names[2 * i + 1], sizeof names[0], "adam.v.%s", mt->name);
        const float *src[3] = {p + mt->offset, hs.adam_m + mt->offset, hs.adam_v + mt->offset};
        const char *nm[3] = {mt->name, names[2 * i], names[2 * i + 1]};
        for (int k = 0; k < 3; k++)
            ts[k * nt + i] = (struct ckpt_tensor){.name = nm[k],
                                                  .data = src[k],
                                                  .dtype = "F32",
                                                  .ndim = mt->ndim,
                                                  .shape = {mt->shape[0], mt->shape[1]}};
    }
    char epoch_s[32], step_s[32], seed_s[32], model_s[256], rng_s[96];
    snprintf(epoch_s, sizeof epoch_s, "%" PRIu32, epochs_done);
    snprintf(step_s, sizeof step_s, "%" PRIu64, *hs.step);
    snprintf(seed_s, sizeof seed_s, "%" PRId64, st->cfg.train.seed);
    snprintf(rng_s, sizeof rng_s, "counter-based: splitmix64 of (seed %" PRId64 ", epoch, rank, batch)",
             st->cfg.train.seed);
    trainer_model_text(&t->mc, model_s, sizeof model_s);
    char *cfg_text = NULL;
    size_t cfg_len;
    if (sl_read_file(st->args.config, 1 << 20, &cfg_text, &cfg_len, msg, sizeof msg) != 0)
        stage_fail(st, "%s", msg);
    char dataset_s[24]; /* what --resume checks the dataset against (ckpt_check_dataset) */
    uint64_t dataset_id = dataset_meta_identity(&st->meta);
    snprintf(dataset_s, sizeof dataset_s, "%016" PRIx64, dataset_id);
    char run_s[24], run_text[2048]; /* the run it belongs to (launcher/ckptdir.h) */
    snprintf(run_s, sizeof run_s, "%016" PRIx64, config_run_identity(&st->cfg, dataset_id));
    config_run_text(&st->cfg, run_text, sizeof run_text);
    const char *meta[] = {"format", "sluice-checkpoint", "version", "1",   "epoch", epoch_s, "step",   step_s,
                          "seed",   seed_s,              "rng",     rng_s, "model", model_s, "config", cfg_text,
                          CKPT_META_DATASET, dataset_s, CKPT_META_DATASET_PATH, st->cfg.dataset.path,
                          CKPT_META_RUN, run_s, CKPT_META_RUN_CONFIG, run_text};
    /* every configuration key as a field of its own ("model.hidden": "32"),
     * and the widths the dataset decides, so that a reader rebuilds the
     * model without parsing `config` (docs/checkpoints.md) */
    size_t nkeys = config_key_count(), nbase = SL_ARRAY_LEN(meta), nall = nbase + 2 * (nkeys + 2);
    const char **kv = calloc(nall, sizeof *kv);
    char *vals = calloc(nkeys + 2, 256);
    if (!kv || !vals)
        stage_fail(st, "out of memory writing a checkpoint");
    memcpy(kv, meta, sizeof meta);
    size_t m = nbase;
    for (size_t i = 0; i < nkeys; i++) {
        config_key_text(&st->cfg, i, vals + i * 256, 256);
        kv[m++] = config_key_name(i);
        kv[m++] = vals + i * 256;
    }
    snprintf(vals + nkeys * 256, 256, "%" PRIu32, t->mc.in_dim);
    snprintf(vals + (nkeys + 1) * 256, 256, "%" PRIu32, t->mc.classes);
    kv[m++] = "model.in_dim";
    kv[m++] = vals + nkeys * 256;
    kv[m++] = "model.classes";
    kv[m++] = vals + (nkeys + 1) * 256;
    rc = ckpt_write(path, ts, nt * 3, kv, (uint32_t)(m / 2), msg, sizeof msg);
    free(kv);
    free(vals);
    if (rc) /* ckpt_write removed its partial file; earlier checkpoints are as they were */
        stage_fail(st, "epoch %" PRIu32 ": %s; %s", epochs_done, msg,
                   epochs_done > 1 ? "the checkpoints before it are untouched: make room, then continue from the "
                                     "newest with gnnlaunch --resume"
                                   : "no checkpoint was kept: make room, then start the run again");
    free(cfg_text);
    free(names);
    free(ts);
}

/* Reads checkpoint `path` into the backend: the parameters, and with
 * adam also Adam's moments and step count. what: the flag in messages
 * ("--resume", "--predict"). Fails the stage on any mismatch. */
static void load_tensors(struct trainer *t, const char *path, const char *what, bool adam)
{
    struct stage *st = &t->st;
    char msg[1024], want[256];
    struct ckpt c;
    if (ckpt_read(&c, path, msg, sizeof msg) != 0)
        stage_fail(st, "%s: %s", what, msg);
    trainer_model_text(&t->mc, want, sizeof want);
    const char *fmt = ckpt_meta(&c, "format"), *model = ckpt_meta(&c, "model"), *step = ckpt_meta(&c, "step");
    if (!fmt || strcmp(fmt, "sluice-checkpoint") || !model || !step)
        stage_fail(st, "%s: %s is not a Sluice checkpoint (no format, model or step metadata)", what, path);
    if (strcmp(model, want))
        stage_fail(st, "%s: %s holds a model with %s, but this configuration asks for %s; use the configuration it "
                   "was made with%s",
                   what, path, model, want, adam ? ", or start afresh without --resume" : "");
    struct trainer_state hs;
    host_state(t, &hs);
    float *p = hs.params;
    for (uint32_t i = 0; i < t->ntensors; i++) {
        const struct model_tensor *mt = &t->tensors[i];
        char name[3][64];
        snprintf(name[0], sizeof name[0], "%s", mt->name);
        snprintf(name[1], sizeof name[1], "adam.m.%s", mt->name);
        snprintf(name[2], sizeof name[2], "adam.v.%s", mt->name);
        float *dst[3] = {p + mt->offset, hs.adam_m + mt->offset, hs.adam_v + mt->offset};
        for (int k = 0; k < (adam ? 3 : 1); k++) {
            uint32_t ndim;
            uint64_t shape[CKPT_MAX_NDIM];
            const float *src = ckpt_find(&c, name[k], "F32", &ndim, shape);
            if (!src || ndim != mt->ndim || shape[0] != mt->shape[0] || (ndim == 2 && shape[1] != mt->shape[1]))
                stage_fail(st, "%s: %s has no F32 tensor %s of shape [%" PRIu64 ", %" PRIu64 "]", what, path,
                           name[k], mt->shape[0], mt->shape[1]);
            memcpy(dst[k], src, mt->count * sizeof(float));
        }
    }
    if (adam)
        *hs.step = strtoull(step, NULL, 10);
    ckpt_free(&c);
    if (t->be->state_loaded(t->b, msg, sizeof msg) != 0)
        stage_fail(st, "%s: %s", what, msg);
}

static void load_checkpoint(struct trainer *t)
{
    struct stage *st = &t->st;
    const char *dir = st->cfg.train.checkpoint_dir;
    char path[PATH_MAX], msg[1024];
    uint32_t epoch;
    if (ckpt_latest(dir, path, sizeof path, &epoch, msg, sizeof msg) != 0)
        stage_fail(st, "--resume: %s", msg);
    if (epoch != t->start_epoch)
        stage_fail(st, "--resume: the newest checkpoint in %s is epoch %" PRIu32 ", the launcher asked for %" PRIu32, dir,
                   epoch, t->start_epoch);
    load_tensors(t, path, "--resume", true);
    struct trainer_state hs;
    host_state(t, &hs);
    stage_note(st, "resumed from %s (epoch %" PRIu32 ", step %" PRIu64 ")", path, epoch, *hs.step);
}

/* ---- prediction (gnnlaunch --predict; docs/inference.md) --------------------------------- */

/* The launcher's files (launcher/predict.h): RUNDIR/predict names the
 * checkpoint and the output directory, where logits.npy, embeddings.npy
 * and pred.npy exist at their full size with their headers, and
 * nodes.npy holds the predicted node ids in ascending order: a node's row
 * in the outputs is its position there. Every rank writes the rows of
 * its own targets into the shared mappings (disjoint rows). */
static void predict_open(struct trainer *t)
{
    struct stage *st = &t->st;
    struct predict_out *o = &t->pr;
    char path[PATH_MAX + 16], msg[1024], ckpt[PATH_MAX] = "", out[PATH_MAX] = "";
    snprintf(path, sizeof path, "%s/" PREDICT_RUN_FILE, st->args.run_dir);
    if (predict_read_run_file(path, ckpt, sizeof ckpt, out, sizeof out, msg, sizeof msg) != 0)
        stage_fail(st, "--predict: %s", msg);
    load_tensors(t, ckpt, "--predict", false);
    o->classes = t->mc.classes;
    o->width = model_embed_width(&t->mc);
    if (predict_map(&o->files, out, msg, sizeof msg) != 0)
        stage_fail(st, "--predict: %s", msg);
    if (o->files.classes != o->classes || o->files.width != o->width)
        stage_fail(st, "--predict: %s holds %" PRIu32 " classes and %" PRIu32 "-wide embeddings, the model %" PRIu32
                   " and %" PRIu32, out, o->files.classes, o->files.width, o->classes, o->width);
    size_t rows = t->sched.p.batch_size;
    o->hl = malloc(rows * o->classes * sizeof(float));
    o->he = malloc(rows * o->width * sizeof(float));
    if (!o->hl || !o->he)
        stage_fail(st, "--predict: out of memory for a batch's outputs");
    stage_note(st, "predicting %" PRIu64 " nodes with %s into %s", o->files.n, ckpt, out);
}

/* The outputs of the batch just forwarded into its targets' rows. */
static void predict_write(struct trainer *t, const struct batch_view *v)
{
    struct predict_out *o = &t->pr;
    char msg[1024];
    uint32_t b = batch_targets(v);
    if (t->be->outputs(t->b, o->hl, o->he, msg, sizeof msg) != 0)
        stage_fail(&t->st, "--predict: %s", msg);
    for (uint32_t i = 0; i < b; i++) {
        int64_t row = predict_row(&o->files, v->nodes[i]);
        if (row < 0)
            stage_fail(&t->st, "--predict: node %" PRIu64 " of batch %" PRIu64 " is not among the predicted nodes",
                       v->nodes[i], v->h.batch);
        predict_put(&o->files, (uint64_t)row, o->hl + (size_t)i * o->classes, o->he + (size_t)i * o->width);
    }
}

static void predict_close(struct trainer *t)
{
    char msg[512];
    if (predict_unmap(&t->pr.files, msg, sizeof msg) != 0)
        stage_fail(&t->st, "--predict: %s", msg);
    free(t->pr.hl);
    free(t->pr.he);
}

/* ---- steps ------------------------------------------------------------------------------ */

/* Heartbeats while a gradient sum waits for the other ranks. */
static int reduce_tick(void *arg)
{
    stage_heartbeat(arg);
    return 0;
}

/* The clipping factor of a gradient whose sum of squares (reduced: over
 * the ranks) is sumsq and whose step scale is scale (train.grad_clip; 1
 * when off: nothing is computed then). */
static double clip_factor(struct trainer *t, bool reduced, double scale)
{
    if (!(t->st.cfg.train.grad_clip > 0))
        return 1.0;
    double sumsq;
    char msg[512];
    if (t->be->grad_sqnorm(t->b, reduced, &sumsq, msg, sizeof msg) != 0)
        stage_fail(&t->st, "train.grad_clip: %s", msg);
    return trainer_clip_factor(&t->st.cfg, sqrt(sumsq) * scale);
}

/* Ranks in step (docs/training.md, "Ranks in step"): after every epoch's
 * last step, every rank of a run of several hashes its parameters (XXH3
 * of their bits) and the ranks compare the digests with one all-reduce
 * of 33 floats: each of the digest's 16 nibbles b, b squared, and 1. The
 * nibbles agree on every rank exactly when W * sum(b^2) = (sum b)^2 for
 * each (Cauchy-Schwarz). Every sum is an integer of at most 225 W, below
 * 2^24 for any world up to RUN_WORLD_MAX, so exact in float in whatever
 * order the reducer adds (bytes would not be: 65025 W passes 2^24 at 259
 * ranks). A difference is a bug (the reduce and the steps give every rank
 * the same bits): the rank stops the run naming the epoch. Every rank
 * makes the call at the same point of its sequence of reducer calls:
 * after the step that ends an epoch of the step clock (step). */
static void check_in_step(struct trainer *t, uint32_t epoch)
{
    if (!t->coll)
        return;
    struct stage *st = &t->st;
    struct trainer_state hs;
    host_state(t, &hs);
    if (t->drift_rank == (int64_t)run_global_rank(&st->args) && hs.n > 0) { /* the test hook below */
        char msg[512];
        hs.params[0] = nextafterf(hs.params[0], INFINITY);
        if (t->be->state_loaded(t->b, msg, sizeof msg) != 0)
            stage_fail(st, "%s", msg);
    }
    uint64_t h = XXH3_64bits(hs.params, hs.n * sizeof *hs.params);
    _Static_assert(225ull * RUN_WORLD_MAX < (1ull << 24), "the digest's sums must stay exact in float");
    float v[33];
    for (int i = 0; i < 16; i++) {
        unsigned b = (unsigned)(h >> (4 * i)) & 15u;
        v[i] = (float)b;
        v[16 + i] = (float)(b * b);
    }
    v[32] = 1.0f;
    int rc = reducer_allreduce_host(t->coll, v, SL_ARRAY_LEN(v));
    stage_heartbeat(st);
    if (rc == -EPIPE)
        exit(0); /* a peer died: the launcher is tearing the run down */
    if (rc)
        stage_fail(st, "comparing the ranks' parameters after epoch %" PRIu32 ": %s", epoch + 1, strerror(-rc));
    uint64_t world = (uint64_t)v[32];
    bool same = world == run_world(&st->args);
    for (int i = 0; i < 16 && same; i++)
        same = world * (uint64_t)v[16 + i] == (uint64_t)v[i] * (uint64_t)v[i];
    if (!same)
        stage_fail(st, "the %" PRIu32 " ranks' parameters differ after epoch %" PRIu32 " (this rank's XXH3 %016" PRIx64
                   "): the ranks are out of step, which is a bug; please report it with the run's config",
                   run_world(&st->args), epoch + 1, h);
    if (!t->in_step_said && run_global_rank(&st->args) == 0) {
        fprintf(stderr, "gnn-trainer rank 0: the %" PRIu32 " ranks' parameters are identical after epoch %" PRIu32
                " (XXH3 %016" PRIx64 "); compared after every epoch\n", run_world(&st->args), epoch + 1, h);
        t->in_step_said = true;
    }
}

/* One optimizer step, identical on every rank: real = this rank has a
 * batch's gradients in the backend, else it contributes nothing. Every
 * call is one step of the learning rate's clock, on every rank alike. */
static void step(struct trainer *t, bool real, struct epoch *e)
{
    t->lr = (float)trainer_lr_at(&t->st.cfg, t->steps_done++, t->steps_per_epoch);
    t->be->set_lr(t->b, t->lr);
    if (!t->coll) {
        if (real && t->be->step(t->b, false, (float)clip_factor(t, false, 1.0)) != 0)
            stage_fail(&t->st, "optimizer step failed");
        return;
    }
    double t0 = now_s();
    float w;
    int rc = t->be->reduce(t->b, t->coll, real, &w); /* waits, heartbeating (reduce_tick) */
    stage_heartbeat(&t->st);
    if (rc == -EPIPE)
        exit(0); /* a peer died: the launcher is tearing the run down */
    if (rc)
        stage_fail(&t->st, "gradient all-reduce: %s", strerror(-rc));
    double dt = now_s() - t0;
    e->reduce_s += dt;
    metrics_add(&t->st.block->wait_ns, (uint64_t)(dt * 1e9));
    bool finite = true;
    char msg[512];
    if (w > 0 && t->be->grads_finite(t->b, true, &finite, msg, sizeof msg) != 0)
        stage_fail(&t->st, "checking the gradient sum: %s", msg);
    if (!finite)
        stage_fail(&t->st, "the gradient summed over the ranks holds NaN or infinity: another rank's batch had a "
                   "non-finite gradient (that rank names it); stopped before this step");
    if (w > 0) {
        double clip = clip_factor(t, true, 1.0 / w);
        float scale = clip == 1.0 ? 1.0f / w : (float)(clip / w); /* unclipped: the bits of 1 / w as ever */
        if (t->be->step(t->b, true, scale) != 0)
            stage_fail(&t->st, "optimizer step failed");
    }
    /* the ranks compare their parameters at the step clock's epoch
     * boundaries: every rank makes the same sequence of steps (one
     * all-reduce each), whereas the batch that completes an epoch can come
     * after the next epoch's first ones on one rank and not on another
     * (pipeline.ordered = false), so the comparison's all-reduce tied to
     * the batches met a gradient all-reduce on another rank */
    if (t->steps_per_epoch && t->steps_done % t->steps_per_epoch == 0)
        check_in_step(t, (uint32_t)(t->steps_done / t->steps_per_epoch - 1));
}

/* Publishes epoch e once all of it is in (waiting, briefly, for the
 * launcher to read the record window's old epoch). */
static void maybe_publish(struct trainer *t, uint32_t e)
{
    struct epoch *ep = &t->ep[e];
    const struct schedule *s = &t->sched;
    if (ep->published || ep->batches[BATCH_TRAIN] != schedule_pass_batches(s, e, BATCH_TRAIN))
        return;
    if (ep->batches[BATCH_VAL] != schedule_pass_batches(s, e, BATCH_VAL))
        return;
    if (ep->batches[BATCH_TEST] != schedule_pass_batches(s, e, BATCH_TEST))
        return;
    dataset_unchanged(t, e); /* what the epoch evaluated on too */
    struct results_rec *rec;
    while (!(rec = results_slot(&t->res, (uint32_t)t->st.args.rank, e))) {
        stage_heartbeat(&t->st);
        usleep(20000);
    }
    rec->loss_sum = ep->loss_sum;
    rec->val_loss_sum = ep->val_loss_sum;
    rec->lr = t->lr;
    rec->train_batches = ep->batches[BATCH_TRAIN];
    rec->train_labelled = ep->labelled[BATCH_TRAIN];
    rec->train_correct = ep->correct[BATCH_TRAIN];
    rec->val_labelled = ep->labelled[BATCH_VAL];
    rec->val_correct = ep->correct[BATCH_VAL];
    rec->test_labelled = ep->labelled[BATCH_TEST];
    rec->test_correct = ep->correct[BATCH_TEST];
    double now = now_s();
    rec->seconds = now - t->t_epoch;
    /* training until the last step; the rest is evaluation (and the checkpoint) */
    rec->train_s = ep->t_trained > t->t_epoch ? SL_MIN(ep->t_trained - t->t_epoch, rec->seconds) : 0.0;
    rec->eval_s = rec->seconds - rec->train_s;
    rec->busy_s = ep->busy_s;
    rec->reduce_s = ep->reduce_s;
    results_publish(rec, e);
    t->t_epoch = now;
    ep->published = true;
    t->published++;
}

/* ---- non-finite values ------------------------------------------------------------------ */

#define NONFINITE_NODES_SHOWN 8

/* SLUICE_FAULT_NAN_NODE=N (tests, docs/reliability.md "Test hooks"):
 * node N's feature row in the feature buffer becomes NaN whenever a batch
 * holding it reaches the trainer, as if features.bin held NaN there.
 * Host rows only (a GPU rank's rows are on the device: ignored). */
static void fault_poison(struct trainer *t, const struct batch_view *v)
{
    const struct featbuf *fb = &t->st.fb;
    if (t->nan_node < 0 || !fb->rows)
        return;
    for (uint32_t i = 0; i < batch_nodes(v); i++)
        if (v->nodes[i] == (uint64_t)t->nan_node) {
            unsigned char *row = (unsigned char *)featbuf_row(fb, v->alias[i]);
            const struct dataset_file *ff = &t->st.meta.f[DATASET_FEATURES];
            if (ff->dtype == DTYPE_F16)
                memset(row, 0xff, ff->cols * 2); /* 0xffff: a half NaN */
            else
                for (uint64_t k = 0; k < ff->cols; k++)
                    memcpy(row + k * sizeof(float), &(float){NAN}, sizeof(float));
        }
}

/* A batch found holding a value that is not finite (what: "the loss is
 * nan", "the gradient holds NaN or infinity"): under "fail" the stage
 * stops naming the epoch, the batch and the nodes whose input rows are not
 * finite; under "skip-batch" a note and a return (the caller skips it). */
static void nonfinite(struct trainer *t, const struct run_desc *d, const struct batch_view *v,
                      const struct schedule_pos *pos, const char *what)
{
    struct stage *st = &t->st;
    char msg[1024], nodes[1536] = "";
    uint32_t rows[NONFINITE_NODES_SHOWN], n = 0;
    if (t->be->nonfinite_rows(t->b, rows, NONFINITE_NODES_SHOWN, &n, msg, sizeof msg) != 0)
        snprintf(nodes, sizeof nodes, "; the input rows could not be checked: %.1000s", msg);
    else if (n == 0)
        snprintf(nodes, sizeof nodes,
                 "; every input row is finite, so the model diverged: lower train.lr or check the data");
    else {
        size_t used = (size_t)snprintf(nodes, sizeof nodes, "; %" PRIu32 " input row%s not finite, of node%s ", n,
                                       n == 1 ? " is" : "s are", n == 1 ? "" : "s");
        for (uint32_t i = 0; i < SL_MIN(n, NONFINITE_NODES_SHOWN) && used < sizeof nodes; i++)
            used += (size_t)snprintf(nodes + used, sizeof nodes - used, "%s%" PRIu64, i ? ", " : "",
                                     v->nodes[rows[i]]);
        if (used < sizeof nodes)
            snprintf(nodes + used, sizeof nodes - used, "%s (rows of features.bin; gnnprep check %.900s finds them)",
                     n > NONFINITE_NODES_SHOWN ? ", ..." : "", st->cfg.dataset.path);
    }
    static const char *const splits[BATCH_SPLITS] = {"training", "validation", "test"};
    const char *split = pos->split < BATCH_SPLITS ? splits[pos->split] : "?";
    if (st->cfg.train.on_nonfinite == CONFIG_NONFINITE_FAIL)
        stage_fail(st,
                   "epoch %" PRIu32 ", %s batch %" PRIu64 " of the epoch (from 0; batch %" PRIu64
                   " of this rank's stream): %s%s; "
                   "stopped before any checkpoint of this epoch (train.on_nonfinite = \"fail\"; \"skip-batch\" "
                   "trains on without such batches)",
                   pos->epoch + 1, split, pos->k, d->batch, what, nodes);
    t->skipped++;
    stage_note(st, "warning: epoch %" PRIu32 ", %s batch %" PRIu64 " (batch %" PRIu64 "): %s%s; skipped "
               "(train.on_nonfinite = \"skip-batch\")",
               pos->epoch + 1, split, pos->k, d->batch, what, nodes);
}

/* One batch: forward (and for training batches backward and a step). */
static void handle(struct trainer *t, const struct run_desc *d)
{
    struct stage *st = &t->st;
    char msg[1024];
    struct batch_view v;
    stage_view(st, d, 0, &v);
    if (!(*v.flags & BATCH_ALIASED))
        stage_fail(st, "batch %" PRIu64 " reached the trainer without feature-buffer slots", d->batch);
    if (st->cfg.model.kind == MODEL_GCN && st->cfg.model.gcn_norm == GCN_NORM_GRAPH && !v.deg)
        stage_fail(st, "batch %" PRIu64 " has no graph degrees, which model.gcn_norm = \"graph\" needs (a sampler "
                   "from another build?)", d->batch);
    if (d->batch >= schedule_len(&t->sched))
        stage_fail(st, "batch %" PRIu64 " is past the end of this rank's stream (%" PRIu64 " batches)", d->batch,
                   schedule_len(&t->sched));
    struct schedule_pos pos;
    schedule_at(&t->sched, d->batch, &pos);
    if (pos.epoch != d->epoch || pos.split != v.h.split || pos.targets != batch_targets(&v))
        stage_fail(st, "batch %" PRIu64 " is not what the stream says (epoch %" PRIu32 ", split %" PRIu32
                   ", %" PRIu32 " targets)",
                   d->batch, pos.epoch, pos.split, pos.targets);
    uint64_t t0 = sl_now_ns();
    metrics_busy_begin(st->block, t0); /* readers see the batch's time as it passes (ipc/metrics.h) */
    fault_poison(t, &v);
    if (t->be->gather(t->b, &v, msg, sizeof msg) != 0)
        stage_fail(st, "batch %" PRIu64 ": gather: %s", d->batch, msg);
    bool train = pos.split == BATCH_TRAIN;
    struct epoch *e = &t->ep[pos.epoch];
    uint64_t dseed = sampler_batch_seed((uint64_t)st->cfg.train.seed ^ DROPOUT_SALT, pos.epoch,
                                        run_global_rank(&st->args), d->batch);
    struct trainer_loss out;
    if (t->be->forward(t->b, &v, train, dseed, &out, msg, sizeof msg) != 0)
        stage_fail(st, "batch %" PRIu64 ": forward: %s", d->batch, msg);
    if (st->args.predict)
        predict_write(t, &v);
    uint32_t labelled = out.labelled, correct = out.correct;
    float loss = out.loss;
    bool finite = isfinite(loss);
    if (!finite) {
        char what[64];
        snprintf(what, sizeof what, "the loss is %s", isnan(loss) ? "nan" : "infinite");
        nonfinite(t, d, &v, &pos, what); /* returns only to skip the batch */
    }
    if (train && finite && labelled) {
        /* the gradient sums may start during the pass (buckets beside it)
         * unless a non-finite batch is to be skipped, which must then
         * contribute nothing; under "fail" a rank that finds one stops,
         * and the others find the sum not finite (step) */
        struct reducer *early = st->cfg.train.on_nonfinite == CONFIG_NONFINITE_FAIL ? t->coll : NULL;
        if (t->be->backward(t->b, early, msg, sizeof msg) != 0)
            stage_fail(st, "batch %" PRIu64 ": backward: %s", d->batch, msg);
        if (t->be->grads_finite(t->b, false, &finite, msg, sizeof msg) != 0)
            stage_fail(st, "batch %" PRIu64 ": %s", d->batch, msg);
        if (!finite)
            nonfinite(t, d, &v, &pos, "the gradient holds NaN or infinity");
    }
    if (!finite)
        labelled = correct = 0; /* a skipped batch counts, but adds nothing */
    e->batches[pos.split]++;
    if (pos.split == BATCH_VAL && labelled)
        e->val_loss_sum += (double)loss * labelled;
    e->labelled[pos.split] += labelled;
    e->correct[pos.split] += correct;
    if (train) {
        if (labelled) {
            e->loss_sum += (double)loss * labelled;
            float mean = (float)(e->loss_sum / (double)e->labelled[BATCH_TRAIN]); /* for the progress line */
            uint32_t bits;
            memcpy(&bits, &mean, sizeof bits);
            atomic_store_explicit(&st->block->loss_bits, bits, memory_order_relaxed);
        }
        double busy = (double)(sl_now_ns() - t0) / 1e9;
        step(t, labelled > 0, e);
        /* the rank's last training batch of the epoch: pad to the common step count */
        if (e->batches[BATCH_TRAIN] == schedule_pass_batches(&t->sched, pos.epoch, BATCH_TRAIN)) {
            for (uint64_t k = schedule_pass_batches(&t->sched, pos.epoch, BATCH_TRAIN); k < t->steps_per_epoch; k++)
                step(t, false, e); /* the last of them compares the ranks' parameters (step) */
            e->trained = true;
            e->t_trained = now_s();
            dataset_unchanged(t, pos.epoch); /* before the epoch is checkpointed */
            if (run_global_rank(&st->args) == 0) /* one writer for all nodes */
                save_checkpoint(t, pos.epoch + 1);
        }
        e->busy_s += busy;
    } else {
        e->busy_s += (double)(sl_now_ns() - t0) / 1e9;
    }
    metrics_busy_end(st->block, t0, sl_now_ns() - t0);
    metrics_add(&st->block->items, 1);
    maybe_publish(t, pos.epoch);
}

int main(int argc, char **argv)
{
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        fprintf(argc < 2 ? stderr : stdout,
                "usage: gnn-trainer --run=ID --rank=R --ranks=N --run-dir=DIR --config=FILE --metrics-block=I\n"
                "                   [--start-epoch=E] [--resume] [--trace] [--node=I --nodes=K]\n"
                "                   [--device=D [--nccl-id=HEX]]\n\n"
                "The training stage of a run. gnnlaunch starts it; see docs/training.md. Without --device\n"
                "it trains on the CPU; with --device (gnnlaunch --gpus) on that GPU with the CUDA backend,\n"
                "in a build with CUDA (docs/gpu.md).\n");
        return argc < 2 ? 2 : 0;
    }
    static struct trainer t;
    struct stage *st = &t.st;
    char msg[1024], name[SHM_NAME_MAX];
    stage_open(st, argc, argv, STAGE_NEED_FEATBUF);
    const struct dataset_file *ff = &st->meta.f[DATASET_FEATURES];
    /* pipeline.trainer_threads, or auto: the rank's share of the CPUs. The
     * sampler and extractor mostly wait on the trainer when the rows are
     * in memory, and sleep (not spin) when they do; any count gives the
     * same bits (docs/training.md, "Determinism") */
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    int threads = st->cfg.pipeline.trainer_threads > 0
                      ? (int)st->cfg.pipeline.trainer_threads
                      : (int)SL_MAX(1, SL_MIN(64, (cpus > 0 ? cpus : 1) / st->args.ranks));
    trainer_model_config(&st->cfg, &st->meta, &t.mc);
    if (model_layout(&t.mc, t.tensors, &t.ntensors, msg, sizeof msg) != 0)
        stage_fail(st, "%s", msg);
    t.nparams = model_param_count(&t.mc);
    t.be = pick_backend(st);
#ifdef SLUICE_TRAINER_CUDA
    /* A GPU rank: join the NCCL communicator first (it makes the device
     * current for the backend), then put the feature rows on the device
     * and export them to the extractors (stages/featbuf_cuda.h). */
    if (st->args.device >= 0 && st->args.has_nccl_id &&
        reducer_nccl_open(&t.coll, st->args.nccl_id, (int)run_global_rank(&st->args), (int)run_world(&st->args),
                          st->args.device, reduce_tick, st, msg, sizeof msg) != 0)
        stage_fail(st, "%s", msg);
    if (st->args.device >= 0 && featbuf_cuda_export(&t.fbc, &st->fb, st->args.device, msg, sizeof msg) != 0)
        stage_fail(st, "%s", msg);
#endif
    struct trainer_backend_config bc = {.model = t.mc,
                                        .lr = (float)st->cfg.train.lr,
                                        .weight_decay = (float)st->cfg.train.weight_decay,
                                        .decoupled = st->cfg.train.optimizer == OPTIMIZER_ADAMW,
                                        .threads = threads,
                                        .device = st->args.device,
                                        .fb = &st->fb,
                                        .f16 = ff->dtype == DTYPE_F16,
                                        .rows_dev = st->fb.dev_rows};
    if (t.be->create(&t.b, &bc, msg, sizeof msg) != 0)
        stage_fail(st, "%s", msg);
    if (!t.coll && trainer_reducer_open(&t.coll, &st->args, t.nparams + 1, reduce_tick, st, msg, sizeof msg) != 0)
        stage_fail(st, "%s", msg);
    if (run_results_segname(name, sizeof name, st->args.run_id, msg, sizeof msg) ||
        results_attach(&t.res, name, msg, sizeof msg))
        stage_fail(st, "%s", msg);
    t.epochs = (uint32_t)st->cfg.train.epochs;
    stage_schedule(st, &t.sched);
    t.steps_per_epoch = schedule_steps(&t.sched);
    t.ep = calloc(t.epochs, sizeof *t.ep);
    if (!t.ep)
        stage_fail(st, "out of memory for %" PRIu32 " epochs", t.epochs);
    dataset_stamp_load(&t);
    t.start_epoch = st->args.start_epoch;
    if (st->args.predict)
        predict_open(&t);
    else if (st->args.resume || t.start_epoch > 0)
        load_checkpoint(&t);
    t.published = t.start_epoch;
    t.steps_done = (uint64_t)t.start_epoch * t.steps_per_epoch;
    t.lr = (float)trainer_lr_at(&st->cfg, t.steps_done, t.steps_per_epoch);
    for (uint32_t e = 0; e < t.start_epoch; e++)
        t.ep[e].published = true;
    char where[64];
    if (st->args.device >= 0)
        snprintf(where, sizeof where, "on GPU %d", st->args.device);
    else
        snprintf(where, sizeof where, "%d BLAS thread%s", threads, threads == 1 ? "" : "s");
    stage_note(st, "%s model, %zu parameters, %s backend, %s; %" PRIu64 " steps per epoch",
               model_kind_name(st->cfg.model.kind), t.nparams, t.be->name, where, t.steps_per_epoch);
    t.t_epoch = now_s();
    stage_ready(st);
    t.nan_node = -1;
    t.drift_rank = -1;
    const char *drift_env = getenv("SLUICE_FAULT_DRIFT_RANK");
    if (drift_env && *drift_env) {
        t.drift_rank = strtoll(drift_env, NULL, 10);
        stage_note(st, "warning: SLUICE_FAULT_DRIFT_RANK=%" PRId64 " is set: that rank's first parameter moves by one "
                   "ulp before every comparison of the ranks' parameters (a test hook)",
                   t.drift_rank);
    }
    const char *nan_env = getenv("SLUICE_FAULT_NAN_NODE");
    if (nan_env && *nan_env) {
        t.nan_node = strtoll(nan_env, NULL, 10);
        stage_note(st, "warning: SLUICE_FAULT_NAN_NODE=%" PRId64 " is set: that node's feature row becomes NaN "
                   "(a setting for tests)",
                   t.nan_node);
    }
    struct run_desc d;
    while (stage_pop(st, &d) == 0) {
        uint64_t t0 = sl_now_ns();
        handle(&t, &d);
        stage_trace(st, d.batch, (uint32_t)d.aux[1], t0, sl_now_ns());
        if (stage_push(st, &d) != 0)
            break;
    }
    stage_end_output(st);
    if (t.skipped)
        stage_note(st, "warning: %" PRIu64 " batch%s skipped for values that are not finite "
                   "(train.on_nonfinite = \"skip-batch\")",
                   t.skipped, t.skipped == 1 ? " was" : "es were");
    if (t.published != t.epochs)
        stage_fail(st, "the batch stream ended after %" PRIu32 " of %" PRIu32 " epochs", t.published, t.epochs);
    if (st->args.predict)
        predict_close(&t);
    free(t.ep);
    schedule_free(&t.sched);
    results_free(&t.res);
    reducer_free(t.coll);
    t.be->free(t.b);
#ifdef SLUICE_TRAINER_CUDA
    /* the extractors close the rows before they are freed (a broken run
     * ends the wait: the memory then goes with this process) */
    if (st->args.device >= 0 && featbuf_cuda_unexport(&t.fbc, -1, stage_idle, st, msg, sizeof msg) != 0)
        stage_note(st, "feature rows on the device not freed: %s", msg);
#endif
    stage_close(st);
    return 0;
}
