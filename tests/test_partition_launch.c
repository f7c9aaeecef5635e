/* test_partition_launch.c - pipeline.mode = "partitions" through gnnlaunch
 * (issue 22), real processes on a small synthetic dataset: runs with the
 * comet ordering (MariusGNN's single state and the logical sweep), with
 * beta and with an auto-tuned buffer train end to end to the final line;
 * the partitions the extractor's buffer read equal the count gnnlaunch
 * printed at start; nothing of the run is left in /dev/shm. A dataset
 * without a layout, a layout made from another dataset, a layout that is
 * not there, a buffer larger than the layout and more than one rank are
 * refused with exit 2 before any stage starts. */
#include "t_util.h"

#include <dirent.h>
#include <inttypes.h>

#include "ipc/shm.h"

static char dir[4096], ds[4200], other[4200], cfg[4300], prep[4200], launch[4200];
static char log_[65536];

/* Files of run `run` left in /dev/shm. */
static unsigned shm_left(const char *run)
{
    DIR *d = opendir(SHM_DIR);
    assert_non_null(d);
    char pre[160];
    char ns[SHM_PREFIX_MAX];
    shm_prefix(ns, NULL, 0); /* this test's namespace (tests/CMakeLists.txt) */
    snprintf(pre, sizeof pre, "%s%s.", ns, run);
    unsigned n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        n += strncmp(e->d_name, pre, strlen(pre)) == 0;
    closedir(d);
    return n;
}

/* The number after `key` in the log (the first occurrence); fails when absent. */
static uint64_t number_after(const char *key)
{
    const char *p = strstr(log_, key);
    if (!p)
        fail_msg("no \"%s\" in the output:\n%s", key, log_);
    return strtoull(p + strlen(key), NULL, 10);
}

static void write_cfg(const char *dataset)
{
    FILE *f = fopen(cfg, "w");
    assert_non_null(f);
    fprintf(f,
            "[dataset]\npath = \"%s\"\n[model]\nfanouts = [4, 3]\nhidden = 16\n[train]\nepochs = 3\nbatch_size = 100\n"
            "seed = 11\n[pipeline]\nmode = \"partitions\"\nfeature_buffer_mb = 1\nextractors = 2\nsamplers = 2\n",
            dataset);
    fclose(f);
}

/* One run that must train: the final line, the count printed at start
 * read by the buffer, no segment left. */
static void train(const char *sets)
{
    write_cfg(ds);
    int rc = t_run(log_, sizeof log_, "'%s' --cpu '%s' %s", launch, cfg, sets);
    if (rc != 0)
        fail_msg("gnnlaunch %s exited %d:\n%s", sets, rc, log_);
    if (!strstr(log_, "test_acc=") || !strstr(log_, "epoch 3/3"))
        fail_msg("%s: no final line:\n%s", sets, log_);
    uint64_t planned = number_after("the run reads "), read = number_after("partitions: read ");
    if (planned == 0 || planned != read)
        fail_msg("%s: gnnlaunch printed %" PRIu64 " partitions to read, the buffer read %" PRIu64 ":\n%s", sets,
                 planned, read, log_);
    assert_non_null(strstr(log_, "rows are copied out of it"));
    const char *r = strstr(log_, "gnnlaunch: run ");
    assert_non_null(r);
    char run[128] = "";
    assert_int_equal(sscanf(r, "gnnlaunch: run %127[^:]:", run), 1);
    assert_int_equal(shm_left(run), 0);
}

/* One run that must be refused before anything starts. */
static void refused(const char *dataset, const char *sets, const char *says)
{
    write_cfg(dataset);
    int rc = t_run(log_, sizeof log_, "'%s' --cpu '%s' %s", launch, cfg, sets);
    if (rc != 2 || !strstr(log_, says) || strstr(log_, "stages started"))
        fail_msg("%s %s: exit %d, expected 2 saying \"%s\" before any stage:\n%s", dataset, sets, rc, says, log_);
}

