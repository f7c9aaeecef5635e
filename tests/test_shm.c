/* test_shm.c - named segments: names and run ids, create/attach/detach/
 * unlink, huge-page-aligned mappings and shm_huge, header checks on
 * attach, read-only mappings, run-wide unlink,
 * the reclaim of segments whose creator is gone and namespaces. Every test works under run
 * ids private to this process and removes them in its teardown, so nothing
 * is left in /dev/shm even when an assertion fails. */
#include "t_util.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>

#include "core/util.h"
#include "ipc/shm.h"

/* Run ids this process uses: "<pid>-<time>-<rand>" plus a suffix. */
static char g_base[SHM_RUN_ID_MAX];
static char g_runs[8][SHM_RUN_ID_MAX];
static int g_nruns;

static const char *t_run_id(const char *suffix)
{
    assert_true(g_nruns < (int)SL_ARRAY_LEN(g_runs));
    snprintf(g_runs[g_nruns], sizeof g_runs[0], "%.30s%s", g_base, suffix);
    return g_runs[g_nruns++];
}

/* Files in /dev/shm that belong to run (counted by name). */
static int t_shm_count(const char *run)
{
    char prefix[SHM_NAME_MAX];
    char ns[SHM_PREFIX_MAX];
    shm_prefix(ns, NULL, 0); /* this test's namespace (tests/CMakeLists.txt) */
    snprintf(prefix, sizeof prefix, "%s%s.", ns, run);
    DIR *d = opendir(SHM_DIR);
    assert_non_null(d);
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL)
        if (strncmp(de->d_name, prefix, strlen(prefix)) == 0)
            n++;
    closedir(d);
    return n;
}

static bool t_shm_exists(const char *name)
{
    char path[256];
    snprintf(path, sizeof path, SHM_DIR "%s", name);
    return t_exists(path);
}

static int setup(void **state)
{
    g_nruns = 0;
    return 0;
}

/* Removes every run this test used, then checks that nothing is left. */
static int teardown(void **state)
{
    int left = 0;
    for (int i = 0; i < g_nruns; i++) {
        shm_run_unlink(g_runs[i]);
        left += t_shm_count(g_runs[i]);
    }
    g_nruns = 0;
    return left == 0 ? 0 : -1;
}

/* A pid that is certainly dead: a child that exited and was reaped. */
static pid_t t_dead_pid(void)
{
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0)
        _exit(0);
    int st;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    return pid;
}

/* ---- names ------------------------------------------------------------------------- */

static void test_run_ids(void **state)
{
    char a[SHM_RUN_ID_MAX], b[SHM_RUN_ID_MAX], small[8];
    assert_int_equal(shm_run_id_new(a, sizeof a), 0);
    assert_int_equal(shm_run_id_new(b, sizeof b), 0);
    assert_string_not_equal(a, b);
    assert_int_equal(shm_run_id_check(a, NULL, 0), 0);
    assert_int_equal(atol(a), (long)getpid()); /* starts with the creating pid */
    assert_int_equal(shm_run_id_new(small, sizeof small), -ENAMETOOLONG);

    char err[256];
    const char *bad[] = {"", "a.b", "a/b", "a b", "run\n", "x*"};
    for (size_t i = 0; i < SL_ARRAY_LEN(bad); i++) {
        err[0] = '\0';
        assert_int_equal(shm_run_id_check(bad[i], err, sizeof err), -EINVAL);
        assert_true(strlen(err) > 0);
    }
    char longid[SHM_RUN_ID_MAX + 1];
    memset(longid, 'a', SHM_RUN_ID_MAX);
    longid[SHM_RUN_ID_MAX] = '\0';
    assert_int_equal(shm_run_id_check(longid, err, sizeof err), -EINVAL);
    longid[SHM_RUN_ID_MAX - 1] = '\0'; /* exactly the limit minus the NUL */
    assert_int_equal(shm_run_id_check(longid, NULL, 0), 0);

    assert_int_equal(shm_object_check("ring.extract.r0", NULL, 0), 0);
    assert_int_equal(shm_object_check("a/b", err, sizeof err), -EINVAL);
    assert_int_equal(shm_object_check("", err, sizeof err), -EINVAL);

    char name[SHM_NAME_MAX], ns[SHM_PREFIX_MAX], want[SHM_NAME_MAX];
    assert_int_equal(shm_name(name, sizeof name, "r1", "obj.x", NULL, 0), 0);
    assert_int_equal(shm_prefix(ns, NULL, 0), 0); /* "sluice." or this test's namespace (tests/CMakeLists.txt) */
    snprintf(want, sizeof want, "/%sr1.obj.x", ns);
    assert_string_equal(name, want);
    assert_int_equal(shm_name(name, 10, "r1", "obj.x", err, sizeof err), -ENAMETOOLONG);
}

