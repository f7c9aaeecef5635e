/* test_memfit.c - fitting a run into its memory (issue 24 items 1, 2):
 * the memory cgroup and its limit read from fake hierarchies (v1, v2,
 * hybrid, nested limits, "max"), config_given, the plan's sizing and
 * refusal, the plan line and the refusal through gnnlaunch, and the OOM
 * report of a stage killed in a real small cgroup (skipped, saying why,
 * where no cgroup can be made). */
#include "t_util.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <sys/stat.h>

#include "core/config.h"
#include "core/dataset.h"
#include "launcher/cgroup.h"
#include "launcher/layout.h"
#include "launcher/memfit.h"
#include "stages/sampler_fetch.h"
#include "t_launch.h"

#define CASE_ALARM_S 120
#define GIB ((uint64_t)1 << 30)
#define MIB ((uint64_t)1 << 20)

static char g_ds[1200], g_cfg[1200], g_stages[1300];

/* Writes text into dir/file, making dir and its parents. */
static void put(const char *dir, const char *file, const char *text)
{
    char cmd[2600], path[2600];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s'", dir);
    assert_int_equal(system(cmd), 0);
    snprintf(path, sizeof path, "%s/%s", dir, file);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

/* A fresh fake root under the scratch directory. */
static void fake_root(char *root, size_t len, const char *name)
{
    snprintf(root, len, "%s/%s", t_ldir, name);
    t_rmrf(root);
    assert_int_equal(mkdir(root, 0755), 0);
}

/* ---- cgroup reading --------------------------------------------------------------------- */

static void test_cgroup_v1_nested(void **state)
{
    (void)state;
    char root[1300], self[1400], d[1500];
    fake_root(root, sizeof root, "v1");
    snprintf(self, sizeof self, "%s/self", root);
    put(root, "self", "12:pids:/a/b\n4:memory:/a/b\n0::/\n");
    snprintf(d, sizeof d, "%s/memory", root);
    put(d, "memory.limit_in_bytes", "9223372036854771712\n"); /* v1's "none" */
    snprintf(d, sizeof d, "%s/memory/a", root);
    put(d, "memory.limit_in_bytes", "1073741824\n"); /* the ancestor's limit binds */
    snprintf(d, sizeof d, "%s/memory/a/b", root);
    put(d, "memory.limit_in_bytes", "4294967296\n");
    put(d, "memory.oom_control", "oom_kill_disable 0\nunder_oom 0\noom_kill 3\n");
    put(d, "memory.max_usage_in_bytes", "123456789\n");
    struct cgroup_mem g;
    char err[512];
    assert_int_equal(cgroup_mem_read_at(&g, root, self, err, sizeof err), 0);
    assert_int_equal(g.version, 1);
    assert_int_equal(g.limit, GIB);
    assert_string_equal(g.limit_name, "/a");
    assert_string_equal(g.name, "/a/b");
    assert_int_equal(g.oom_kills_start, 3);
    const char *what;
    assert_int_equal(cgroup_mem_usage(&g, &what), 123456789);
    assert_string_equal(what, "memory.max_usage_in_bytes");
    assert_string_equal(cgroup_mem_limit_file(&g), "memory.limit_in_bytes");
    put(d, "memory.oom_control", "oom_kill_disable 0\nunder_oom 0\noom_kill 4\n");
    assert_int_equal(cgroup_mem_oom_kills(&g), 4);
    /* none anywhere: no limit */
    snprintf(d, sizeof d, "%s/memory/a", root);
    put(d, "memory.limit_in_bytes", "9223372036854771712\n");
    snprintf(d, sizeof d, "%s/memory/a/b", root);
    put(d, "memory.limit_in_bytes", "9223372036854771712\n");
    assert_int_equal(cgroup_mem_read_at(&g, root, self, err, sizeof err), 0);
    assert_int_equal(g.version, 1);
    assert_true(g.limit == CGROUP_NONE);
    /* a damaged limit file is an error naming it */
    put(d, "memory.limit_in_bytes", "lots\n");
    assert_int_equal(cgroup_mem_read_at(&g, root, self, err, sizeof err), -EINVAL);
    assert_non_null(strstr(err, "memory.limit_in_bytes"));
    t_rmrf(root);
}

static void test_cgroup_v2_nested(void **state)
{
    (void)state;
    char root[1300], self[1400], d[1500];
    fake_root(root, sizeof root, "v2");
    snprintf(self, sizeof self, "%s/self", root);
    put(root, "self", "0::/run/job/leaf\n");
    put(root, "cgroup.controllers", "cpu memory pids\n");
    snprintf(d, sizeof d, "%s/run", root);
    put(d, "memory.max", "max\n");
    snprintf(d, sizeof d, "%s/run/job", root);
    put(d, "memory.max", "2147483648\n");
    snprintf(d, sizeof d, "%s/run/job/leaf", root);
    put(d, "memory.max", "max\n"); /* "max" is none: the parent's limit applies */
    put(d, "memory.events", "low 0\nhigh 0\nmax 7\noom 2\noom_kill 2\noom_group_kill 0\n");
    put(d, "memory.current", "5000\n");
    struct cgroup_mem g;
    char err[512];
    assert_int_equal(cgroup_mem_read_at(&g, root, self, err, sizeof err), 0);
    assert_int_equal(g.version, 2);
    assert_int_equal(g.limit, 2 * GIB);
    assert_string_equal(g.limit_name, "/run/job");
    assert_int_equal(g.oom_kills_start, 2);
    const char *what;
    assert_int_equal(cgroup_mem_usage(&g, &what), 5000); /* no memory.peak: memory.current */
    assert_string_equal(what, "memory.current");
    put(d, "memory.peak", "9000\n");
    assert_int_equal(cgroup_mem_usage(&g, &what), 9000);
    assert_string_equal(what, "memory.peak");
    assert_string_equal(cgroup_mem_limit_file(&g), "memory.max");
    /* the leaf's own smaller limit wins */
    put(d, "memory.max", "536870912\n");
    assert_int_equal(cgroup_mem_read_at(&g, root, self, err, sizeof err), 0);
    assert_int_equal(g.limit, 512 * MIB);
    assert_string_equal(g.limit_name, "/run/job/leaf");
    t_rmrf(root);
}

static void test_cgroup_hybrid_and_none(void **state)
{
    (void)state;
    char root[1300], self[1400], d[1500];
    struct cgroup_mem g;
    char err[512];
    /* hybrid: v2 at ROOT/unified without memory, memory on v1 */
    fake_root(root, sizeof root, "hy");
    snprintf(self, sizeof self, "%s/self", root);
    put(root, "self", "4:memory:/x\n0::/x\n");
    snprintf(d, sizeof d, "%s/unified", root);
    put(d, "cgroup.controllers", "\n");
    snprintf(d, sizeof d, "%s/memory/x", root);
    put(d, "memory.limit_in_bytes", "209715200\n");
    assert_int_equal(cgroup_mem_read_at(&g, root, self, err, sizeof err), 0);
    assert_int_equal(g.version, 1);
    assert_int_equal(g.limit, 200 * MIB);
    /* v2 only, its memory controller not enabled for the cgroup: no limit */
    fake_root(root, sizeof root, "nomem");
    snprintf(self, sizeof self, "%s/self", root);
    put(root, "self", "0::/y\n");
    put(root, "cgroup.controllers", "cpu\n");
    snprintf(d, sizeof d, "%s/y", root);
    put(d, "cgroup.procs", "");
    assert_int_equal(cgroup_mem_read_at(&g, root, self, err, sizeof err), 0);
    assert_int_equal(g.version, 0);
    assert_true(g.limit == CGROUP_NONE);
    /* a container that mounts its own cgroup as the root: /proc names a
     * path that is not under the mount, the root stands for it */
    fake_root(root, sizeof root, "ctr");
    snprintf(self, sizeof self, "%s/self", root);
    put(root, "self", "0::/docker/abc\n");
    put(root, "cgroup.controllers", "memory\n");
    put(root, "memory.max", "1073741824\n");
    put(root, "memory.events", "oom_kill 0\n");
    assert_int_equal(cgroup_mem_read_at(&g, root, self, err, sizeof err), 0);
    assert_int_equal(g.version, 2);
    assert_int_equal(g.limit, GIB);
    assert_string_equal(g.name, "/");
    /* no such /proc file */
    snprintf(self, sizeof self, "%s/absent", root);
    assert_true(cgroup_mem_read_at(&g, root, self, err, sizeof err) < 0);
    t_rmrf(root);
}

/* ---- config_given and the plan ------------------------------------------------------------ */

static void test_config_given(void **state)
{
    (void)state;
    struct config c;
    char err[512];
    const char *sets[] = {"dataset.path=\"x\"", "pipeline.feature_buffer_mb=1024"}; /* the default, given */
    assert_int_equal(config_load(&c, NULL, sets, 2, err, sizeof err), 0);
    assert_true(config_given(&c, "pipeline.feature_buffer_mb"));
    assert_false(config_given(&c, "pipeline.staging_mb"));
    assert_false(config_given(&c, "no.such_key"));
    assert_int_equal(config_load(&c, NULL, sets, 1, err, sizeof err), 0);
    assert_false(config_given(&c, "pipeline.feature_buffer_mb"));
    assert_int_equal(c.pipeline.feature_buffer_mb, 1024);
}

static uint64_t g_pack; /* plan, plan_ix: a packed run's reading buffers per rank (0: none) */

/* Plans g_ds with cfg sets under a cgroup limit of lim bytes. */
static int plan(struct memfit_plan *p, struct config *c, const char *const *sets, int nsets, uint64_t lim,
                struct layout_featbuf_plan *f, char *err, size_t errlen)
{
    struct dataset_meta m;
    struct run_arena_plan a;
    assert_int_equal(config_load(c, NULL, sets, nsets, err, errlen), 0);
    assert_int_equal(dataset_meta_read(g_ds, &m, true, err, errlen), 0);
    assert_int_equal(run_arena_plan(c, &m, &a, err, errlen), 0);
    assert_int_equal(layout_featbuf_plan(c, &m, &a, f, err, errlen), 0);
    struct cgroup_mem cg = {.version = 2, .limit = lim, .limit_name = "/t", .oom_kills_start = CGROUP_NONE};
    return memfit_plan_make(p, c, &m, &a, f, NULL, g_pack, &cg, 1, false, 64 * GIB, 64 * GIB, err, errlen);
}

static void test_plan(void **state)
{
    (void)state;
    char ds[1300], err[2048], line[2048];
    snprintf(ds, sizeof ds, "dataset.path=\"%s\"", g_ds);
    struct memfit_plan p;
    struct config c;
    struct layout_featbuf_plan f;
    /* no limit to speak of: the defaults stay */
    const char *dflt[] = {ds, "model.fanouts=[4,4]", "train.batch_size=100"};
    assert_int_equal(plan(&p, &c, dflt, 3, 64 * GIB, &f, err, sizeof err), 0);
    assert_false(p.featbuf_sized);
    assert_int_equal(c.pipeline.feature_buffer_mb, 1024);
    /* 20000 nodes x 256 B = 4.9 MiB of rows at most: a 1024 MiB cap
     * takes no more, so even a small limit leaves the key alone... */
    uint64_t base = p.topology + p.arenas + p.workspace + p.processes + MEMFIT_CACHE_MIN;
    assert_int_equal(plan(&p, &c, dflt, 3, base + 8 * MIB, &f, err, sizeof err), 0);
    assert_int_equal(c.pipeline.feature_buffer_mb, 1024);
    /* ... until it cannot hold all rows: then the buffer is sized to fit */
    assert_int_equal(plan(&p, &c, dflt, 3, base + 4 * MIB, &f, err, sizeof err), 0);
    assert_true(p.featbuf_sized);
    assert_true(c.pipeline.feature_buffer_mb < 5); /* all rows: 4.9 MiB */
    assert_false(config_given(&c, "pipeline.feature_buffer_mb"));
    assert_true(p.featbuf + p.staging + p.arenas + p.topology + p.margin <= base + 4 * MIB);
    assert_true(f.params.nslots >= f.reserve);
    memfit_plan_describe(&p, &c, line, sizeof line);
    assert_non_null(strstr(line, "memory: limit "));
    assert_non_null(strstr(line, "(cgroup /t memory.max), plan: feature buffer "));
    assert_non_null(strstr(line, "sized to fit"));
    assert_non_null(strstr(line, ", staging "));
    assert_non_null(strstr(line, ", arenas "));
    assert_non_null(strstr(line, ", topology "));
    assert_non_null(strstr(line, ", margin "));
    /* the same buffer asked for explicitly is refused, naming key, sizes, limit */
    const char *given[] = {ds, "model.fanouts=[4,4]", "train.batch_size=100", "pipeline.feature_buffer_mb=1024"};
    assert_int_equal(plan(&p, &c, given, 4, base + 4 * MIB, &f, err, sizeof err), -ENOMEM);
    assert_non_null(strstr(err, "pipeline.feature_buffer_mb = 1024"));
    assert_non_null(strstr(err, "more than the limit of"));
    assert_non_null(strstr(err, "(cgroup /t memory.max)"));
    /* a limit below what the run needs at least: refused, naming what to lower */
    assert_int_equal(plan(&p, &c, dflt, 3, base / 2, &f, err, sizeof err), -ENOMEM);
    assert_non_null(strstr(err, "train.batch_size"));
    /* an explicit key within the limit is kept as given */
    const char *small[] = {ds, "model.fanouts=[4,4]", "train.batch_size=100", "pipeline.feature_buffer_mb=2"};
    assert_int_equal(plan(&p, &c, small, 4, base + 8 * MIB, &f, err, sizeof err), 0);
    assert_false(p.featbuf_sized);
    assert_int_equal(c.pipeline.feature_buffer_mb, 2);
}

/* A packed run's reading buffers (memfit_plan_make's pack_bytes) are
 * fixed like the topology: a feature buffer sized to fit gets exactly that
 * much less room, the plan line names them, and a given buffer that fits
 * beside them no longer is refused naming them. */
static void test_plan_packed(void **state)
{
    (void)state;
    char ds[1300], err[2048], line[2048];
    snprintf(ds, sizeof ds, "dataset.path=\"%s\"", g_ds);
    struct memfit_plan p;
    struct config c;
    struct layout_featbuf_plan f;
    const char *dflt[] = {ds, "model.fanouts=[4,4]", "train.batch_size=100"};
    assert_int_equal(plan(&p, &c, dflt, 3, 64 * GIB, &f, err, sizeof err), 0);
    assert_int_equal(p.pack, 0);
    uint64_t base = p.topology + p.arenas + p.workspace + p.processes + MEMFIT_CACHE_MIN;
    /* without: the buffer sized to a limit that cannot hold all rows */
    assert_int_equal(plan(&p, &c, dflt, 3, base + 4 * MIB, &f, err, sizeof err), 0);
    assert_true(p.featbuf_sized);
    int64_t mb = c.pipeline.feature_buffer_mb;
    uint64_t featbuf = p.featbuf, staging = p.staging;
    memfit_plan_describe(&p, &c, line, sizeof line);
    assert_null(strstr(line, "packed reads"));
    /* with 3 MiB of packed reads and the limit 3 MiB higher: the same buffer */
    g_pack = 3 * MIB;
    assert_int_equal(plan(&p, &c, dflt, 3, base + 7 * MIB, &f, err, sizeof err), 0);
    assert_int_equal(p.pack, 3 * MIB);
    assert_true(p.featbuf_sized);
    assert_int_equal(c.pipeline.feature_buffer_mb, mb);
    assert_int_equal(p.featbuf, featbuf);
    assert_int_equal(p.staging, staging);
    assert_true(p.featbuf + p.staging + p.arenas + p.topology + p.margin + p.pack <= base + 7 * MIB);
    memfit_plan_describe(&p, &c, line, sizeof line);
    if (!strstr(line, "packed reads 3.0 MiB (pipeline.extractors = "))
        fail_msg("plan line lacks the packed reads: %s", line);
    /* the same limit without the 3 MiB would give a larger buffer */
    g_pack = 0;
    assert_int_equal(plan(&p, &c, dflt, 3, base + 7 * MIB, &f, err, sizeof err), 0);
    assert_true(p.featbuf > featbuf || !p.featbuf_sized);
    /* a given buffer that fits alone (test_plan) is refused beside 8 MiB of packed reads, naming them */
    const char *small[] = {ds, "model.fanouts=[4,4]", "train.batch_size=100", "pipeline.feature_buffer_mb=2"};
    assert_int_equal(plan(&p, &c, small, 4, base + 8 * MIB, &f, err, sizeof err), 0);
    g_pack = 8 * MIB;
    assert_int_equal(plan(&p, &c, small, 4, base + 8 * MIB, &f, err, sizeof err), -ENOMEM);
    g_pack = 0;
    if (!strstr(err, "packed reads 8.0 MiB") || !strstr(err, "pipeline.feature_buffer_mb = 2"))
        fail_msg("refusal lacks the packed reads or the key: %s", err);
}

static uint64_t g_fwant; /* plan_ix's feature buffer and staging before the plan */
static uint64_t g_nodes; /* plan_ix: the node count to plan for, 0: the dataset's */
static int g_ranks = 1;  /* plan_ix: ranks on the node */

/* Plans g_ds as if indices.bin were ix bytes (the plan reads sizes only). */
static int plan_ix(struct memfit_plan *p, struct config *c, const char *const *sets, int nsets, uint64_t lim,
                   uint64_t ix, struct dataset_meta *m, char *err, size_t errlen)
{
    struct run_arena_plan a;
    static struct layout_featbuf_plan f;
    assert_int_equal(config_load(c, NULL, sets, nsets, err, errlen), 0);
    assert_int_equal(dataset_meta_read(g_ds, m, true, err, errlen), 0);
    m->f[DATASET_INDICES].bytes = ix;
    if (g_nodes)
        m->nodes = g_nodes; /* more feature rows than the buffer's default holds */
    assert_int_equal(run_arena_plan(c, m, &a, err, errlen), 0);
    assert_int_equal(layout_featbuf_plan(c, m, &a, &f, err, errlen), 0);
    struct cgroup_mem cg = {.version = 2, .limit = lim, .limit_name = "/t", .oom_kills_start = CGROUP_NONE};
    g_fwant = f.rank_bytes + f.staging_bytes; /* the feature buffer before sizing */
    return memfit_plan_make(p, c, m, &a, &f, NULL, g_pack, &cg, g_ranks, false, 64 * GIB, 64 * GIB, err, errlen);
}

/* pipeline.topology in the plan: auto resolves to memory or a neighbour
 * cache sized to the limit (or mmap when no useful cache fits), each mode
 * counted as memfit.h says, given keys kept, and refusals. */
static void test_plan_topology(void **state)
{
    (void)state;
    char ds[1300], err[2048], line[2048];
    snprintf(ds, sizeof ds, "dataset.path=\"%s\"", g_ds);
    struct memfit_plan p;
    struct config c;
    struct dataset_meta m;
    const char *dflt[] = {ds, "model.fanouts=[4,4]", "train.batch_size=100"};
    const uint64_t big = 2 * GIB; /* indices.bin twice a 1 GiB limit */
    /* room to spare: memory */
    assert_int_equal(plan_ix(&p, &c, dflt, 3, 64 * GIB, big, &m, err, sizeof err), 0);
    /* labels.bin is in each sampler's memory in "memory" and "cache" (not "mmap") */
    uint64_t ip = m.f[DATASET_INDPTR].bytes, lb = m.f[DATASET_LABELS].present ? m.f[DATASET_LABELS].bytes : 0;
    assert_true(lb > 0);
    assert_int_equal(c.pipeline.topology, TOPOLOGY_MEMORY);
    assert_true(p.topology_auto);
    assert_false(config_given(&c, "pipeline.topology"));
    assert_int_equal(p.topology, ip + lb + big);
    memfit_plan_describe(&p, &c, line, sizeof line);
    assert_non_null(strstr(line, "(pipeline.topology = \"memory\", chosen)"));
    /* two ranks: indptr.bin and labels.bin each, indices.bin once (the node's shared segment) */
    g_ranks = 2;
    assert_int_equal(plan_ix(&p, &c, dflt, 3, 64 * GIB, big, &m, err, sizeof err), 0);
    g_ranks = 1;
    assert_int_equal(c.pipeline.topology, TOPOLOGY_MEMORY);
    assert_int_equal(p.topology, 2 * (ip + lb) + big);
    assert_int_equal(p.topology_shm, big);
    /* a 1 GiB limit: the neighbour cache, what the feature buffer (all of
     * its 4.9 MiB of rows) leaves of the room less a 32nd */
    assert_int_equal(plan_ix(&p, &c, dflt, 3, GIB, big, &m, err, sizeof err), 0);
    assert_int_equal(c.pipeline.topology, TOPOLOGY_CACHE);
    assert_true(p.neighbour_cache_sized);
    assert_false(config_given(&c, "pipeline.neighbour_cache_mb"));
    uint64_t room = GIB - p.arenas - p.margin, rd = (uint64_t)c.pipeline.samplers * SAMPLER_READ_BUFS;
    uint64_t want_mb = (room - g_fwant - room / MEMFIT_TOPO_SLACK_DIV - ip - lb - rd) / MIB;
    assert_true(want_mb * MIB > room / MEMFIT_TOPO_CACHE_DIV);
    assert_int_equal(c.pipeline.neighbour_cache_mb, (int64_t)want_mb);
    assert_int_equal(p.topology, ip + lb + rd + want_mb * MIB);
    assert_true(p.featbuf + p.staging + p.arenas + p.topology + p.margin <= GIB);
    memfit_plan_describe(&p, &c, line, sizeof line);
    char want[256];
    snprintf(want, sizeof want,
             "(pipeline.topology = \"cache\", chosen, pipeline.neighbour_cache_mb = %" PRIu64 ", sized to fit)",
             want_mb);
    if (!strstr(line, want))
        fail_msg("plan line lacks '%s': %s", want, line);
    /* memory while it leaves the feature buffer what it wants (all its rows:
     * less than a quarter of the room), cache once it does not */
    uint64_t fit = room - g_fwant - ip - lb - MIB;
    assert_int_equal(plan_ix(&p, &c, dflt, 3, GIB, fit, &m, err, sizeof err), 0);
    assert_int_equal(c.pipeline.topology, TOPOLOGY_MEMORY);
    assert_int_equal(p.topology, ip + lb + fit);
    assert_int_equal(plan_ix(&p, &c, dflt, 3, GIB, fit + 2 * MIB, &m, err, sizeof err), 0);
    assert_int_equal(c.pipeline.topology, TOPOLOGY_CACHE);
    /* a given budget with auto means cache with that budget */
    const char *mb[] = {ds, "model.fanouts=[4,4]", "train.batch_size=100", "pipeline.neighbour_cache_mb=100"};
    assert_int_equal(plan_ix(&p, &c, mb, 4, GIB, big, &m, err, sizeof err), 0);
    assert_int_equal(c.pipeline.topology, TOPOLOGY_CACHE);
    assert_false(p.neighbour_cache_sized);
    assert_int_equal(c.pipeline.neighbour_cache_mb, 100);
    assert_int_equal(p.topology, ip + lb + rd + 100 * MIB);
    /* mmap counts indptr alone: the mapped files are page cache */
    const char *mm[] = {ds, "model.fanouts=[4,4]", "train.batch_size=100", "pipeline.topology=\"mmap\""};
    assert_int_equal(plan_ix(&p, &c, mm, 4, GIB, big, &m, err, sizeof err), 0);
    assert_int_equal(c.pipeline.topology, TOPOLOGY_MMAP);
    assert_false(p.topology_auto);
    assert_int_equal(p.topology, ip);
    /* memory asked for explicitly under the same limit: refused, naming the topology */
    const char *mem[] = {ds, "model.fanouts=[4,4]", "train.batch_size=100", "pipeline.topology=\"memory\""};
    assert_int_equal(plan_ix(&p, &c, mem, 4, GIB, big, &m, err, sizeof err), -ENOMEM);
    assert_non_null(strstr(err, "topology 2.0 GiB"));
    /* a limit whose quarter, and what the feature buffer leaves, hold no
     * more than indptr and the read buffers: auto falls back to mmap, an
     * explicit cache is refused */
    uint64_t small = p.arenas + p.margin + ip + lb + rd + g_fwant + 2 * MIB;
    assert_int_equal(plan_ix(&p, &c, dflt, 3, small, big, &m, err, sizeof err), 0);
    assert_int_equal(c.pipeline.topology, TOPOLOGY_MMAP);
    assert_true(p.topology_auto);
    const char *cache[] = {ds, "model.fanouts=[4,4]", "train.batch_size=100", "pipeline.topology=\"cache\""};
    assert_int_equal(plan_ix(&p, &c, cache, 4, small, big, &m, err, sizeof err), -EINVAL);
    assert_non_null(strstr(err, "pipeline.topology = \"cache\": the memory plan leaves no neighbour cache"));
    assert_non_null(strstr(err, "give pipeline.neighbour_cache_mb"));
    /* features that do not fit the default feature buffer (8M rows of 256 B):
     * the quarter of the room, and the buffer sized to the rest */
    g_nodes = 8000000;
    assert_int_equal(plan_ix(&p, &c, dflt, 3, GIB, big, &m, err, sizeof err), 0);
    g_nodes = 0;
    assert_int_equal(c.pipeline.topology, TOPOLOGY_CACHE);
    assert_true(p.featbuf_sized);
    uint64_t room8 = GIB - p.arenas - p.margin;
    assert_int_equal(c.pipeline.neighbour_cache_mb, (int64_t)((room8 / MEMFIT_TOPO_CACHE_DIV - ip - rd) / MIB));
    assert_true(p.featbuf + p.staging + p.arenas + p.topology + p.margin <= GIB);
}

/* ---- through gnnlaunch -------------------------------------------------------------------- */

/* A fake v2 hierarchy with a limit of lim_mb MiB, as environment strings. */
static void fake_env(char env[2][1400], int lim_mb)
{
    char root[1300], d[1500], v[64];
    fake_root(root, sizeof root, "launchcg");
    put(root, "self", "0::/job\n");
    put(root, "cgroup.controllers", "memory\n");
    snprintf(d, sizeof d, "%s/job", root);
    snprintf(v, sizeof v, "%llu\n", (unsigned long long)lim_mb << 20);
    put(d, "memory.max", v);
    put(d, "memory.events", "oom_kill 0\n");
    snprintf(env[0], 1400, "SLUICE_CGROUP_ROOT=%s", root);
    snprintf(env[1], 1400, "SLUICE_PROC_SELF_CGROUP=%s/self", root);
}

static void test_launch_plan_and_refusal(void **state)
{
    (void)state;
    char env[2][1400], ck[1300], set[1400];
    fake_env(env, 4096);
    snprintf(ck, sizeof ck, "%s/ck", t_ldir);
    snprintf(set, sizeof set, "train.checkpoint_dir=\"%s\"", ck);
    struct t_proc r;
    const char *envp[] = {g_stages, env[0], env[1], NULL};
    const char *ok[] = {"--cpu", g_cfg, "--set", set, "--epochs", "1", NULL};
    t_launch_run(&r, envp, ok, 60);
    t_expect_code(&r, 0);
    t_expect_log(&r, "gnnlaunch: memory: limit 4.0 GiB (cgroup /job memory.max), plan: feature buffer ");
    t_expect_clean(&r);
    /* 5000 MiB asked for explicitly under a 4 GiB limit: exit 2 before anything */
    const char *big[] = {"--cpu", g_cfg, "--set", set, "--set", "pipeline.feature_buffer_mb=5000", NULL};
    fake_env(env, 16);
    t_launch_run(&r, envp, big, 60);
    t_expect_code(&r, 2);
    t_expect_log(&r, "pipeline.feature_buffer_mb = 5000");
    t_expect_log(&r, "more than the limit of 16.0 MiB (cgroup /job memory.max)");
    t_expect_clean(&r);
    t_rmrf(ck);
}

/* The OOM report from a real cgroup: a child of the launcher's own v1 or
 * v2 memory cgroup with a 200 MiB limit, gnnlaunch moved into it before
 * exec, and an extractor that allocates 400 MiB (SLUICE_FAULT_ALLOC_MB). */
static void test_oom_named(void **state)
{
    (void)state;
    struct cgroup_mem me;
    char err[512], dir[PATH_MAX + 64], file[PATH_MAX + 128];
    if (geteuid() != 0 || cgroup_mem_read(&me, err, sizeof err) != 0 || me.version == 0) {
        print_message("skipped: no writable memory cgroup here (not root, or no memory controller)\n");
        return;
    }
    snprintf(dir, sizeof dir, "%s/sluice-memfit-%d", me.dir, (int)getpid());
    if (mkdir(dir, 0755) != 0) {
        print_message("skipped: cannot make a cgroup under %s: %s\n", me.dir, strerror(errno));
        return;
    }
    snprintf(file, sizeof file, "%s/%s", dir, me.version == 2 ? "memory.max" : "memory.limit_in_bytes");
    FILE *f = fopen(file, "w");
    bool ok = f && fprintf(f, "%llu\n", 200ULL << 20) > 0;
    if (f)
        ok = fclose(f) == 0 && ok;
    if (!ok) {
        rmdir(dir);
        print_message("skipped: cannot set %s\n", file);
        return;
    }
    char ck[1300], set[1400], wrap[PATH_MAX + 256], cmd[PATH_MAX + 64];
    snprintf(ck, sizeof ck, "%s/ck-oom", t_ldir);
    snprintf(set, sizeof set, "train.checkpoint_dir=\"%s\"", ck);
    /* gnnlaunch is started through a shell that joins the cgroup first */
    snprintf(wrap, sizeof wrap, "%s/join.sh", t_ldir);
    f = fopen(wrap, "w");
    assert_non_null(f);
    fprintf(f, "#!/bin/sh\necho $$ > '%s/cgroup.procs' || exit 99\nexec '%s' \"$@\"\n", dir, t_launcher);
    fclose(f);
    chmod(wrap, 0755);
    snprintf(cmd, sizeof cmd, "%s", t_launcher);
    snprintf(t_launcher, sizeof t_launcher, "%s", wrap);
    /* the shell keeps the last of two SLUICE_STAGE_DIRs, the harness's
     * test stages: make that the real ones for this launch */
    char stages[sizeof t_stages];
    snprintf(stages, sizeof stages, "%s", t_stages);
    snprintf(t_stages, sizeof t_stages, "%s", g_stages + strlen("SLUICE_STAGE_DIR="));
    struct t_proc r;
    const char *envp[] = {g_stages, "SLUICE_FAULT_ALLOC_MB=extractor:400", NULL};
    const char *args[] = {"--cpu", g_cfg, "--set", set, "--epochs", "1", NULL};
    t_launch_run(&r, envp, args, 60);
    snprintf(t_launcher, sizeof t_launcher, "%s", cmd);
    snprintf(t_stages, sizeof t_stages, "%s", stages);
    rmdir(dir);
    t_expect_code(&r, 3);
    t_expect_log(&r, "gnn-extractor rank 0");
    t_expect_log(&r, "was killed by the out-of-memory killer");
    t_expect_log(&r, "against the limit of 200.0 MiB (cgroup ");
    t_expect_log(&r, "lower pipeline.feature_buffer_mb");
    t_expect_clean(&r);
    t_rmrf(ck);
}

static int group_setup(void **state)
{
    (void)state;
    if (t_launch_setup("memfit") != 0)
        return -1;
    t_real_stages(g_stages, sizeof g_stages);
    snprintf(g_ds, sizeof g_ds, "%s/ds", t_ldir);
    snprintf(g_cfg, sizeof g_cfg, "%s/run.toml", t_ldir);
    char prep[1200], log[4096];
    t_bin(prep, sizeof prep, "gnnprep");
    if (t_run(log, sizeof log,
              "%s synth %s --nodes 20000 --avg-degree 6 --feat-dim 64 --classes 4 --train-frac 0.05 "
              "--val-frac 0.02 --test-frac 0.02 --seed 3",
              prep, g_ds) != 0) {
        fprintf(stderr, "gnnprep synth failed: %s\n", log);
        return -1;
    }
    FILE *f = fopen(g_cfg, "w");
    if (!f)
        return -1;
    fprintf(f,
            "[dataset]\npath = \"%s\"\n\n[model]\nhidden = 16\nfanouts = [4, 4]\n\n[train]\nbatch_size = 100\n\n"
            "[pipeline]\nsamplers = 1\nextractors = 1\nfeature_buffer_mb = 8\n",
            g_ds);
    fclose(f);
    return 0;
}

int main(void)
{
    signal(SIGALRM, t_launch_alarm);
    t_case_alarm_s = CASE_ALARM_S;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cgroup_v1_nested),
        cmocka_unit_test(test_cgroup_v2_nested),
        cmocka_unit_test(test_cgroup_hybrid_and_none),
        cmocka_unit_test(test_config_given),
        cmocka_unit_test(test_plan),
        cmocka_unit_test(test_plan_packed),
        cmocka_unit_test(test_plan_topology),
        cmocka_unit_test_setup_teardown(test_launch_plan_and_refusal, t_launch_case_setup, t_launch_case_teardown),
        cmocka_unit_test_setup_teardown(test_oom_named, t_launch_case_setup, t_launch_case_teardown),
    };
    return cmocka_run_group_tests(tests, group_setup, t_launch_group_teardown);
}
