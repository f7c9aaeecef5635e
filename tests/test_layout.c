/* test_layout.c - the parts of gnnlaunch that stages and tools share: the
 * run layout (segment names, queue shapes, creating and removing a run's
 * shared objects), the stage command line both ways, and the run
 * directory (atomic creation, names held by live runs, reclaim of dead
 * ones). The end-to-end behaviour is test_launch.c's. */
#include "t_util.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <sys/stat.h>

#include "core/util.h"
#include "ipc/shm.h"
#include "core/config.h"
#include "launcher/layout.h"
#include "launcher/rundir.h"

static char g_dir[1024];
static char g_run[SHM_RUN_ID_MAX];

static pid_t dead_pid(void)
{
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0)
        _exit(0);
    assert_int_equal(waitpid(pid, NULL, 0), pid);
    return pid;
}

static int count_segments(const char *run)
{
    char prefix[SHM_NAME_MAX];
    char ns[SHM_PREFIX_MAX];
    shm_prefix(ns, NULL, 0); /* this test's namespace (tests/CMakeLists.txt) */
    snprintf(prefix, sizeof prefix, "%s%s.", ns, run);
    DIR *d = opendir(SHM_DIR);
    assert_non_null(d);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        n += !strncmp(e->d_name, prefix, strlen(prefix));
    closedir(d);
    return n;
}

/* ---- stages, queues, names ------------------------------------------------------------ */

static void test_stages_and_queues(void **state)
{
    assert_string_equal(run_stage_program(RUN_EXTRACTOR), "gnn-extractor");
    assert_string_equal(run_stage_name(RUN_RELEASER), "releaser");
    assert_int_equal(run_stage_from_program("/opt/sluice/bin/gnn-trainer"), RUN_TRAINER);
    assert_int_equal(run_stage_from_program("/opt/sluice/bin/gnn-trainer-gpu"), RUN_TRAINER);
    assert_int_equal(run_stage_from_program("gnn-trainer-gp"), -1);
    assert_int_equal(run_stage_from_program("sampler"), RUN_SAMPLER);
    assert_int_equal(run_stage_from_program("gnn-sampler2"), -1);
    assert_int_equal(run_stage_from_program(NULL), -1);
    /* the pipeline: sampler -> extract -> extractor -> train -> trainer -> release -> releaser */
    assert_int_equal(run_stage_input(RUN_SAMPLER), -1);
    assert_int_equal(run_stage_output(RUN_SAMPLER), RUN_Q_EXTRACT);
    assert_int_equal(run_stage_input(RUN_EXTRACTOR), RUN_Q_EXTRACT);
    assert_int_equal(run_stage_output(RUN_EXTRACTOR), RUN_Q_TRAIN);
    assert_int_equal(run_stage_input(RUN_TRAINER), RUN_Q_TRAIN);
    assert_int_equal(run_stage_output(RUN_TRAINER), RUN_Q_RELEASE);
    assert_int_equal(run_stage_input(RUN_RELEASER), RUN_Q_RELEASE);
    assert_int_equal(run_stage_output(RUN_RELEASER), -1);
    assert_int_equal(run_block(2, RUN_TRAINER), 10);

    char name[SHM_NAME_MAX], err[256], ns[SHM_PREFIX_MAX], want[SHM_NAME_MAX];
    assert_int_equal(shm_prefix(ns, NULL, 0), 0); /* "sluice." or this test's namespace (tests/CMakeLists.txt) */
    assert_int_equal(run_queue_segname(name, sizeof name, "41-a-b", RUN_Q_TRAIN, 3, err, sizeof err), 0);
    snprintf(want, sizeof want, "/%s41-a-b.r3.train", ns);
    assert_string_equal(name, want);
    assert_int_equal(run_metrics_segname(name, sizeof name, "41-a-b", err, sizeof err), 0);
    snprintf(want, sizeof want, "/%s41-a-b.metrics", ns);
    assert_string_equal(name, want);
    assert_int_equal(run_queue_segname(name, sizeof name, "41.a", RUN_Q_TRAIN, 0, err, sizeof err), -EINVAL);
    assert_int_equal(run_arena_segname(name, sizeof name, "41-a-b", 3, err, sizeof err), 0);
    snprintf(want, sizeof want, "/%s41-a-b.r3.arena", ns);
    assert_string_equal(name, want);
    assert_int_equal(run_arena_segname(name, sizeof name, "41-a-b", -1, err, sizeof err), -EINVAL);

    struct config c;
    config_defaults(&c);
    const struct {
        int64_t extract, train;
        uint32_t want[RUN_QUEUES];
    } shapes[] = {{8, 4, {8, 4, 16}}, {1, 1, {2, 2, 2}}, {5, 3, {8, 4, 8}}, {4096, 4096, {4096, 4096, 8192}}};
    for (size_t i = 0; i < SL_ARRAY_LEN(shapes); i++) {
        c.pipeline.extract_queue = shapes[i].extract;
        c.pipeline.train_queue = shapes[i].train;
        for (int q = 0; q < RUN_QUEUES; q++) {
            struct ring_params p;
            layout_queue_params(&c, (enum run_queue)q, &p);
            if (p.capacity != shapes[i].want[q] || p.entry_size != sizeof(struct run_desc) || p.producers != 1)
                fail_msg("queues %lld/%lld: %s capacity %u, expected %u", (long long)shapes[i].extract,
                         (long long)shapes[i].train, run_queue_name((enum run_queue)q), p.capacity,
                         shapes[i].want[q]);
        }
    }
}