/* ---- create / attach ------------------------------------------------------------------ */

static void test_create_attach(void **state)
{
    const char *run = t_run_id("ca");
    char err[512];
    struct shm_seg a, b;
    assert_int_equal(shm_seg_create(&a, run, "data", SHM_KIND_RAW, 10000, err, sizeof err), 0);
    assert_int_equal((uintptr_t)a.data % 4096, 0);
    assert_int_equal(a.data_size, 10000);
    assert_true(a.size >= 10000 + SHM_DATA_OFFSET);
    assert_int_equal(a.hdr->creator_pid, getpid());
    assert_int_equal(a.hdr->kind, SHM_KIND_RAW);
    assert_string_equal(a.hdr->run_id, run);
    assert_string_equal(a.hdr->object, "data");
    assert_true(a.hdr->creator_start > 0);

    char path[256];
    snprintf(path, sizeof path, SHM_DIR "%s", a.name);
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0600);

    unsigned char *p = a.data;
    for (size_t i = 0; i < a.data_size; i++)
        p[i] = (unsigned char)(i * 7 + 3);
    assert_int_equal(shm_seg_attach(&b, a.name, SHM_KIND_RAW, 0, err, sizeof err), 0);
    assert_ptr_not_equal(b.data, a.data); /* a second mapping of the same memory */
    assert_int_equal(b.data_size, 10000);
    assert_memory_equal(b.data, a.data, 10000);
    ((unsigned char *)b.data)[5] = 0xAB;
    assert_int_equal(p[5], 0xAB);
    shm_seg_detach(&b);
    assert_int_equal(shm_seg_attach(&b, a.name, SHM_KIND_ANY, 0, err, sizeof err), 0);
    assert_int_equal(((unsigned char *)b.data)[5], 0xAB);
    shm_seg_detach(&b);

    char name[SHM_NAME_MAX];
    snprintf(name, sizeof name, "%s", a.name);
    shm_seg_detach(&a);
    assert_null(a.hdr);
    shm_seg_detach(&a); /* twice is fine */
    shm_seg_detach(NULL);
    assert_int_equal(shm_seg_unlink(name), 0);
    assert_false(t_shm_exists(name));
    assert_int_equal(shm_seg_unlink(name), -ENOENT);
    err[0] = '\0';
    assert_int_equal(shm_seg_attach(&b, name, SHM_KIND_RAW, 0, err, sizeof err), -ENOENT);
    assert_non_null(strstr(err, name));
    assert_null(b.hdr);
}

/* Segments of a huge page or more are mapped at huge-page-aligned
 * addresses in every process that maps them; shm_huge keeps every byte
 * (written ones and never-written zeros) in both mappings, reports what
 * it made huge, and does nothing on a range without a whole huge page. */
