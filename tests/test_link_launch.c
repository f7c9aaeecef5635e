/* test_link_launch.c - `gnnlaunch --cpu` with model.kind = distmult |
 * complex on a link dataset (launcher/link.h): the epoch lines and the
 * final line of the contract (test_mrr= test_hits@1= test_hits@10=
 * epochs= seconds=), far above chance; a checkpoint per epoch with the
 * tables and their Adagrad sums, latest.safetensors; a run SIGKILLed after
 * a checkpoint and resumed ends bit for bit as the run never stopped, as
 * does one stopped by SIGINT (exit 130); and the refusals, each exit 2
 * before anything is written. Out of core (pipeline.mode = "partitions"):
 * with c = p the run ends as the in-memory one, bit for bit; with c < p a
 * SIGKILL in the middle of a partition's write-back loses no committed
 * epoch: --resume continues from the last checkpoint and ends with the
 * line and tensors of a run never stopped; impossible p and c refused. */
#include <errno.h>
#include <math.h>
#include <signal.h>

#include "t_util.h"
#include "t_launch.h"
#include "t_link.h"
#include "core/util.h"
#include "ops/ckpt.h"

static char g_kg[1300], g_nc[1300], g_huge[1300], g_cfg[1300];

static void write_cfg(const char *path, const char *ds, const char *kind, const char *extra)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fprintf(f,
            "[dataset]\npath = \"%s\"\n\n[model]\nkind = \"%s\"\nhidden = 32\n\n[train]\nepochs = 8\nbatch_size = 500\n"
            "lr = 0.1\nseed = 3\n\n[link]\nnegatives = 64\nchunk = 50\n%s",
            ds, kind, extra ? extra : "");
    fclose(f);
}

static void run_env(struct t_proc *r, const char *cfg, const char *ck, const char *const *env,
                    const char *const *more, int want)
{
    char ckset[1400];
    snprintf(ckset, sizeof ckset, "train.checkpoint_dir=\"%s\"", ck);
    const char *args[20] = {"--cpu", cfg, "--set", ckset};
    int n = 4;
    for (int i = 0; more && more[i] && n < 19; i++)
        args[n++] = more[i];
    args[n] = NULL;
    t_launch_run(r, env, args, 120);
    if (r->code != want) {
        char log[8192];
        t_slurp(r->log, log, sizeof log);
        fail_msg("gnnlaunch %s: exit %d, wanted %d:\n%s", r->args, r->code, want, log);
    }
}

static void run(struct t_proc *r, const char *cfg, const char *ck, const char *const *more, int want)
{
    run_env(r, cfg, ck, NULL, more, want);
}

/* The final line without its seconds=. */
static void final_line(const struct t_proc *r, char *out, size_t len)
{
    if (!t_last_line(r, "test_mrr=", out, len))
        fail_msg("no final line");
    char *s = strstr(out, " seconds=");
    assert_non_null(s);
    *s = '\0';
}

static unsigned char *t_slurp_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    *len = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *p = malloc(*len + 1);
    assert_int_equal(fread(p, 1, *len, f), *len);
    p[*len] = 0;
    fclose(f);
    return p;
}

static void same_tensors(const char *a, const char *b)
{
    struct ckpt x, y;
    char err[1024];
    assert_int_equal(ckpt_read(&x, a, err, sizeof err), 0);
    assert_int_equal(ckpt_read(&y, b, err, sizeof err), 0);
    static const char *const names[] = {"node_emb", "rel_emb", "adagrad.node_emb", "adagrad.rel_emb"};
    for (size_t i = 0; i < SL_ARRAY_LEN(names); i++) {
        uint32_t na, nb;
        uint64_t sa[CKPT_MAX_NDIM], sb[CKPT_MAX_NDIM];
        const void *pa = ckpt_find(&x, names[i], "F32", &na, sa), *pb = ckpt_find(&y, names[i], "F32", &nb, sb);
        assert_non_null(pa);
        assert_non_null(pb);
        assert_true(na == 2 && nb == 2 && sa[0] == sb[0] && sa[1] == sb[1]);
        if (memcmp(pa, pb, sa[0] * sa[1] * 4))
            fail_msg("%s differs between %s and %s", names[i], a, b);
    }
    assert_string_equal(ckpt_meta(&x, "epoch"), ckpt_meta(&y, "epoch"));
    assert_string_equal(ckpt_meta(&x, "step"), ckpt_meta(&y, "step"));
    ckpt_free(&x);
    ckpt_free(&y);
}