static void test_create_and_attach(void **state)
{
    struct config c;
    config_defaults(&c);
    char err[512];
    struct layout l;
    const struct arena_params ap = {.slot_size = 1000, .nslots = 4};
    assert_int_equal(layout_create(&l, g_run, &c, 3, &(struct layout_objects){0}, err, sizeof err), -EINVAL);
    assert_int_equal(layout_create(&l, g_run, &c, 3, &(struct layout_objects){.arena = &ap}, err, sizeof err), 0);
    assert_int_equal(count_segments(g_run), 1 + 3 * (RUN_QUEUES + 1));
    assert_int_equal(l.metrics.nblocks, 3 * RUN_STAGES);
    /* a stage finds each queue by name; a descriptor pushed by the launcher's
     * handle arrives through the attached one */
    struct ring r;
    char name[SHM_NAME_MAX];
    assert_int_equal(run_queue_segname(name, sizeof name, g_run, RUN_Q_RELEASE, 2, err, sizeof err), 0);
    assert_int_equal(ring_attach(&r, name, err, sizeof err), 0);
    struct run_desc d = {.batch = 77, .slot = 5, .epoch = 1, .aux = {9, 2}}, got;
    assert_int_equal(ring_push(layout_queue(&l, 2, RUN_Q_RELEASE), &d, 0), 0);
    assert_int_equal(ring_pop(&r, &got, 0), 0);
    assert_memory_equal(&d, &got, sizeof d);
    /* each rank's arena: a stage attaches it by name and sees the
     * launcher's slots; a child blocked on an empty arena wakes with
     * -EPIPE when the run is closed */
    assert_null(layout_arena(&l, 3));
    struct arena *mine = layout_arena(&l, 1);
    assert_non_null(mine);
    assert_int_equal(mine->nslots, 4);
    assert_int_equal(mine->slot_size, 1000);
    assert_int_equal(run_arena_segname(name, sizeof name, g_run, 1, err, sizeof err), 0);
    pid_t kid = fork();
    assert_true(kid >= 0);
    if (kid == 0) {
        struct arena a;
        uint32_t slot;
        if (arena_attach(&a, name, NULL, 0) != 0)
            _exit(10);
        for (int i = 0; i < 4; i++)
            if (arena_alloc(&a, &slot, 0) != 0)
                _exit(11);
        _exit(arena_alloc(&a, &slot, RING_FOREVER) == -EPIPE ? 0 : 12);
    }
    double t0 = sl_now();
    while (arena_available(mine) > 0 && sl_now() - t0 < 10)
        usleep(1000);
    usleep(50000); /* let it block */
    assert_int_equal(arena_available(mine), 0);
    assert_int_equal(arena_available(layout_arena(&l, 2)), 4); /* ranks do not share */
    /* closing the run ends every stream and every wait for a slot */
    layout_close(&l);
    int st;
    assert_int_equal(waitpid(kid, &st, 0), kid);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
    assert_int_equal(ring_pop(&r, &got, RING_FOREVER), -EPIPE);
    assert_null(layout_queue(&l, 3, RUN_Q_EXTRACT));
    ring_free(&r);
    layout_free(&l);
    assert_int_equal(count_segments(g_run), 1 + 3 * (RUN_QUEUES + 1)); /* unmapped, not unlinked */
    assert_int_equal(shm_run_unlink(g_run), 1 + 3 * (RUN_QUEUES + 1));
    /* a taken name: nothing of the second attempt is left */
    struct shm_seg blocker;
    char obj[] = "r1.train";
    assert_int_equal(shm_seg_create(&blocker, g_run, obj, SHM_KIND_RAW, 8, err, sizeof err), 0);
    assert_int_equal(layout_create(&l, g_run, &c, 2, &(struct layout_objects){.arena = &ap}, err, sizeof err), -EEXIST);
    assert_int_equal(count_segments(g_run), 0); /* layout_create removes the run's segments on failure */
    shm_seg_detach(&blocker);
    assert_int_equal(layout_create(&l, g_run, &c, 0, &(struct layout_objects){.arena = &ap}, err, sizeof err), -EINVAL);
    /* an arena that cannot be made: nothing of the run is left either */
    const struct arena_params huge = {.slot_size = SIZE_MAX / 4, .nslots = 4};
    assert_int_equal(layout_create(&l, g_run, &c, 2, &(struct layout_objects){.arena = &huge}, err, sizeof err), -EINVAL);
    assert_int_equal(count_segments(g_run), 0);
}

/* ---- sizing the batch arenas --------------------------------------------------------------- */

/* Writes DIR/indptr.bin (n + 1 entries, degree deg(v)) and fills a meta
 * that describes it. */