static void test_huge_pages(void **state)
{
    const char *run = t_run_id("hp");
    char err[512];
    struct shm_seg a, b;
    size_t len = 5 * SHM_HUGE_BYTES + 12345;
    assert_int_equal(shm_seg_create(&a, run, "rows", SHM_KIND_RAW, len, err, sizeof err), 0);
    assert_int_equal((uintptr_t)a.hdr % SHM_HUGE_BYTES, 0);
    assert_int_equal(shm_seg_attach(&b, a.name, SHM_KIND_RAW, 0, err, sizeof err), 0);
    assert_int_equal((uintptr_t)b.hdr % SHM_HUGE_BYTES, 0);
    unsigned char *p = a.data, *q = b.data;
    size_t half = len / 2; /* the first half written, the second never */
    for (size_t i = 0; i < half; i++)
        p[i] = (unsigned char)(i * 13 + 1);

    size_t got = 1;
    assert_int_equal(shm_huge(p + 1, SHM_HUGE_BYTES, &got), 0); /* no whole huge page inside */
    assert_int_equal(got, 0);
    int rc = shm_huge(p, len, &got);
    if (rc == 0) {
        /* the aligned part: the payload starts a page past an aligned header */
        assert_int_equal(got, 4 * SHM_HUGE_BYTES);
    } else {
        print_message("shm_huge: %s: this kernel keeps small pages here\n", strerror(-rc));
        assert_true(rc == -EINVAL || rc == -ENOMEM || rc == -EAGAIN || rc == -EBUSY || rc == -EPERM);
        assert_int_equal(got, 0);
    }
    for (size_t i = 0; i < len; i++) {
        unsigned char want = i < half ? (unsigned char)(i * 13 + 1) : 0;
        if (p[i] != want || q[i] != want)
            fail_msg("byte %zu: %u and %u after shm_huge, expected %u", i, p[i], q[i], want);
    }
    q[len - 1] = 0x5A; /* still one memory */
    assert_int_equal(p[len - 1], 0x5A);
    shm_seg_detach(&b);

    struct shm_seg c; /* a small segment maps as before */
    assert_int_equal(shm_seg_create(&c, run, "small", SHM_KIND_RAW, 100, err, sizeof err), 0);
    assert_int_equal((uintptr_t)c.data % 4096, 0);
    shm_seg_detach(&c);
    shm_seg_detach(&a);
}

static void test_create_exists_and_bad_args(void **state)
{
    const char *run = t_run_id("ex");
    char err[512];
    struct shm_seg a, b;
    assert_int_equal(shm_seg_create(&a, run, "x", SHM_KIND_RAW, 64, err, sizeof err), 0);
    ((char *)a.data)[0] = 'k';
    err[0] = '\0';
    assert_int_equal(shm_seg_create(&b, run, "x", SHM_KIND_RAW, 64, err, sizeof err), -EEXIST);
    assert_non_null(strstr(err, a.name));
    assert_null(b.hdr);
    assert_int_equal(((char *)a.data)[0], 'k'); /* the first one is untouched */
    assert_int_equal(a.hdr->creator_pid, getpid());

    assert_int_equal(shm_seg_create(&b, run, "y", SHM_KIND_ANY, 64, err, sizeof err), -EINVAL);
    assert_int_equal(shm_seg_create(&b, run, "y", (enum shm_kind)99, 64, err, sizeof err), -EINVAL);
    assert_int_equal(shm_seg_create(&b, run, "y", SHM_KIND_RAW, SIZE_MAX - 10, err, sizeof err), -EINVAL);
    assert_int_equal(shm_seg_create(&b, "bad.run", "y", SHM_KIND_RAW, 64, err, sizeof err), -EINVAL);
    assert_int_equal(shm_seg_create(&b, run, "bad/obj", SHM_KIND_RAW, 64, err, sizeof err), -EINVAL);
    /* ftruncate fails beyond what tmpfs/RLIMIT allow: nothing may be left */
    int rc = shm_seg_create(&b, run, "huge", SHM_KIND_RAW, (size_t)1 << 62, err, sizeof err);
    assert_true(rc < 0);
    assert_int_equal(t_shm_count(run), 1);
    shm_seg_detach(&a);
}

