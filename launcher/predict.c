/* predict.c - gnnlaunch --predict: the launcher's part (predict.h). */
#include "launcher/predict.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/util.h"
#include "ops/ckpt.h"
#include "ops/model.h"
#include "ops/ops.h"
#include "stages/infer.h"
#include "stages/predict.h"
#include "stages/sampler.h"
#include "stages/schedule.h"
#include "stages/trainer.h"

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

int launch_predict_prepare(struct launch_predict *p, const struct config *cfg, const struct dataset_meta *m,
                           char *err, size_t errlen)
{
    char msg[1024];
    /* the checkpoint: readable, ours, of this model */
    struct ckpt c;
    int rc = ckpt_read(&c, p->ckpt, msg, sizeof msg);
    if (rc)
        return sl_errf(err, errlen, rc, "--predict: %s", msg);
    struct model_config mc;
    trainer_model_config(cfg, m, &mc);
    char want[256];
    trainer_model_text(&mc, want, sizeof want);
    const char *fmt = ckpt_meta(&c, "format"), *model = ckpt_meta(&c, "model"), *ep = ckpt_meta(&c, "epoch");
    bool ours = fmt && !strcmp(fmt, "sluice-checkpoint") && model;
    bool same = ours && !strcmp(model, want);
    char have[256];
    snprintf(have, sizeof have, "%s", ours ? model : "");
    p->epoch = ep ? (uint32_t)strtoul(ep, NULL, 10) : 0;
    ckpt_free(&c);
    if (!ours)
        return sl_errf(err, errlen, -EINVAL, "--predict %s: not a Sluice checkpoint (no format or model metadata)",
                       p->ckpt);
    if (!same)
        return sl_errf(err, errlen, -EINVAL, "--predict %s holds a model with %s, but the configuration asks for %s; "
                       "predict with the configuration it was trained with", p->ckpt, have, want);
    /* --out: new, in an existing directory */
    struct stat st;
    if (stat(p->out, &st) == 0)
        return sl_errf(err, errlen, -EEXIST, "--out %s exists; remove it or choose another directory (a prediction is "
                       "never written over another)", p->out);
    char a[PATH_MAX], b[PATH_MAX];
    snprintf(a, sizeof a, "%s", p->out);
    snprintf(b, sizeof b, "%s", p->out);
    const char *parent = dirname(a), *base = basename(b);
    if (stat(parent, &st) != 0 || !S_ISDIR(st.st_mode))
        return sl_errf(err, errlen, -ENOENT, "--out %s: directory %s does not exist; create it first", p->out, parent);
    snprintf(p->tmp, sizeof p->tmp, "%s/.%s.partial-%ld", parent, base, (long)getpid());
    if (mkdir(p->tmp, 0755) != 0)
        return sl_errf(err, errlen, -errno, "--out: cannot create %s: %s", p->tmp, strerror(errno));
    /* the predicted nodes, ascending */
    uint64_t n = 0, *ids = NULL;
    if (p->which == RUN_PREDICT_ALL) {
        n = m->nodes;
        ids = malloc((size_t)SL_MAX(n, 1) * sizeof *ids);
        if (!ids)
            rc = sl_errf(err, errlen, -ENOMEM, "out of memory for %" PRIu64 " node ids", n);
        for (uint64_t i = 0; ids && i < n; i++)
            ids[i] = i;
    } else {
        uint32_t k = p->which == RUN_PREDICT_TRAIN ? BATCH_TRAIN : p->which == RUN_PREDICT_VAL ? BATCH_VAL : BATCH_TEST;
        rc = sampler_split_load(cfg->dataset.path, m, schedule_split_file(k), &ids, &n, msg, sizeof msg);
        if (rc)
            rc = sl_errf(err, errlen, rc, "--split %s: %s", run_predict_name(p->which), msg);
        else
            qsort(ids, (size_t)n, sizeof *ids, cmp_u64);
    }
    if (rc == 0)
        rc = predict_create(p->tmp, ids, n, mc.classes, model_embed_width(&mc), err, errlen);
    free(ids);
    if (rc)
        launch_predict_abandon(p);
    return rc;
}

void launch_predict_abandon(struct launch_predict *p)
{
    if (!p->tmp[0])
        return;
    DIR *d = opendir(p->tmp);
    if (d) {
        struct dirent *de;
        while ((de = readdir(d)) != NULL)
            if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
                unlinkat(dirfd(d), de->d_name, 0);
        closedir(d);
    }
    rmdir(p->tmp);
    p->tmp[0] = '\0';
}