static void test_train_and_resume(void **state)
{
    (void)state;
    for (int model = 0; model < 2; model++) {
        const char *kind = model ? "complex" : "distmult";
        write_cfg(g_cfg, g_kg, kind, NULL);
        char ref[1400], ck[1400], line[512], want[512], a[1500], b[1500];
        snprintf(ref, sizeof ref, "%s/ck-ref-%s", t_ldir, kind);
        snprintf(ck, sizeof ck, "%s/ck-kill-%s", t_ldir, kind);
        struct t_proc r;
        run(&r, g_cfg, ref, NULL, 0);
        for (int e = 1; e <= 8; e++) {
            char ep[32];
            snprintf(ep, sizeof ep, "epoch %d/8 loss=", e);
            t_expect_log(&r, ep);
        }
        t_expect_log(&r, "valid_mrr=");
        final_line(&r, want, sizeof want);
        double mrr, h1, h10;
        int epochs;
        if (sscanf(want, "test_mrr=%lf test_hits@1=%lf test_hits@10=%lf epochs=%d", &mrr, &h1, &h10, &epochs) != 4)
            fail_msg("final line '%s'", want);
        assert_int_equal(epochs, 8);
        assert_true(h1 <= h10 && h10 <= 1 && mrr >= h1 && mrr <= 1);
        assert_true(mrr > 0.1); /* chance is about 0.0075 on 1000 nodes */
        snprintf(a, sizeof a, "%s/latest.safetensors", ref);
        assert_true(t_exists(a));
        /* node_emb.npy equals the last checkpoint's node_emb */
        snprintf(b, sizeof b, "%s/node_emb.npy", ref);
        size_t len;
        unsigned char *npy = t_slurp_file(b, &len);
        struct ckpt k;
        char err[1024];
        assert_int_equal(ckpt_path(a, sizeof a, ref, 8), 0);
        assert_int_equal(ckpt_read(&k, a, err, sizeof err), 0);
        uint32_t nd;
        uint64_t shape[CKPT_MAX_NDIM];
        const void *emb = ckpt_find(&k, "node_emb", "F32", &nd, shape);
        assert_non_null(emb);
        assert_int_equal(len, 128 + shape[0] * shape[1] * 4);
        assert_memory_equal(npy + 128, emb, shape[0] * shape[1] * 4);
        assert_non_null(memmem(npy, 128, "'shape': (1000, 32)", 19));
        ckpt_free(&k);
        free(npy);
        for (int e = 1; e <= 8; e++) {
            assert_int_equal(ckpt_path(a, sizeof a, ref, (uint32_t)e), 0);
            assert_true(t_exists(a));
        }

        /* 3 epochs, then --resume to 8: the same end, bit for bit */
        const char *three[] = {"--epochs", "3", NULL}, *resume[] = {"--resume", NULL};
        run(&r, g_cfg, ck, three, 0);
        run(&r, g_cfg, ck, resume, 0);
        t_expect_log(&r, "resuming from");
        final_line(&r, line, sizeof line);
        assert_string_equal(line, want);
        assert_int_equal(ckpt_path(a, sizeof a, ref, 8), 0);
        assert_int_equal(ckpt_path(b, sizeof b, ck, 8), 0);
        same_tensors(a, b);
        t_rmrf(ck);

        /* SIGKILLed once checkpoint 2 exists, then --resume: the same end
         * (when the kill came after the last checkpoint, as on a stalled
         * machine, there is nothing to resume and the run is whole) */
        char ckset[1500];
        snprintf(ckset, sizeof ckset, "train.checkpoint_dir=\"%s\"", ck);
        const char *args[] = {"--cpu", g_cfg, "--set", ckset, NULL};
        t_launch_start(&r, NULL, args);
        assert_int_equal(ckpt_path(a, sizeof a, ck, 2), 0);
        double t0 = t_now();
        while (!t_exists(a) && t_now() - t0 < 60)
            t_sleep_ms(2);
        kill(r.pid, SIGKILL);
        t_launch_wait(&r, 30);
        assert_int_equal(ckpt_path(b, sizeof b, ck, 8), 0);
        fprintf(stderr, "test_link_launch: %s: SIGKILL %s\n", kind,
                r.code == 128 + SIGKILL && !t_exists(b) ? "before the last checkpoint: resumed" : "after the run's end");
        if (r.code == 128 + SIGKILL && !t_exists(b)) {
            run(&r, g_cfg, ck, resume, 0);
            final_line(&r, line, sizeof line);
            assert_string_equal(line, want);
        }
        assert_int_equal(ckpt_path(a, sizeof a, ref, 8), 0);
        same_tensors(a, b);
        t_rmrf(ck);

        /* SIGINT: exit 130, the finished epochs kept, --resume ends the same;
         * a previous run's node_emb.npy does not survive the new run's start */
        char stale[1500];
        snprintf(stale, sizeof stale, "mkdir -p '%s' && echo stale > '%s/node_emb.npy'", ck, ck);
        assert_int_equal(system(stale), 0);
        snprintf(stale, sizeof stale, "%s/node_emb.npy", ck);
        t_launch_start(&r, NULL, args);
        assert_int_equal(ckpt_path(a, sizeof a, ck, 1), 0);
        t0 = t_now();
        while (!t_exists(a) && t_now() - t0 < 60)
            t_sleep_ms(2);
        kill(r.pid, SIGINT);
        t_launch_wait(&r, 30);
        fprintf(stderr, "test_link_launch: %s: SIGINT %s\n", kind, r.code == 130 ? "stopped the run" : "after its end");
        if (r.code == 130) {
            assert_false(t_exists(stale));
            t_expect_log(&r, "interrupted");
            run(&r, g_cfg, ck, resume, 0);
            final_line(&r, line, sizeof line);
            assert_string_equal(line, want);
        } else { /* the signal came after the run's end */
            t_expect_code(&r, 0);
        }
        t_rmrf(ck);
        t_rmrf(ref);
    }
}