static void test_attach_header_checks(void **state)
{
    const char *run = t_run_id("hd");
    char err[512];
    struct shm_seg a, b;
    assert_int_equal(shm_seg_create(&a, run, "h", SHM_KIND_RING, 4096, err, sizeof err), 0);
    struct shm_header *h = a.hdr;

    /* wrong kind */
    err[0] = '\0';
    assert_int_equal(shm_seg_attach(&b, a.name, SHM_KIND_ARENA, 0, err, sizeof err), -EINVAL);
    assert_non_null(strstr(err, a.name));
    assert_non_null(strstr(err, "ring"));
    assert_int_equal(shm_seg_attach(&b, a.name, SHM_KIND_RING, 0, err, sizeof err), 0);
    shm_seg_detach(&b);

    /* wrong magic */
    atomic_store(&h->magic, 0x1234);
    err[0] = '\0';
    assert_int_equal(shm_seg_attach(&b, a.name, SHM_KIND_ANY, 0, err, sizeof err), -EINVAL);
    assert_non_null(strstr(err, a.name));
    assert_non_null(strstr(err, "not a Sluice segment"));
    assert_non_null(strstr(err, "remove"));
    /* magic not yet stored: still being created */
    atomic_store(&h->magic, 0);
    assert_int_equal(shm_seg_attach(&b, a.name, SHM_KIND_ANY, 0, err, sizeof err), -EAGAIN);
    atomic_store(&h->magic, SHM_MAGIC);

    /* wrong version */
    h->version = SHM_VERSION + 1;
    err[0] = '\0';
    assert_int_equal(shm_seg_attach(&b, a.name, SHM_KIND_ANY, 0, err, sizeof err), -EINVAL);
    assert_non_null(strstr(err, "version"));
    assert_non_null(strstr(err, a.name));
    h->version = SHM_VERSION;

    /* header naming another segment */
    h->object[0] = 'z';
    assert_int_equal(shm_seg_attach(&b, a.name, SHM_KIND_ANY, 0, err, sizeof err), -EINVAL);
    h->object[0] = 'h';

    /* size in the header does not match the file */
    h->total_size += 4096;
    err[0] = '\0';
    assert_int_equal(shm_seg_attach(&b, a.name, SHM_KIND_ANY, 0, err, sizeof err), -EINVAL);
    assert_non_null(strstr(err, a.name));
    h->total_size -= 4096;
    /* ... and the file resized behind the header's back */
    int fd = shm_open(a.name, O_RDWR, 0);
    assert_true(fd >= 0);
    assert_int_equal(ftruncate(fd, (off_t)a.size + 8192), 0);
    assert_int_equal(shm_seg_attach(&b, a.name, SHM_KIND_ANY, 0, err, sizeof err), -EINVAL);
    assert_int_equal(ftruncate(fd, (off_t)a.size), 0);
    assert_int_equal(shm_seg_attach(&b, a.name, SHM_KIND_ANY, 0, err, sizeof err), 0);
    shm_seg_detach(&b);
    /* a file shorter than a header */
    assert_int_equal(ftruncate(fd, 100), 0);
    assert_int_equal(shm_seg_attach(&b, a.name, SHM_KIND_ANY, 0, err, sizeof err), -EINVAL);
    assert_int_equal(ftruncate(fd, 0), 0);
    assert_int_equal(shm_seg_attach(&b, a.name, SHM_KIND_ANY, 0, err, sizeof err), -EAGAIN);
    close(fd);

    assert_int_equal(shm_seg_attach(&b, "no-slash", SHM_KIND_ANY, 0, err, sizeof err), -EINVAL);
    assert_int_equal(shm_seg_attach(&b, NULL, SHM_KIND_ANY, 0, err, sizeof err), -EINVAL);
    /* a's mapping now extends past the file: do not touch it, just drop it */
    shm_seg_detach(&a);
}