static void write_indptr(const char *dir, uint64_t n, uint64_t (*deg)(uint64_t), struct dataset_meta *m)
{
    char path[1200];
    snprintf(path, sizeof path, "%s/indptr.bin", dir);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    uint64_t at = 0;
    for (uint64_t v = 0; v <= n; v++) {
        assert_int_equal(fwrite(&at, 8, 1, f), 1);
        if (v < n)
            at += deg(v);
    }
    fclose(f);
    memset(m, 0, sizeof *m);
    m->nodes = n;
    m->edges = at;
    snprintf(m->f[DATASET_INDPTR].file, sizeof m->f[DATASET_INDPTR].file, "indptr.bin");
    m->f[DATASET_INDPTR].dtype = DTYPE_U64;
}

/* degree 3, but 77 for node 131070 and 0 for node 131071: the hub's
 * offsets straddle the second read's boundary (65536 entries a read) */
static uint64_t deg_hub(uint64_t v)
{
    return v == 131070 ? 77 : v == 131071 ? 0 : 3;
}

static void test_arena_plan(void **state)
{
    struct config c;
    config_defaults(&c);
    char err[1024];
    struct run_arena_plan p;
    struct dataset_meta m;
    /* finite fanouts: no file is read (the dataset path does not exist) */
    memset(&m, 0, sizeof m);
    m.nodes = 1000;
    m.edges = 4000;
    snprintf(m.f[DATASET_INDPTR].file, sizeof m.f[DATASET_INDPTR].file, "indptr.bin");
    m.f[DATASET_INDPTR].dtype = DTYPE_U64;
    snprintf(c.dataset.path, sizeof c.dataset.path, "%s/nonexistent", g_dir);
    c.train.batch_size = 16;
    c.model.n_fanouts = c.model.layers = 2;
    c.model.fanouts[0] = c.model.fanouts[1] = 5;
    assert_int_equal(run_arena_plan(&c, &m, &p, err, sizeof err), 0);
    assert_int_equal(p.shape.max_in_degree, BATCH_UNKNOWN);
    assert_int_equal(p.batch.n_max[2], 16 + 80 + 480);
    assert_int_equal(p.params.slot_size, batch_max_bytes(&p.shape, NULL, 0));
    assert_int_equal(p.params.nslots, batch_arena_slots(8, 4, 2, 2)); /* the defaults */
    assert_int_equal(p.params.nslots, 18);
    assert_int_equal(p.rank_bytes, arena_mem_size(&p.params) + SHM_DATA_OFFSET);
    /* a -1 fanout streams indptr.bin for the max in-degree */
    c.model.fanouts[1] = -1;
    assert_int_equal(run_arena_plan(&c, &m, &p, err, sizeof err), -ENOENT);
    assert_non_null(strstr(err, "indptr.bin"));
    char ds[1100];
    snprintf(ds, sizeof ds, "%s/ds", g_dir);
    assert_int_equal(mkdir(ds, 0755), 0);
    snprintf(c.dataset.path, sizeof c.dataset.path, "%s", ds);
    write_indptr(ds, 200000, deg_hub, &m);
    assert_int_equal(run_arena_plan(&c, &m, &p, err, sizeof err), 0);
    assert_int_equal(p.shape.max_in_degree, 77);
    assert_int_equal(p.batch.e_max[1], (16 + 80) * 77);
    uint64_t d;
    /* damaged files are refused with the entry at fault */
    m.edges += 1;
    assert_int_equal(run_max_in_degree(ds, &m, &d, err, sizeof err), -EINVAL);
    assert_non_null(strstr(err, "dataset.toml counts"));
    m.edges -= 1;
    m.nodes += 1;
    assert_int_equal(run_max_in_degree(ds, &m, &d, err, sizeof err), -EINVAL);
    assert_non_null(strstr(err, "ends at entry 200001 of 200002"));
    m.nodes -= 1;
    char path[1200];
    snprintf(path, sizeof path, "%s/indptr.bin", ds);
    FILE *f = fopen(path, "r+b");
    uint64_t back = 5;
    fseek(f, 8 * 70000, SEEK_SET);
    fwrite(&back, 8, 1, f);
    fclose(f);
    assert_int_equal(run_max_in_degree(ds, &m, &d, err, sizeof err), -EINVAL);
    assert_non_null(strstr(err, "entry 70000 is 5 after 209997"));

    /* absurd shapes: refused, naming the keys */
    c.model.n_fanouts = c.model.layers = 1;
    c.model.fanouts[0] = 1000000;
    c.train.batch_size = 10000000;
    m.nodes = 1ull << 40;
    m.edges = 1ull << 45;
    assert_int_equal(run_arena_plan(&c, &m, &p, err, sizeof err), -EOVERFLOW);
    assert_non_null(strstr(err, "model.fanouts = [1000000], train.batch_size = 10000000: "));

    /* memory: half of MemAvailable and all of /dev/shm's free space, summed over ranks */
    m.nodes = 1000;
    m.edges = 4000;
    c.model.fanouts[0] = 5;
    c.train.batch_size = 16;
    assert_int_equal(run_arena_plan(&c, &m, &p, err, sizeof err), 0);
    uint64_t rb = p.rank_bytes;
    assert_int_equal(layout_arena_check(&p, 2, 4 * rb, UINT64_MAX, err, sizeof err), 0);
    assert_int_equal(layout_arena_check(&p, 3, 4 * rb, UINT64_MAX, err, sizeof err), -ENOMEM);
    const char *keys[] = {"3 ranks x 18 slots",  "more than half of the",  "MemAvailable",     "train.batch_size = 16",
                          "model.fanouts = [5]", "pipeline.extract_queue", "pipeline.samplers"};
    for (size_t i = 0; i < SL_ARRAY_LEN(keys); i++)
        if (!strstr(err, keys[i]))
            fail_msg("expected '%s' in '%s'", keys[i], err);
    assert_int_equal(layout_arena_check(&p, 3, UINT64_MAX, 3 * rb, err, sizeof err), 0);
    assert_int_equal(layout_arena_check(&p, 3, UINT64_MAX, 3 * rb - 1, err, sizeof err), -ENOMEM);
    assert_non_null(strstr(err, "free in /dev/shm"));
    p.rank_bytes = UINT64_MAX / 2;
    assert_int_equal(layout_arena_check(&p, 1024, UINT64_MAX - 1, UINT64_MAX, err, sizeof err), -ENOMEM);
    assert_non_null(strstr(err, "need more than"));
    /* this machine's numbers are readable */
    uint64_t mem, shm_free;
    assert_int_equal(layout_memory(&mem, &shm_free, err, sizeof err), 0);
    assert_true(mem > 0 && mem < UINT64_MAX && shm_free < UINT64_MAX);
}