/* Accuracy of the predictions over split k's labelled nodes: correct and
 * labelled into *c, *l (0, 0 when the split is absent). */
static int split_accuracy(const struct predict_files *f, const int32_t *labels, const struct config *cfg,
                          const struct dataset_meta *m, uint32_t k, uint64_t *c, uint64_t *l, char *err, size_t errlen)
{
    *c = *l = 0;
    if (!m->f[schedule_split_file(k)].present)
        return 0;
    uint64_t *ids = NULL, n = 0;
    int rc = sampler_split_load(cfg->dataset.path, m, schedule_split_file(k), &ids, &n, err, errlen);
    if (rc)
        return rc;
    for (uint64_t i = 0; i < n; i++) {
        int64_t row = predict_row(f, ids[i]);
        if (row < 0 || labels[ids[i]] < 0)
            continue; /* not predicted (another split's run) or unlabelled */
        (*l)++;
        *c += f->pred[row] == labels[ids[i]];
    }
    free(ids);
    return 0;
}

/* s as the inside of a JSON string: quote, backslash and control
 * characters escaped. */
static void json_escape(const char *s, char *out, size_t len)
{
    size_t o = 0;
    for (const unsigned char *c = (const unsigned char *)s; *c && o + 7 < len; c++) {
        if (*c == '"' || *c == '\\')
            o += (size_t)snprintf(out + o, len - o, "\\%c", *c);
        else if (*c < 0x20)
            o += (size_t)snprintf(out + o, len - o, "\\u%04x", *c);
        else
            out[o++] = (char)*c;
    }
    out[o] = '\0';
}

int launch_predict_finish(struct launch_predict *p, const struct config *cfg, const struct dataset_meta *m, bool ok,
                          double seconds, char *err, size_t errlen)
{
    if (!ok) {
        launch_predict_abandon(p);
        return 0;
    }
    struct predict_files f;
    int rc = predict_map(&f, p->tmp, err, errlen);
    const int32_t *labels = NULL;
    size_t labels_len = 0;
    uint64_t correct[BATCH_SPLITS] = {0}, labelled[BATCH_SPLITS] = {0};
    const struct dataset_file *lf = &m->f[DATASET_LABELS];
    if (rc == 0 && lf->present) {
        char path[PATH_MAX];
        int fd = sl_path_join(path, sizeof path, cfg->dataset.path, lf->file) == 0 ? open(path, O_RDONLY | O_CLOEXEC)
                                                                                   : -1;
        void *map = fd >= 0 && lf->bytes ? mmap(NULL, (size_t)lf->bytes, PROT_READ, MAP_SHARED, fd, 0) : MAP_FAILED;
        if (fd >= 0)
            close(fd);
        if (map == MAP_FAILED)
            rc = sl_errf(err, errlen, -EIO, "cannot read the labels of %s", cfg->dataset.path);
        else
            labels = map, labels_len = (size_t)lf->bytes;
    }
    for (uint32_t k = 0; rc == 0 && labels && k < BATCH_SPLITS; k++)
        rc = split_accuracy(&f, labels, cfg, m, k, &correct[k], &labelled[k], err, errlen);
    if (labels)
        munmap((void *)labels, labels_len);
    uint64_t n = f.n;
    predict_unmap(&f, err, errlen);
    static const char *const names[BATCH_SPLITS] = {"train", "val", "test"};
    char line[512] = "", json[3 * PATH_MAX] = "{", ck[2 * PATH_MAX];
    json_escape(p->ckpt, ck, sizeof ck);
    for (uint32_t k = 0; rc == 0 && k < BATCH_SPLITS; k++) {
        if (!labelled[k])
            continue;
        double acc = (double)correct[k] / (double)labelled[k];
        size_t u = strlen(line), j = strlen(json);
        snprintf(line + u, sizeof line - u, "%s_acc=%.4f ", names[k], acc);
        snprintf(json + j, sizeof json - j, "%s\"%s\": {\"acc\": %.6f, \"labelled\": %" PRIu64 "}", j > 1 ? ", " : "",
                 names[k], acc, labelled[k]);
    }
    if (rc == 0) {
        char path[PATH_MAX + 80];
        snprintf(path, sizeof path, "%s/accuracy.json", p->tmp);
        FILE *jf = fopen(path, "we");
        size_t j = strlen(json);
        snprintf(json + j, sizeof json - j, "%s\"nodes\": %" PRIu64 ", \"checkpoint\": \"%s\", \"epoch\": %" PRIu32
                 "}\n", j > 1 ? ", " : "", n, ck, p->epoch);
        if (!jf || fputs(json, jf) < 0 || fclose(jf) != 0)
            rc = sl_errf(err, errlen, -EIO, "cannot write %s", path);
    }
    if (rc == 0 && rename(p->tmp, p->out) != 0)
        rc = sl_errf(err, errlen, -errno, "cannot rename %s to %s: %s", p->tmp, p->out, strerror(errno));
    if (rc) {
        launch_predict_abandon(p);
        return rc;
    }
    p->tmp[0] = '\0';
    printf("%snodes=%" PRIu64 " seconds=%.2f out=%s\n", line, n, seconds, p->out);
    fflush(stdout);
    return 0;
}