static void test_launch(void **state)
{
    (void)state;
    t_scratch(dir, sizeof dir, "partition-launch");
    snprintf(ds, sizeof ds, "%s/ds", dir);
    snprintf(other, sizeof other, "%s/other", dir);
    snprintf(cfg, sizeof cfg, "%s/run.toml", dir);
    t_bin(prep, sizeof prep, "gnnprep");
    t_bin(launch, sizeof launch, "gnnlaunch");
    /* 1500 training nodes of 5000: k = 3 partitions of 500 */
    const char *synth = "--nodes 5000 --avg-degree 6 --feat-dim 16 --classes 3 --train-frac 0.3 --val-frac 0.1 "
                        "--test-frac 0.1";
    if (t_run(log_, sizeof log_, "'%s' synth '%s' %s --seed 8", prep, ds, synth) ||
        t_run(log_, sizeof log_, "'%s' synth '%s' %s --seed 9", prep, other, synth))
        fail_msg("%s", log_);
    /* no layout yet */
    refused(ds, "", "gnnprep partition");
    if (t_run(log_, sizeof log_, "'%s' partition '%s' --parts 10 --quiet", prep, ds))
        fail_msg("%s", log_);
    train("--set pipeline.buffer_partitions=3");                                       /* k >= c: the logical sweep */
    train("--set pipeline.buffer_partitions=5");                                       /* k < c: MariusGNN's one state */
    train("--set pipeline.buffer_partitions=3 --set pipeline.partition_order='\"beta\"'"); /* Marius's BETA */
    train("");                                                                         /* c auto-tuned */
    assert_non_null(strstr(log_, "(auto-tuned to the memory plan)"));
    /* evaluation inside the buffer: a layout with the evaluation nodes after the training ones (k = 3, the
     * training and evaluation nodes in 4 partitions of 625); no row read from features.bin at all */
    if (t_run(log_, sizeof log_, "'%s' partition '%s' --parts 8 --order neighbours --eval-first --quiet", prep, ds))
        fail_msg("%s", log_);
    train("--set pipeline.partitions=8 --set pipeline.buffer_partitions=5");
    assert_non_null(strstr(log_, "evaluation inside the buffer state"));
    assert_non_null(strstr(log_, "training and evaluation rows are copied out of it"));
    unsigned lines = 0;
    for (const char *q = strstr(log_, " read ("); q; q = strstr(q + 1, " read (")) {
        if (strtod(q + 7, NULL) != 0.0)
            fail_msg("evaluation inside the buffer read rows from features.bin:\n%s", log_);
        lines++;
    }
    assert_true(lines > 0);
    train("--set pipeline.partitions=8 --set pipeline.buffer_partitions=5 --set pipeline.partition_eval='\"graph\"'");
    assert_non_null(strstr(log_, "evaluation on the whole graph"));
    refused(ds, "--set pipeline.partitions=8 --set pipeline.buffer_partitions=3 --set pipeline.partition_eval='\"buffer\"'",
            "pipeline.partition_eval");
    refused(ds, "--set pipeline.partitions=10 --set pipeline.buffer_partitions=5 --set pipeline.partition_eval='\"buffer\"'",
            "--eval-first");
    /* refusals, before any stage */
    refused(ds, "--set pipeline.partitions=7", "parts.7");
    refused(ds, "--set pipeline.partitions=10 --set pipeline.partition_eval='\"nowhere\"'", "partition_eval");
    refused(ds, "--set pipeline.partitions=10 --set pipeline.buffer_partitions=11", "pipeline.buffer_partitions = 11");
    refused(ds, "--set pipeline.partitions=10 --set pipeline.ranks=2", "one rank");
    char cmd[9000];
    snprintf(cmd, sizeof cmd, "cp -r '%s/parts.10' '%s/'", ds, other); /* a layout beside the wrong dataset */
    assert_int_equal(system(cmd), 0);
    refused(other, "", "parts.10");
    t_rmrf(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_launch),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