static void test_out_of_core(void **state)
{
    (void)state;
    write_cfg(g_cfg, g_kg, "distmult", NULL);
    char mem[1400], full[1400], ref[1400], ck[1400], want[512], line[512], a[1500], b[1500];
    snprintf(mem, sizeof mem, "%s/ck-mem", t_ldir);
    snprintf(full, sizeof full, "%s/ck-full", t_ldir);
    snprintf(ref, sizeof ref, "%s/ck-ooc", t_ldir);
    snprintf(ck, sizeof ck, "%s/ck-crash", t_ldir);
    struct t_proc r;
    /* c = p: the in-memory run, bit for bit */
    const char *eqp[] = {"--set", "pipeline.mode=\"partitions\"", "--set", "pipeline.partitions=4", "--set",
                         "pipeline.buffer_partitions=4", NULL};
    run_env(&r, g_cfg, mem, NULL, NULL, 0);
    final_line(&r, want, sizeof want);
    run_env(&r, g_cfg, full, NULL, eqp, 0);
    t_expect_log(&r, "link prediction out of core");
    final_line(&r, line, sizeof line);
    assert_string_equal(line, want);
    assert_int_equal(ckpt_path(a, sizeof a, mem, 8), 0);
    assert_int_equal(ckpt_path(b, sizeof b, full, 8), 0);
    same_tensors(a, b);
    snprintf(a, sizeof a, "%s/link-partitions", full);
    assert_false(t_exists(a)); /* the working layout goes at the end */
    /* c < p: 6 partitions, 2 in the buffer: 16 write-backs an epoch (14
     * evictions, 2 at the flush) */
    const char *ooc[] = {"--set", "pipeline.mode=\"partitions\"", "--set", "pipeline.partitions=6", "--set",
                         "pipeline.buffer_partitions=2", NULL};
    run_env(&r, g_cfg, ref, NULL, ooc, 0);
    t_expect_log(&r, "14 swaps an epoch (BETA; lower bound 14)");
    final_line(&r, want, sizeof want);
    double mrr;
    assert_int_equal(sscanf(want, "test_mrr=%lf", &mrr), 1);
    assert_true(mrr > 0.1);
    /* killed by SIGKILL half-way through the 5th write-back of epoch 3 */
    const char *env[] = {"SLUICE_FAULT_KILL_WRITEBACK=37", NULL};
    run_env(&r, g_cfg, ck, env, ooc, 128 + SIGKILL);
    assert_int_equal(ckpt_path(a, sizeof a, ck, 2), 0);
    assert_true(t_exists(a));
    assert_int_equal(ckpt_path(a, sizeof a, ck, 3), 0);
    assert_false(t_exists(a));
    const char *resume[] = {"--set", "pipeline.mode=\"partitions\"", "--set", "pipeline.partitions=6", "--set",
                            "pipeline.buffer_partitions=2", "--resume", NULL};
    run_env(&r, g_cfg, ck, NULL, resume, 0);
    t_expect_log(&r, "resuming from");
    final_line(&r, line, sizeof line);
    assert_string_equal(line, want);
    assert_int_equal(ckpt_path(a, sizeof a, ref, 8), 0);
    assert_int_equal(ckpt_path(b, sizeof b, ck, 8), 0);
    same_tensors(a, b);
    snprintf(a, sizeof a, "%s/node_emb.npy", ref);
    snprintf(b, sizeof b, "%s/node_emb.npy", ck);
    size_t la, lb;
    unsigned char *na = t_slurp_file(a, &la), *nb = t_slurp_file(b, &lb);
    assert_true(la == lb && memcmp(na, nb, la) == 0);
    free(na);
    free(nb);
    /* impossible p and c: exit 2, nothing made */
    static const char *const bad[][2] = {{"pipeline.partitions=6", "pipeline.buffer_partitions=1"},
                                         {"pipeline.partitions=1001", "pipeline.buffer_partitions=2"},
                                         {"pipeline.partitions=1", "pipeline.buffer_partitions=1"},
                                         {"pipeline.partitions=4", "pipeline.partition_order=\"comet\""}};
    static const char *const msg[] = {"must be in 2..6", "must be in 2..1000", "must be in 2..1000",
                                      "does not take pipeline.partition_order"};
    char badck[1400];
    snprintf(badck, sizeof badck, "%s/ck-bad-ooc", t_ldir);
    for (size_t i = 0; i < SL_ARRAY_LEN(bad); i++) {
        const char *more[] = {"--set", "pipeline.mode=\"partitions\"", "--set", bad[i][0], "--set", bad[i][1], NULL};
        run_env(&r, g_cfg, badck, NULL, more, 2);
        t_expect_log(&r, msg[i]);
        assert_false(t_exists(badck));
    }
    t_rmrf(mem);
    t_rmrf(full);
    t_rmrf(ref);
    t_rmrf(ck);
}