/* ---- sizing the feature buffers --------------------------------------------------------------- */

static void test_featbuf_plan(void **state)
{
    struct config c;
    config_defaults(&c);
    char err[1024];
    struct run_arena_plan a;
    struct layout_featbuf_plan f;
    struct dataset_meta m;
    memset(&m, 0, sizeof m);
    m.nodes = 100000;
    m.edges = 400000;
    snprintf(c.dataset.path, sizeof c.dataset.path, "%s/nonexistent", g_dir);
    c.train.batch_size = 100;
    c.model.n_fanouts = c.model.layers = 2;
    c.model.fanouts[0] = c.model.fanouts[1] = 5;
    c.pipeline.extractors = 2;
    assert_int_equal(run_arena_plan(&c, &m, &a, err, sizeof err), 0);
    assert_int_equal(a.batch.n_max[2], 3600);
    /* no features: refused */
    assert_int_equal(layout_featbuf_plan(&c, &m, &a, &f, err, sizeof err), -EINVAL);
    assert_non_null(strstr(err, "no features.bin"));
    /* dim 100 f32: 400-byte rows, 448-byte slots; 2 x 3600 slots needed */
    m.feat_dim = 100;
    m.f[DATASET_FEATURES] = (struct dataset_file){
        .present = true, .dtype = DTYPE_F32, .rows = m.nodes, .cols = 100, .row_stride = 512, .bytes = 512 * m.nodes};
    c.pipeline.feature_buffer_mb = 4;
    assert_int_equal(layout_featbuf_plan(&c, &m, &a, &f, err, sizeof err), 0);
    assert_int_equal(f.stride, 448);
    assert_int_equal(f.reserve, 7200);
    assert_int_equal(f.params.nslots, (4u << 20) / 448);
    assert_int_equal(f.params.row_bytes, 400);
    assert_int_equal(f.params.n_nodes, m.nodes);
    assert_int_equal(f.rank_bytes, featbuf_mem_size(&f.params));
    /* staging: a 4 KiB block holds any direct read of a 400-byte row in a 512-byte stride; each of
     * the 2 threads' 32 MiB share holds 8192 of them, but a portion never needs more than io_depth */
    assert_int_equal(f.staging.ranks, 1);
    assert_int_equal(f.staging.threads, 2);
    assert_int_equal(f.staging.block_bytes, 4096);
    assert_int_equal(f.staging.blocks, c.pipeline.io_depth);
    assert_int_equal(f.staging.keep, 1);
    assert_int_equal(f.staging_per_thread, (uint64_t)c.pipeline.io_depth * 4096);
    assert_int_equal(f.staging_used, (uint64_t)c.pipeline.io_depth * 4096);
    assert_int_equal(f.staging_bytes, staging_mem_size(&f.staging));
    assert_true(f.staging_bytes >= 2 * f.staging_per_thread && f.staging_bytes <= (64u << 20));
    int64_t depth0 = c.pipeline.io_depth;
    c.pipeline.io_depth = 4096; /* 8192 blocks fit a share: 4096 of them */
    assert_int_equal(layout_featbuf_plan(&c, &m, &a, &f, err, sizeof err), 0);
    assert_int_equal(f.staging.blocks, 4096);
    c.pipeline.staging_mb = 8; /* 4 MiB a thread: 1024 blocks of its own; one thread may have 2048 in flight */
    assert_int_equal(layout_featbuf_plan(&c, &m, &a, &f, err, sizeof err), 0);
    assert_int_equal(f.staging.blocks, 1024);
    assert_int_equal(f.staging_per_thread, 4u << 20);
    assert_int_equal(f.staging_used, 2048 * 4096);
    c.pipeline.staging_mb = 64;
    c.pipeline.io_depth = depth0;
    /* a GPU run keeps rows on the device: metadata only */
    uint64_t host_bytes = f.rank_bytes;
    layout_featbuf_use_device(&f, true);
    assert_true(f.params.rows_on_device);
    assert_int_equal(f.rank_bytes, featbuf_mem_size(&f.params));
    assert_true(f.rank_bytes + (uint64_t)f.params.nslots * f.stride <= host_bytes + 4096);
    layout_featbuf_use_device(&f, false);
    assert_int_equal(f.rank_bytes, host_bytes);
    /* a row stride the format would not give, wider than a block holds: refused */
    m.f[DATASET_FEATURES].row_stride = 4100;
    assert_int_equal(layout_featbuf_plan(&c, &m, &a, &f, err, sizeof err), -EINVAL);
    assert_non_null(strstr(err, "row stride 4100"));
    assert_non_null(strstr(err, "gnnprep check"));
    m.f[DATASET_FEATURES].row_stride = 512;
    /* below the reserve: refused with the size that would do */
    c.pipeline.feature_buffer_mb = 3;
    assert_int_equal(layout_featbuf_plan(&c, &m, &a, &f, err, sizeof err), -EINVAL);
    const char *keys[] = {"pipeline.feature_buffer_mb = 3 holds 7021 rows", "need 7200 slots",
                          "raise pipeline.feature_buffer_mb to at least 4", "pipeline.extractors"};
    for (size_t i = 0; i < SL_ARRAY_LEN(keys); i++)
        if (!strstr(err, keys[i]))
            fail_msg("expected '%s' in '%s'", keys[i], err);
    /* never more slots than nodes, and a small graph needs no more than its nodes */
    m.nodes = 5000;
    c.pipeline.feature_buffer_mb = 1024;
    assert_int_equal(run_arena_plan(&c, &m, &a, err, sizeof err), 0);
    assert_int_equal(layout_featbuf_plan(&c, &m, &a, &f, err, sizeof err), 0);
    assert_int_equal(f.params.nslots, 5000);
    assert_int_equal(f.reserve, 5000);
    /* staging below one row per thread: refused */
    c.pipeline.staging_mb = 1;
    c.pipeline.ranks = 64;
    c.pipeline.extractors = 8;
    assert_int_equal(layout_featbuf_plan(&c, &m, &a, &f, err, sizeof err), -EINVAL);
    assert_non_null(strstr(err, "raise pipeline.staging_mb"));
    c.pipeline.staging_mb = 64;
    c.pipeline.ranks = 1;
    c.pipeline.extractors = 2;
    /* memory: buffers and arenas of every rank, and the node's staging */
    assert_int_equal(layout_featbuf_plan(&c, &m, &a, &f, err, sizeof err), 0);
    uint64_t per = f.rank_bytes + a.rank_bytes, all2 = 2 * per + f.staging_bytes;
    assert_int_equal(layout_featbuf_check(&f, &a, 2, 2 * all2, UINT64_MAX, err, sizeof err), 0);
    assert_int_equal(layout_featbuf_check(&f, &a, 2, 2 * all2 - 2, UINT64_MAX, err, sizeof err), -ENOMEM);
    assert_int_equal(layout_featbuf_check(&f, &a, 3, 2 * all2, UINT64_MAX, err, sizeof err), -ENOMEM);
    assert_non_null(strstr(err, "lower pipeline.feature_buffer_mb"));
    assert_non_null(strstr(err, "staging"));
    assert_int_equal(layout_featbuf_check(&f, &a, 2, UINT64_MAX, all2, err, sizeof err), 0);
    assert_int_equal(layout_featbuf_check(&f, &a, 2, UINT64_MAX, all2 - 1, err, sizeof err), -ENOMEM);
    assert_non_null(strstr(err, "/dev/shm"));
    /* created with the run, attached by name, marked broken by layout_close */
    struct layout l;
    assert_int_equal(layout_create(&l, g_run, &c, 2, &(struct layout_objects){.arena = &a.params, .featbuf = &f.params, .allreduce_floats = 100, .epochs = 3}, err, sizeof err), 0);
    assert_int_equal(count_segments(g_run), 4 + 2 * (RUN_QUEUES + 2));
    /* the staging buffer: two ranks of two threads, as the plan for two ranks says */
    struct staging stg;
    assert_int_equal(staging_attach(&stg, g_run, err, sizeof err), 0);
    assert_ptr_equal(layout_staging(&l), &l.staging);
    struct staging_params sp2;
    assert_int_equal(layout_staging_params(&c, 2, f.params.row_bytes, &sp2, err, sizeof err), 0);
    assert_int_equal(stg.ranks, 2);
    assert_int_equal(stg.threads, 2);
    assert_int_equal(stg.blocks_per, sp2.blocks);
    assert_int_equal(stg.block_bytes, 4096);
    uint32_t blk;
    assert_int_equal(staging_get(&stg, staging_portion_of(&stg, 1, 1), 0, &blk), 0);
    assert_int_equal(staging_home(&stg, blk), 3);
    uint32_t seq = staging_seq(&stg, 0);
    char name[SHM_NAME_MAX];
    struct featbuf fb;
    assert_int_equal(run_featbuf_segname(name, sizeof name, g_run, 1, err, sizeof err), 0);
    assert_int_equal(featbuf_attach(&fb, name, err, sizeof err), 0);
    assert_int_equal(fb.nslots, 5000);
    uint32_t slot;
    int action;
    assert_int_equal(featbuf_acquire(&fb, 42, &slot, &action), 0);
    assert_int_equal(action, FEATBUF_LOAD);
    /* the results page: an epoch is complete once every rank published it */
    struct results res;
    assert_int_equal(run_results_segname(name, sizeof name, g_run, err, sizeof err), 0);
    assert_int_equal(results_attach(&res, name, err, sizeof err), 0);
    struct results_rec sum, *rec = results_slot(&res, 0, 1);
    assert_non_null(rec);
    rec->val_labelled = 10;
    rec->val_correct = 7;
    rec->seconds = 2.5;
    results_publish(rec, 1);
    assert_false(results_epoch(&l.results, 1, &sum));
    rec = results_slot(&res, 1, 1);
    rec->val_labelled = 10;
    rec->val_correct = 2;
    rec->seconds = 3.5;
    assert_false(results_epoch(&l.results, 1, &sum));
    results_publish(rec, 1);
    assert_true(results_epoch(&l.results, 1, &sum));
    assert_int_equal(sum.val_labelled, 20);
    assert_int_equal(sum.val_correct, 9);
    assert_true(sum.seconds == 3.5);
    assert_null(results_slot(&res, 2, 1));
    /* a record is reused only after the reader consumed its epoch */
    assert_null(results_slot(&res, 0, 1 + RESULTS_WINDOW));
    results_consume(&l.results, 1);
    assert_non_null(results_slot(&res, 0, 1 + RESULTS_WINDOW));
    results_free(&res);
    assert_null(layout_featbuf(&l, 2));
    assert_non_null(layout_featbuf(&l, 0));
    layout_close(&l);
    assert_int_equal(featbuf_wait_valid(&fb, slot, -1), -EPIPE);
    assert_int_equal(staging_wait(&stg, 0, seq, -1), -EPIPE);
    assert_int_equal(staging_get(&stg, 0, 0, &blk), -EPIPE);
    staging_free(&stg);
    featbuf_free(&fb);
    layout_free(&l);
    assert_null(layout_staging(&l));
    assert_int_equal(shm_run_unlink(g_run), 4 + 2 * (RUN_QUEUES + 2));
}