static void test_readonly_attach(void **state)
{
    const char *run = t_run_id("ro");
    char err[512];
    struct shm_seg a, r;
    assert_int_equal(shm_seg_create(&a, run, "m", SHM_KIND_METRICS, 128, err, sizeof err), 0);
    ((char *)a.data)[3] = 42;
    assert_int_equal(shm_seg_attach(&r, a.name, SHM_KIND_METRICS, SHM_RDONLY, err, sizeof err), 0);
    assert_true(r.readonly);
    assert_int_equal(((volatile char *)r.data)[3], 42);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        signal(SIGSEGV, SIG_DFL);         /* not cmocka's handler: it would resume the suite here */
        ((volatile char *)r.data)[3] = 1; /* must fault */
        _exit(0);
    }
    int st;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    /* killed by SIGSEGV (or, under ASan, reported and exited non-zero) */
    assert_false(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    assert_int_equal(((char *)a.data)[3], 42);
    shm_seg_detach(&r);
    shm_seg_detach(&a);
}

/* ---- run-wide unlink and reclaim ----------------------------------------------------- */

static void test_run_unlink(void **state)
{
    const char *run = t_run_id("ul");
    const char *other = t_run_id("ul2");
    char err[512];
    struct shm_seg s;
    const char *objs[] = {"a", "b.c", "d-e"};
    for (size_t i = 0; i < SL_ARRAY_LEN(objs); i++) {
        assert_int_equal(shm_seg_create(&s, run, objs[i], SHM_KIND_RAW, 16, err, sizeof err), 0);
        shm_seg_detach(&s);
    }
    assert_int_equal(shm_seg_create(&s, other, "a", SHM_KIND_RAW, 16, err, sizeof err), 0);
    shm_seg_detach(&s);
    assert_int_equal(t_shm_count(run), 3);
    assert_int_equal(shm_run_unlink(run), 3);
    assert_int_equal(t_shm_count(run), 0);
    assert_int_equal(t_shm_count(other), 1); /* another run (prefix of this one's name) stays */
    assert_int_equal(shm_run_unlink(run), 0);
    assert_int_equal(shm_run_unlink("bad.id"), -EINVAL);
}

struct reclaimed {
    int n;
    pid_t pid;
    char name[SHM_NAME_MAX];
};

static void on_reclaim(const char *name, pid_t pid, void *arg)
{
    struct reclaimed *r = arg;
    r->n++;
    r->pid = pid;
    snprintf(r->name, sizeof r->name, "%s", name);
}

static void test_reclaim_dead_creator(void **state)
{
    const char *run = t_run_id("rc");
    char err[512];
    struct shm_seg live;
    assert_int_equal(shm_seg_create(&live, run, "live", SHM_KIND_RAW, 16, err, sizeof err), 0);
    pid_t child = fork();
    assert_true(child >= 0);
    if (child == 0) {
        struct shm_seg s;
        _exit(shm_seg_create(&s, run, "dead", SHM_KIND_RAW, 16, NULL, 0) == 0 ? 0 : 1);
    }
    int st;
    assert_int_equal(waitpid(child, &st, 0), child);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    char dead[SHM_NAME_MAX];
    assert_int_equal(shm_name(dead, sizeof dead, run, "dead", NULL, 0), 0);
    assert_true(t_shm_exists(dead));

    struct reclaimed r = {0};
    assert_int_equal(shm_run_reclaim(run, on_reclaim, &r, err, sizeof err), 1);
    assert_int_equal(r.n, 1);
    assert_int_equal(r.pid, child);
    assert_string_equal(r.name, dead);
    assert_false(t_shm_exists(dead));
    assert_true(t_shm_exists(live.name)); /* its creator (this process) lives */
    /* a scan of all runs leaves this live run alone too */
    assert_true(shm_run_reclaim(NULL, NULL, NULL, err, sizeof err) >= 0);
    assert_true(t_shm_exists(live.name));
    shm_seg_detach(&live);
    assert_int_equal(shm_run_reclaim("bad.id", NULL, NULL, err, sizeof err), -EINVAL);
}