/* Progress of --exact on stderr, at most once a second, and at each
 * layer's end. */
struct exact_progress {
    double t0, last;
    uint32_t layers;
};

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static void exact_progress(void *arg, uint32_t layer, uint64_t done, uint64_t total)
{
    struct exact_progress *e = arg;
    double t = now_s();
    if (done < total && t - e->last < 1.0)
        return;
    e->last = t;
    fprintf(stderr, "gnnlaunch: --exact: layer %" PRIu32 "/%" PRIu32 ": %" PRIu64 "/%" PRIu64 " nodes (%.0f%%), %.1f s\n",
            layer + 1, e->layers, done, total, total ? 100.0 * (double)done / (double)total : 100.0, t - e->t0);
}

int launch_predict_exact(struct launch_predict *p, const struct config *cfg, const struct dataset_meta *m, int threads,
                         char *err, size_t errlen)
{
    struct model_config mc;
    trainer_model_config(cfg, m, &mc);
    if (mc.kind == MODEL_GCN && cfg->model.gcn_norm != GCN_NORM_GRAPH)
        return sl_errf(err, errlen, -EINVAL, "--exact: a GCN normalised by its sampled blocks' degrees "
                       "(model.gcn_norm = \"block\") has no whole-graph equivalent; predict it sampled (without "
                       "--exact), or train with model.gcn_norm = \"graph\"");
    struct model *model = NULL;
    int rc = model_create(&model, &mc, err, errlen);
    if (rc)
        return rc;
    struct ckpt c;
    char msg[1024];
    if ((rc = ckpt_read(&c, p->ckpt, msg, sizeof msg)) != 0) {
        model_destroy(model);
        return sl_errf(err, errlen, rc, "--predict: %s", msg);
    }
    float *params = model_params(model);
    for (uint32_t i = 0; rc == 0 && i < model_ntensors(model); i++) {
        const struct model_tensor *t = model_tensor(model, i);
        uint32_t nd;
        uint64_t shape[CKPT_MAX_NDIM];
        const float *src = ckpt_find(&c, t->name, "F32", &nd, shape);
        if (!src || nd != t->ndim || shape[0] != t->shape[0] || (nd == 2 && shape[1] != t->shape[1]))
            rc = sl_errf(err, errlen, -EINVAL, "--predict %s has no F32 tensor %s of the model's shape", p->ckpt,
                         t->name);
        else
            memcpy(params + t->offset, src, t->count * sizeof(float));
    }
    ckpt_free(&c);
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    ops_set_threads(threads > 0 ? threads : (int)SL_MAX(1, cpus));
    struct predict_files f;
    if (rc == 0)
        rc = predict_map(&f, p->tmp, err, errlen);
    if (rc == 0) {
        struct exact_progress ep = {.t0 = now_s(), .layers = mc.layers};
        const char *chunk = getenv("SLUICE_INFER_CHUNK"); /* tests: small chunks (docs/inference.md) */
        struct infer_params ip = {.dir = cfg->dataset.path,
                                  .m = m,
                                  .model = model,
                                  .mc = &mc,
                                  .graph_degrees = mc.kind == MODEL_GCN,
                                  .scratch = p->tmp,
                                  .chunk = chunk && *chunk ? strtoull(chunk, NULL, 10) : 0,
                                  .progress = exact_progress,
                                  .arg = &ep};
        rc = infer_layerwise(&ip, &f, err, errlen);
        char umsg[256];
        int urc = predict_unmap(&f, umsg, sizeof umsg);
        if (rc == 0 && urc != 0)
            rc = sl_errf(err, errlen, urc, "%s", umsg);
    }
    model_destroy(model);
    return rc;
}