/* Blocks hold the widest direct read of a row at any alignment up to 4 KiB;
 * portions get a thread's share in whole blocks, at most io_depth. */
static void test_staging_params(void **state)
{
    (void)state;
    struct config c;
    config_defaults(&c);
    char err[512];
    static const uint64_t rows[][2] = {
        /* row bytes, block: strides 16, 512, 1536 (rows start every 512 B: the widest extent
         * starts 3584 B into a 4 KiB block), 4096, 4608, 8192 */
        {12, 4096}, {400, 4096}, {512, 4096}, {1200, 8192}, {4096, 4096}, {4500, 8192}, {8192, 8192},
    };
    for (size_t i = 0; i < SL_ARRAY_LEN(rows); i++) {
        struct staging_params sp;
        assert_int_equal(layout_staging_params(&c, 1, rows[i][0], &sp, err, sizeof err), 0);
        if (sp.block_bytes != rows[i][1])
            fail_msg("%" PRIu64 "-byte rows: %" PRIu64 "-byte blocks, expected %" PRIu64, rows[i][0],
                     sp.block_bytes, rows[i][1]);
        assert_int_equal(sp.blocks, c.pipeline.io_depth);
        assert_true(staging_mem_size(&sp) > 0);
    }
    /* 3 ranks x 2 threads share 1 MiB: 174762 bytes each, 21 blocks of 8 KiB */
    c.pipeline.staging_mb = 1;
    struct staging_params sp;
    assert_int_equal(layout_staging_params(&c, 3, 1200, &sp, err, sizeof err), 0);
    assert_int_equal(sp.ranks, 3);
    assert_int_equal(sp.threads, 2);
    assert_int_equal(sp.blocks, 21);
    assert_true(staging_mem_size(&sp) <= (1u << 20));
    /* below one block a thread: refused, naming the key */
    c.pipeline.extractors = 64;
    assert_int_equal(layout_staging_params(&c, 3, 1200, &sp, err, sizeof err), -EINVAL);
    assert_non_null(strstr(err, "pipeline.staging_mb = 1"));
    assert_non_null(strstr(err, "192 extractor threads"));
}