/* The GNN encoder (model.encoder = "sage"): far above chance, the
 * encoder's weights and Adam's moments in every checkpoint, node_enc.npy
 * beside node_emb.npy, and a run of 2 epochs resumed to 4 ends bit for
 * bit as the run never stopped. */
static void test_encoder(void **state)
{
    (void)state;
    FILE *f = fopen(g_cfg, "w");
    assert_non_null(f);
    fprintf(f,
            "[dataset]\npath = \"%s\"\n\n[model]\nkind = \"distmult\"\nhidden = 32\nencoder = \"sage\"\n"
            "fanouts = [5, 3]\n\n[train]\nepochs = 4\nbatch_size = 500\nlr = 0.1\nseed = 3\n\n[link]\nnegatives = 64\n"
            "chunk = 50\n",
            g_kg);
    fclose(f);
    char ref[1400], ck[1400], line[512], want[512], a[1500], b[1500], err[1024];
    snprintf(ref, sizeof ref, "%s/ck-enc-ref", t_ldir);
    snprintf(ck, sizeof ck, "%s/ck-enc", t_ldir);
    struct t_proc r;
    run(&r, g_cfg, ref, NULL, 0);
    t_expect_log(&r, "encoder: sage, 2 layers of 32 -> 32, fanouts [5, 3]");
    final_line(&r, want, sizeof want);
    double mrr;
    if (sscanf(want, "test_mrr=%lf", &mrr) != 1)
        fail_msg("final line '%s'", want);
    assert_true(mrr > 0.1); /* chance is about 0.0075 */
    snprintf(a, sizeof a, "%s/node_enc.npy", ref);
    assert_true(t_exists(a));
    assert_int_equal(ckpt_path(a, sizeof a, ref, 4), 0);
    struct ckpt k;
    assert_int_equal(ckpt_read(&k, a, err, sizeof err), 0);
    uint32_t nd;
    uint64_t shape[CKPT_MAX_NDIM];
    assert_non_null(ckpt_find(&k, "encoder.layers.1.w_neigh", "F32", &nd, shape));
    assert_true(nd == 2 && shape[0] == 32 && shape[1] == 32);
    assert_non_null(ckpt_find(&k, "adam.v.encoder.layers.0.bias", "F32", &nd, shape));
    assert_non_null(ckpt_meta(&k, "encoder_adam_step"));
    assert_string_equal(ckpt_meta(&k, "encoder_adam_step"), ckpt_meta(&k, "step"));
    ckpt_free(&k);
    const char *two[] = {"--epochs", "2", NULL}, *resume[] = {"--resume", NULL};
    run(&r, g_cfg, ck, two, 0);
    run(&r, g_cfg, ck, resume, 0);
    t_expect_log(&r, "resuming from");
    final_line(&r, line, sizeof line);
    assert_string_equal(line, want);
    assert_int_equal(ckpt_path(a, sizeof a, ref, 4), 0);
    assert_int_equal(ckpt_path(b, sizeof b, ck, 4), 0);
    same_tensors(a, b);
    struct ckpt x, y;
    assert_int_equal(ckpt_read(&x, a, err, sizeof err), 0);
    assert_int_equal(ckpt_read(&y, b, err, sizeof err), 0);
    static const char *const names[] = {"encoder.layers.0.w_self", "encoder.layers.1.bias", "adam.m.encoder.layers.0.w_neigh"};
    for (size_t i = 0; i < SL_ARRAY_LEN(names); i++) {
        uint64_t sa[CKPT_MAX_NDIM], sb[CKPT_MAX_NDIM];
        uint32_t na, nb;
        const void *pa = ckpt_find(&x, names[i], "F32", &na, sa), *pb = ckpt_find(&y, names[i], "F32", &nb, sb);
        assert_true(pa && pb && na == nb && sa[0] == sb[0]);
        assert_memory_equal(pa, pb, sa[0] * (na == 2 ? sa[1] : 1) * 4);
    }
    ckpt_free(&x);
    ckpt_free(&y);
    /* out of core (COMET): with c = p the in-memory run's line; with c < p
     * a run of 2 epochs resumed to 4 ends as one never stopped */
    const char *full[] = {"--set", "pipeline.mode=\"partitions\"", "--set", "pipeline.partitions=4", "--set",
                          "pipeline.buffer_partitions=4", NULL};
    char ooc[1400];
    snprintf(ooc, sizeof ooc, "%s/ck-enc-ooc", t_ldir);
    run(&r, g_cfg, ooc, full, 0);
    t_expect_log(&r, "(COMET; lower bound");
    final_line(&r, line, sizeof line);
    assert_string_equal(line, want);
    t_rmrf(ooc);
    const char *part4[] = {"--set", "pipeline.mode=\"partitions\"", "--set", "pipeline.partitions=6", "--set",
                           "pipeline.buffer_partitions=2", NULL};
    const char *part2[] = {"--set", "pipeline.mode=\"partitions\"", "--set", "pipeline.partitions=6", "--set",
                           "pipeline.buffer_partitions=2", "--epochs", "2", NULL};
    const char *partr[] = {"--set", "pipeline.mode=\"partitions\"", "--set", "pipeline.partitions=6", "--set",
                           "pipeline.buffer_partitions=2", "--resume", NULL};
    char ooc2[1400], oline[512];
    snprintf(ooc2, sizeof ooc2, "%s/ck-enc-ooc2", t_ldir);
    run(&r, g_cfg, ooc, part4, 0);
    final_line(&r, want, sizeof want);
    if (sscanf(want, "test_mrr=%lf", &mrr) != 1 || !(mrr > 0.1))
        fail_msg("out of core with the encoder: '%s'", want);
    run(&r, g_cfg, ooc2, part2, 0);
    run(&r, g_cfg, ooc2, partr, 0);
    final_line(&r, oline, sizeof oline);
    assert_string_equal(oline, want);
    assert_int_equal(ckpt_path(a, sizeof a, ooc, 4), 0);
    assert_int_equal(ckpt_path(b, sizeof b, ooc2, 4), 0);
    same_tensors(a, b);
    t_rmrf(ooc);
    t_rmrf(ooc2);
    /* resuming with another encoder is refused: another run */
    const char *other[] = {"--resume", "--epochs", "6", "--set", "model.fanouts=[4, 3]", NULL};
    run(&r, g_cfg, ck, other, 2);
    t_expect_log(&r, "model.fanouts: [5, 3] -> [4, 3]");
    t_rmrf(ref);
    t_rmrf(ck);
}