static void test_reclaim_pid_reuse(void **state)
{
    /* Creator pid alive but with another start time: the pid was reused. */
    const char *run = t_run_id("pr");
    char err[512];
    struct shm_seg s;
    assert_int_equal(shm_seg_create(&s, run, "x", SHM_KIND_RAW, 16, err, sizeof err), 0);
    assert_int_equal(shm_run_reclaim(run, NULL, NULL, err, sizeof err), 0);
    s.hdr->creator_start += 12345;
    assert_false(shm_pid_alive(getpid(), s.hdr->creator_start));
    assert_true(shm_pid_alive(getpid(), 0));
    assert_int_equal(shm_run_reclaim(run, NULL, NULL, err, sizeof err), 1);
    assert_false(t_shm_exists(s.name));
    shm_seg_detach(&s);
    assert_false(shm_pid_alive(t_dead_pid(), 0));
}

/* Files without a header (creator died before sizing them) are judged by
 * the pid that starts their run id; files that cannot be judged stay. */
static void test_reclaim_headerless(void **state)
{
    char dead_run[SHM_RUN_ID_MAX], live_run[SHM_RUN_ID_MAX];
    char odd_run[SHM_RUN_ID_MAX];
    char name_dead[SHM_NAME_MAX], name_live[SHM_NAME_MAX], name_odd[SHM_NAME_MAX];
    snprintf(dead_run, sizeof dead_run, "%ld-%.30s", (long)t_dead_pid(), g_base);
    snprintf(live_run, sizeof live_run, "%ld-%.30s", (long)getpid(), g_base);
    snprintf(odd_run, sizeof odd_run, "nopid_%.30s", g_base); /* no pid to judge by */
    /* register them for the teardown */
    snprintf(g_runs[g_nruns++], sizeof g_runs[0], "%s", dead_run);
    snprintf(g_runs[g_nruns++], sizeof g_runs[0], "%s", live_run);
    snprintf(g_runs[g_nruns++], sizeof g_runs[0], "%s", odd_run);
    assert_int_equal(shm_name(name_dead, sizeof name_dead, dead_run, "half", NULL, 0), 0);
    assert_int_equal(shm_name(name_live, sizeof name_live, live_run, "half", NULL, 0), 0);
    assert_int_equal(shm_name(name_odd, sizeof name_odd, odd_run, "half", NULL, 0), 0);
    const char *names[] = {name_dead, name_live, name_odd};
    for (size_t i = 0; i < SL_ARRAY_LEN(names); i++) {
        int fd = shm_open(names[i], O_RDWR | O_CREAT | O_EXCL, 0600);
        assert_true(fd >= 0);
        close(fd);
    }
    char err[512];
    struct shm_seg s;
    assert_int_equal(shm_seg_attach(&s, name_dead, SHM_KIND_ANY, 0, err, sizeof err), -EAGAIN);
    assert_int_equal(shm_run_reclaim(dead_run, NULL, NULL, err, sizeof err), 1);
    assert_int_equal(shm_run_reclaim(live_run, NULL, NULL, err, sizeof err), 0);
    assert_int_equal(shm_run_reclaim(odd_run, NULL, NULL, err, sizeof err), 0);
    assert_false(t_shm_exists(name_dead));
    assert_true(t_shm_exists(name_live));
    assert_true(t_shm_exists(name_odd));
}

/* A segment made in namespace ns (SLUICE_SHM_NAMESPACE) by a child that
 * then exits: a dead run's leftover there. Its full name into name. Never
 * in the default namespace: any launcher of the user may reclaim it there
 * before the test looks. */
static void dead_segment_in(const char *ns, const char *run, char *name, size_t len)
{
    assert_int_equal(setenv(SHM_NAMESPACE_ENV, ns, 1), 0);
    pid_t child = fork();
    assert_true(child >= 0);
    if (child == 0) {
        struct shm_seg s;
        _exit(shm_seg_create(&s, run, "left", SHM_KIND_RAW, 16, NULL, 0) == 0 ? 0 : 1);
    }
    int st;
    assert_int_equal(waitpid(child, &st, 0), child);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    assert_int_equal(shm_name(name, len, run, "left", NULL, 0), 0);
    assert_true(t_shm_exists(name));
}