/* ---- the stage command line -------------------------------------------------------------- */

static void test_args_round_trip(void **state)
{
    for (int resume = 0; resume < 2; resume++) {
        /* the optional flags ride along: --start-epoch, --trace, a
         * multi-node run's --node and --nodes, and a GPU rank's --device
         * and --nccl-id with --resume */
        struct run_args a;
        memset(&a, 0, sizeof a); /* padding too: the parsed copy is compared byte for byte */
        a.stage = RUN_TRAINER;
        a.rank = 1;
        a.ranks = 2;
        a.resume = resume;
        a.trace = resume;
        a.start_epoch = resume ? 7 : 0;
        a.node = resume ? 2 : 0;
        a.nodes = resume ? 3 : 1;
        a.device = resume ? 1 : -1;
        a.has_nccl_id = resume;
        for (int i = 0; resume && i < RUN_NCCL_ID_BYTES; i++)
            a.nccl_id[i] = (uint8_t)(i * 7 + 3); /* every nibble value, 0x00 and 0xff among them */
        a.metrics_block = run_block(1, RUN_TRAINER);
        snprintf(a.run_id, sizeof a.run_id, "123-abc-def");
        snprintf(a.run_dir, sizeof a.run_dir, "/run/user/1/sluice/x");
        snprintf(a.config, sizeof a.config, "/run/user/1/sluice/x/config.toml");
        char buf[8192], err[512];
        char *argv[RUN_ARGV_MAX];
        assert_int_equal(run_args_build(&a, buf, sizeof buf, argv, RUN_ARGV_MAX, err, sizeof err), 0);
        int argc = 0;
        while (argv[argc])
            argc++;
        assert_int_equal(argc, 7 + 7 * resume);
        assert_string_equal(argv[0], "gnn-trainer");
        assert_string_equal(argv[1], "--run=123-abc-def");
        assert_string_equal(argv[2], "--rank=1");
        if (resume) {
            assert_string_equal(argv[12], "--device=1");
            assert_int_equal(strlen(argv[13]), strlen("--nccl-id=") + 2 * RUN_NCCL_ID_BYTES);
            assert_memory_equal(argv[13], "--nccl-id=030a11", 16);
        }
        struct run_args b;
        assert_int_equal(run_args_parse(argc, argv, &b, err, sizeof err), 0);
        assert_memory_equal(&a, &b, sizeof a);
        assert_int_equal(run_global_rank(&b), resume ? 2 * 2 + 1 : 1);
        assert_int_equal(run_world(&b), resume ? 6 : 2);
        /* too little room is an error, not a cut command line */
        assert_int_equal(run_args_build(&a, buf, 40, argv, RUN_ARGV_MAX, err, sizeof err), -ENAMETOOLONG);
    }
    /* "--key value" works as well */
    char *sep[] = {"gnn-sampler", "--run",    "9-x",       "--rank",          "0", "--ranks", "1", "--run-dir",
                   "/d",          "--config", "/d/c.toml", "--metrics-block", "0", NULL};
    struct run_args b;
    char err[512];
    assert_int_equal(run_args_parse(13, sep, &b, err, sizeof err), 0);
    assert_int_equal(b.stage, RUN_SAMPLER);
    assert_string_equal(b.config, "/d/c.toml");
    assert_int_equal(b.device, -1); /* no --device: the CPU */
    assert_false(b.has_nccl_id);
}