static void test_refusals(void **state)
{
    (void)state;
    char cfg[1400], ck[1400];
    snprintf(cfg, sizeof cfg, "%s/bad.toml", t_ldir);
    snprintf(ck, sizeof ck, "%s/ck-bad", t_ldir);
    static const struct {
        const char *kind;
        int hidden;
        const char *extra, *arg, *msg;
        int nc; /* on the node-classification dataset (1), the huge link dataset (2) */
    } bad[] = {
        {"distmult", 16, "", NULL, "needs a link-prediction dataset", 1},
        {"sage", 16, "", NULL, "or train link prediction on it with model.kind", 0},
        {"distmult", 16, "[pipeline]\nranks = 2\n", NULL, "does not take pipeline.ranks above 1", 0},
        {"distmult", 16, "[train]\nearly_stop_patience = 2\nearly_stop_metric = \"val_loss\"\n", NULL,
         "does not take train.early_stop_metric other than \"valid_mrr\"", 0},
        {"sage", 16, "[train]\nearly_stop_metric = \"valid_mrr\"\n", NULL, "is link prediction's", 1},
        {"complex", 33, "", NULL, "model.hidden = 33 is odd", 0},
        {"distmult", 16, "", "--resume", "--resume: no checkpoint in", 0},
        {"distmult", 16, "", "--metrics-csv", "does not take --metrics-csv or --trace", 0},
        {"distmult", 16, "[link]\nloss = \"hinge\"\n", NULL, "link.loss", 0},
        {"distmult", 16, "[train]\noptimizer = \"adamw\"\n", NULL, "does not take train.optimizer", 0},
        {"distmult", 16, "[train]\ngrad_clip = 1.0\n", NULL, "does not take train.grad_clip", 0},
        {"distmult", 16, "[train]\nlr_schedule = \"cosine\"\n", NULL, "does not take train.lr_schedule", 0},
        {"distmult", 16, "[train]\nbatch_size = 10000000\n\n[link]\nchunk = 1\nnegatives = 1000\n", NULL,
         "gathers more than 2^32 rows a batch", 0},
        {"distmult", 64, "", NULL, "need", 2}, /* a trillion nodes: more than memory */
        {"sage", 16, "encoder = \"sage\"\n", NULL, "needs model.kind = \"distmult\" or \"complex\", not \"sage\"", 0},
        {"distmult", 16, "encoder = \"sage\"\ndropout = 0.2\n", NULL, "does not take model.dropout with model.encoder", 0},
    };
    for (size_t i = 0; i < SL_ARRAY_LEN(bad); i++) {
        FILE *f = fopen(cfg, "w");
        assert_non_null(f);
        fprintf(f, "[dataset]\npath = \"%s\"\n\n[model]\nkind = \"%s\"\nhidden = %d\n\n%s",
                bad[i].nc == 1 ? g_nc : bad[i].nc == 2 ? g_huge : g_kg,
                bad[i].kind, bad[i].hidden, bad[i].extra);
        fclose(f);
        const char *more[3] = {NULL};
        char mfile[1400];
        if (bad[i].arg && !strcmp(bad[i].arg, "--metrics-csv")) {
            snprintf(mfile, sizeof mfile, "%s/m.csv", t_ldir);
            more[0] = "--metrics-csv", more[1] = mfile;
        } else if (bad[i].arg) {
            more[0] = bad[i].arg;
        }
        struct t_proc r;
        run(&r, cfg, ck, more, 2);
        t_expect_log(&r, bad[i].msg);
        if (!bad[i].arg) /* refused before the checkpoint directory is taken */
            assert_false(t_exists(ck));
        t_rmrf(ck);
    }
    t_rmrf(ck);
}