/* Namespaces: a dead run's segments in one are invisible to the run-wide
 * operations of every other (the default one included), so a launcher in
 * one never reclaims what a test in another still looks at; a namespace
 * of other characters is refused by name. */
static char g_ns[2][32];  /* test_namespaces' own namespaces */
static char g_ns_was[64]; /* SLUICE_SHM_NAMESPACE before it ("" when unset) */

static void test_namespaces(void **state)
{
    const char *run = t_run_id("ns");
    char *ns_a = g_ns[0], *ns_b = g_ns[1];
    char in_a[SHM_NAME_MAX], in_b[SHM_NAME_MAX], in_default[SHM_NAME_MAX];
    char prefix[SHM_PREFIX_MAX], err[512];
    snprintf(ns_a, sizeof g_ns[0], "p%ld_a", (long)getpid());
    snprintf(ns_b, sizeof g_ns[1], "p%ld_b", (long)getpid());
    dead_segment_in(ns_a, run, in_a, sizeof in_a);
    dead_segment_in(ns_b, run, in_b, sizeof in_b);
    char want[SHM_NAME_MAX];
    snprintf(want, sizeof want, "/sluice-%s.%s.left", ns_a, run);
    assert_string_equal(in_a, want);

    /* the default namespace: the usual names; the others' dead runs are
     * not its to reclaim or unlink */
    assert_int_equal(unsetenv(SHM_NAMESPACE_ENV), 0);
    assert_int_equal(shm_prefix(prefix, err, sizeof err), 0);
    assert_string_equal(prefix, SHM_PREFIX);
    assert_int_equal(shm_name(in_default, sizeof in_default, run, "left", NULL, 0), 0);
    snprintf(want, sizeof want, "/" SHM_PREFIX "%s.left", run);
    assert_string_equal(in_default, want);
    assert_int_equal(shm_run_reclaim(run, NULL, NULL, err, sizeof err), 0);
    assert_int_equal(shm_run_unlink(run), 0);
    assert_true(t_shm_exists(in_a) && t_shm_exists(in_b));
    /* namespace b: a scan of every run takes b's, never a's */
    assert_int_equal(setenv(SHM_NAMESPACE_ENV, ns_b, 1), 0);
    assert_true(shm_run_reclaim(NULL, NULL, NULL, err, sizeof err) >= 1);
    assert_false(t_shm_exists(in_b));
    assert_true(t_shm_exists(in_a));
    assert_int_equal(shm_run_unlink(run), 0);
    assert_true(t_shm_exists(in_a));
    /* namespace a: its own */
    assert_int_equal(setenv(SHM_NAMESPACE_ENV, ns_a, 1), 0);
    assert_int_equal(shm_prefix(prefix, err, sizeof err), 0);
    snprintf(want, sizeof want, "sluice-%s.", ns_a);
    assert_string_equal(prefix, want);
    assert_int_equal(shm_run_reclaim(run, NULL, NULL, err, sizeof err), 1);
    assert_false(t_shm_exists(in_a));

    /* refused: a dot (it would end the prefix early), a slash, too long */
    char longer[SHM_NAMESPACE_MAX + 2];
    memset(longer, 'n', sizeof longer - 1);
    longer[sizeof longer - 1] = '\0';
    const char *bad[] = {"a.b", "a/b", "a-b", longer};
    for (size_t i = 0; i < SL_ARRAY_LEN(bad); i++) {
        assert_int_equal(setenv(SHM_NAMESPACE_ENV, bad[i], 1), 0);
        err[0] = '\0';
        assert_int_equal(shm_prefix(prefix, err, sizeof err), -EINVAL);
        assert_non_null(strstr(err, SHM_NAMESPACE_ENV));
        assert_string_equal(prefix, SHM_PREFIX);
        struct shm_seg s;
        err[0] = '\0';
        assert_int_equal(shm_seg_create(&s, run, "x", SHM_KIND_RAW, 16, err, sizeof err), -EINVAL);
        assert_non_null(strstr(err, SHM_NAMESPACE_ENV));
        err[0] = '\0';
        assert_int_equal(shm_run_reclaim(NULL, NULL, NULL, err, sizeof err), -EINVAL);
        assert_non_null(strstr(err, SHM_NAMESPACE_ENV));
        assert_int_equal(shm_run_unlink(run), -EINVAL);
    }
    longer[SHM_NAMESPACE_MAX] = '\0'; /* exactly the limit */
    assert_int_equal(setenv(SHM_NAMESPACE_ENV, longer, 1), 0);
    assert_int_equal(shm_prefix(prefix, NULL, 0), 0);
}