static void test_args_rejected(void **state)
{
    const struct {
        const char *argv[10];
        const char *msg;
    } cases[] = {
        {{"gnn-pump", "--run=1-a"}, "is not a stage program"},
        {{"gnn-sampler", "--run=1-a", "--rank=0", "--ranks=1", "--run-dir=/d", "--config=/c"}, "missing"},
        {{"gnn-sampler", "--run=1.a", "--rank=0"}, "has character '.'"},
        {{"gnn-sampler", "--run=1-a", "--rank=2", "--ranks=2", "--run-dir=/d", "--config=/c", "--metrics-block=8"},
         "--rank=2 is not below --ranks=2"},
        {{"gnn-trainer", "--run=1-a", "--rank=0", "--ranks=1", "--run-dir=/d", "--config=/c", "--metrics-block=1"},
         "does not belong to rank 0 (expected 2)"},
        {{"gnn-trainer", "--rank=x"}, "--rank=x is not an integer"},
        {{"gnn-trainer", "--bench"}, "unknown argument '--bench'"},
        {{"gnn-trainer", "--config"}, "--config needs a value"},
        {{"gnn-trainer", "--run=1-a", "--rank=0", "--ranks=1", "--run-dir=/d", "--config=/c", "--metrics-block=2",
          "--node=2", "--nodes=2"},
         "--node=2 of --nodes=2"},
        {{"gnn-trainer", "--device=-1"}, "--device=-1 is not a GPU ordinal"},
        {{"gnn-trainer", "--device=gpu0"}, "--device=gpu0 is not a GPU ordinal"},
        {{"gnn-trainer", "--nccl-id=00ff"}, "--nccl-id needs 256 hex digits (an NCCL unique id), got 4 characters"},
        {{"gnn-trainer", "--run=1-a", "--rank=0", "--ranks=1", "--run-dir=/d", "--config=/c", "--metrics-block=2",
          NULL /* a good --nccl-id, below */},
         "--nccl-id needs --device"},
    };
    char good_id[16 + 2 * RUN_NCCL_ID_BYTES + 1] = "--nccl-id=";
    for (int i = 0; i < RUN_NCCL_ID_BYTES; i++)
        strcat(good_id, "a5");
    for (size_t i = 0; i < SL_ARRAY_LEN(cases); i++) {
        const char *argv[12];
        int argc = 0;
        while (cases[i].argv[argc]) {
            argv[argc] = cases[i].argv[argc];
            argc++;
        }
        if (i == SL_ARRAY_LEN(cases) - 1)
            argv[argc++] = good_id;
        argv[argc] = NULL;
        struct run_args a;
        char err[512] = "";
        assert_int_equal(run_args_parse(argc, (char **)argv, &a, err, sizeof err), -EINVAL);
        if (!strstr(err, cases[i].msg))
            fail_msg("case %zu: expected '%s' in '%s'", i, cases[i].msg, err);
    }
}

/* ---- the run directory -------------------------------------------------------------------- */