static int group_setup(void **state)
{
    (void)state;
    if (t_launch_setup("link-launch") != 0)
        return -1;
    char prep[1200], out[4096];
    t_bin(prep, sizeof prep, "gnnprep");
    snprintf(g_kg, sizeof g_kg, "%s/kg", t_ldir);
    snprintf(g_nc, sizeof g_nc, "%s/nc", t_ldir);
    snprintf(g_cfg, sizeof g_cfg, "%s/link.toml", t_ldir);
    /* a link dataset of a trillion nodes (three triples): its tables cannot fit */
    snprintf(g_huge, sizeof g_huge, "%s/huge", t_ldir);
    char npy[1400];
    snprintf(npy, sizeof npy, "%s/t.npy", t_ldir);
    FILE *f = fopen(npy, "wb");
    if (!f)
        return -1;
    const char hdr[] = "\x93NUMPY\x01\x00\x76\x00{'descr': '<i8', 'fortran_order': False, 'shape': (1, 3), }";
    char h[128];
    memset(h, ' ', sizeof h);
    memcpy(h, hdr, sizeof hdr - 1);
    h[127] = '\n';
    const int64_t tri[3] = {0, 0, 1};
    fwrite(h, 1, sizeof h, f);
    fwrite(tri, sizeof tri, 1, f);
    fclose(f);
    if (t_run(out, sizeof out, "%s import %s --triples %s --valid %s --test %s --nodes 1T", prep, g_huge, npy, npy,
              npy) != 0) {
        fprintf(stderr, "gnnprep import failed: %s\n", out);
        return -1;
    }
    if (t_link_synth(g_kg, "") != 0 ||
        t_run(out, sizeof out, "%s synth %s --nodes 300 --avg-degree 4 --feat-dim 8 --classes 3", prep, g_nc) != 0) {
        fprintf(stderr, "gnnprep synth failed: %s\n", out);
        return -1;
    }
    return 0;
}

int main(void)
{
    signal(SIGALRM, t_launch_alarm);
    t_case_alarm_s = 300;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_train_and_resume, t_launch_case_setup, t_launch_case_teardown),
        cmocka_unit_test_setup_teardown(test_refusals, t_launch_case_setup, t_launch_case_teardown),
        cmocka_unit_test_setup_teardown(test_encoder, t_launch_case_setup, t_launch_case_teardown),
        cmocka_unit_test_setup_teardown(test_out_of_core, t_launch_case_setup, t_launch_case_teardown),
    };
    return cmocka_run_group_tests(tests, group_setup, t_launch_group_teardown);
}