static int ns_setup(void **state)
{
    const char *was = getenv(SHM_NAMESPACE_ENV);
    snprintf(g_ns_was, sizeof g_ns_was, "%s", was ? was : "");
    memset(g_ns, 0, sizeof g_ns);
    return setup(state);
}

/* Removes the runs in test_namespaces' own namespaces too (an assertion
 * may have stopped it before it did), and restores the variable. */
static int ns_teardown(void **state)
{
    for (size_t j = 0; j < SL_ARRAY_LEN(g_ns); j++)
        if (g_ns[j][0] && setenv(SHM_NAMESPACE_ENV, g_ns[j], 1) == 0)
            for (int i = 0; i < g_nruns; i++)
                shm_run_unlink(g_runs[i]);
    if (g_ns_was[0])
        setenv(SHM_NAMESPACE_ENV, g_ns_was, 1);
    else
        unsetenv(SHM_NAMESPACE_ENV);
    return teardown(state);
}

static void test_pid_start_time(void **state)
{
    uint64_t a = 0, b = 0;
    assert_int_equal(shm_pid_start_time(getpid(), &a), 0);
    assert_int_equal(shm_pid_start_time(getpid(), &b), 0);
    assert_true(a > 0);
    assert_int_equal(a, b);
    assert_true(shm_pid_alive(getpid(), a));
    assert_int_equal(shm_pid_start_time(t_dead_pid(), &a), -ENOENT);
    assert_false(shm_pid_alive(0, 0));
    assert_false(shm_pid_alive(-1, 0));
    /* an exited child that is not reaped yet (a zombie) is not alive */
    pid_t z = fork();
    assert_true(z >= 0);
    if (z == 0)
        _exit(0);
    siginfo_t si;
    assert_int_equal(waitid(P_PID, (id_t)z, &si, WEXITED | WNOWAIT), 0); /* exited; still a zombie */
    assert_false(shm_pid_alive(z, 0));
    assert_int_equal(waitpid(z, NULL, 0), z);
}

int main(void)
{
    assert_int_equal(shm_run_id_new(g_base, sizeof g_base), 0);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_run_ids),
        cmocka_unit_test_setup_teardown(test_create_attach, setup, teardown),
        cmocka_unit_test_setup_teardown(test_huge_pages, setup, teardown),
        cmocka_unit_test_setup_teardown(test_create_exists_and_bad_args, setup, teardown),
        cmocka_unit_test_setup_teardown(test_attach_header_checks, setup, teardown),
        cmocka_unit_test_setup_teardown(test_readonly_attach, setup, teardown),
        cmocka_unit_test_setup_teardown(test_run_unlink, setup, teardown),
        cmocka_unit_test_setup_teardown(test_reclaim_dead_creator, setup, teardown),
        cmocka_unit_test_setup_teardown(test_reclaim_pid_reuse, setup, teardown),
        cmocka_unit_test_setup_teardown(test_reclaim_headerless, setup, teardown),
        cmocka_unit_test_setup_teardown(test_namespaces, ns_setup, ns_teardown),
        cmocka_unit_test(test_pid_start_time),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