static void state_for(struct rundir_state *st, const char *run_id, pid_t pid, uint64_t start)
{
    *st = (struct rundir_state){.run_id = run_id,
                                .name = "job",
                                .pid = pid,
                                .pid_start = start,
                                .config_path = "/etc/x \"quoted\".toml",
                                .ranks = 2};
}

static void test_rundir(void **state)
{
    char base[1200], err[1024];
    snprintf(base, sizeof base, "%s/base", g_dir);
    setenv("XDG_RUNTIME_DIR", g_dir, 1);
    char found[PATH_MAX];
    assert_int_equal(rundir_base(found, sizeof found, err, sizeof err), 0);
    char want[1200];
    snprintf(want, sizeof want, "%s/sluice", g_dir);
    assert_string_equal(found, want);
    struct stat st;
    assert_int_equal(stat(found, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0700);
    assert_int_equal(mkdir(base, 0755), 0);

    struct config c;
    config_defaults(&c);
    snprintf(c.dataset.path, sizeof c.dataset.path, "/data/ds");
    uint64_t me_start;
    assert_int_equal(shm_pid_start_time(getpid(), &me_start), 0);
    struct rundir_state s;
    state_for(&s, "100-a-b", getpid(), me_start);
    struct rundir d;
    assert_int_equal(rundir_create(&d, base, "job", &s, &c, err, sizeof err), 0);
    assert_int_equal(stat(d.path, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0700);
    pid_t pid;
    uint64_t start;
    assert_int_equal(rundir_read_owner(d.path, &pid, &start), 0);
    assert_int_equal(pid, getpid());
    assert_int_equal(start, me_start);
    char path[PATH_MAX];
    assert_int_equal(rundir_file(&d, RUNDIR_CONFIG, path, sizeof path), 0);
    struct config back;
    assert_int_equal(config_load(&back, path, NULL, 0, err, sizeof err), 0);
    assert_string_equal(back.dataset.path, "/data/ds");

    /* the name is held while its owner lives... */
    struct rundir d2;
    state_for(&s, "101-a-b", getpid(), me_start);
    assert_int_equal(rundir_create(&d2, base, "job", &s, &c, err, sizeof err), -EBUSY);
    assert_non_null(strstr(err, "in use by a running gnnlaunch"));
    /* ...and reclaim leaves it alone; a dead owner's directory goes */
    struct rundir dd;
    state_for(&s, "102-a-b", dead_pid(), 0);
    assert_int_equal(rundir_create(&dd, base, "gone", &s, &c, err, sizeof err), 0);
    char stray[1300];
    snprintf(stray, sizeof stray, "%s/.new-%ld-x-y", base, (long)dead_pid()); /* a creation cut short */
    assert_int_equal(mkdir(stray, 0700), 0);
    assert_int_equal(rundir_reclaim(base), 2);
    assert_false(t_exists(dd.path));
    assert_false(t_exists(stray));
    assert_true(t_exists(d.path));
    /* a dead owner's name is taken over */
    state_for(&s, "103-a-b", dead_pid(), 0);
    assert_int_equal(rundir_create(&dd, base, "again", &s, &c, err, sizeof err), 0);
    state_for(&s, "104-a-b", getpid(), me_start);
    assert_int_equal(rundir_create(&d2, base, "again", &s, &c, err, sizeof err), 0);
    assert_int_equal(rundir_read_owner(d2.path, &pid, &start), 0);
    assert_int_equal(pid, getpid());
    /* a directory that is no run directory is not removed */
    snprintf(path, sizeof path, "%s/mine", base);
    assert_int_equal(mkdir(path, 0700), 0);
    snprintf(path, sizeof path, "%s/mine/notes.txt", base);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fclose(f);
    assert_int_equal(rundir_create(&dd, base, "mine", &s, &c, err, sizeof err), -EEXIST);
    assert_true(t_exists(path));

    rundir_remove(&d);
    rundir_remove(&d2);
    assert_false(t_exists(d.path));
    rundir_remove(&d); /* idempotent */

    /* names and path lengths */
    assert_int_equal(rundir_name_check("a-b_C9", err, sizeof err), 0);
    assert_int_equal(rundir_name_check("a.b", err, sizeof err), -EINVAL);
    assert_int_equal(rundir_name_check("", err, sizeof err), -EINVAL);
    char deep[600];
    snprintf(deep, sizeof deep, "%s/%0100d", base, 0);
    assert_int_equal(mkdir(deep, 0700), 0);
    assert_int_equal(rundir_create(&dd, deep, "job", &s, &c, err, sizeof err), -ENAMETOOLONG);
    assert_non_null(strstr(err, "too long for a socket path"));
}

static int group_setup(void **state)
{
    t_scratch(g_dir, sizeof g_dir, "layout");
    snprintf(g_run, sizeof g_run, "tlayout-%ld", (long)getpid());
    return 0;
}

static int group_teardown(void **state)
{
    shm_run_unlink(g_run);
    t_rmrf(g_dir);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stages_and_queues), cmocka_unit_test(test_create_and_attach),
        cmocka_unit_test(test_arena_plan),        cmocka_unit_test(test_featbuf_plan),
        cmocka_unit_test(test_staging_params),
        cmocka_unit_test(test_args_round_trip),
        cmocka_unit_test(test_args_rejected),     cmocka_unit_test(test_rundir),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
