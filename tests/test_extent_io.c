/* test_extent_io - stages/extent_io.h: an extent moved in large requests,
 * with an io_uring (several in flight) and without: the bytes arrive, a
 * write then read gives them back, and a file that ends inside the extent
 * fails with "the file ends early" - buffered and O_DIRECT, ending on a
 * block boundary or not - instead of hanging (a short read's rest was once
 * prepared but never sent when a later completion of the same batch
 * failed, and the drain waited on it for ever). An alarm turns a hang
 * into a failure. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "stages/extent_io.h"

#ifdef SLUICE_HAVE_URING
#include <liburing.h>
#endif

#define EXTENT 16384u
#define REQ 4096u

static char g_dir[512];

static void on_alarm(int sig)
{
    (void)sig;
    static const char msg[] = "test_extent_io: extent_io_move hung (alarm)\n";
    (void)!write(2, msg, sizeof msg - 1);
    _exit(1);
}

static int setup(void **state)
{
    (void)state;
    const char *tmp = getenv("SLUICE_TMP");
    snprintf(g_dir, sizeof g_dir, "%s/extent-io-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    assert_non_null(mkdtemp(g_dir));
    signal(SIGALRM, on_alarm);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    assert_int_equal(system(cmd), 0);
    return 0;
}

static unsigned char pattern(uint64_t i) { return (unsigned char)(i * 131 + 7); }

/* A file of `size` bytes of the pattern; returns its path. */
static const char *make_file(const char *name, size_t size)
{
    static char path[600];
    snprintf(path, sizeof path, "%s/%s", g_dir, name);
    int fd = open(path, O_CREAT | O_TRUNC | O_WRONLY, 0644);
    assert_true(fd >= 0);
    unsigned char *b = malloc(size + 1);
    assert_non_null(b);
    for (size_t i = 0; i < size; i++)
        b[i] = pattern(i);
    assert_int_equal(write(fd, b, size), (ssize_t)size);
    free(b);
    close(fd);
    return path;
}

/* Opens path for reading and writing, O_DIRECT when asked; false when the
 * file system refuses O_DIRECT (the case is skipped). */
static bool open_file(const char *path, bool direct, int *fd)
{
    *fd = open(path, O_RDWR | (direct ? O_DIRECT : 0));
    if (*fd < 0 && direct && errno == EINVAL)
        return false;
    assert_true(*fd >= 0);
    return true;
}

/* Moves [0, EXTENT) of the file with `ring` (NULL: pread/pwrite). */
static int move(int fd, const char *path, void *ring, bool direct, bool write, unsigned char *mem, char *err,
                size_t errlen)
{
    struct extent_io x = {.fd = fd, .path = path, .ring = ring, .req_bytes = REQ, .direct = direct, .depth = 4};
    uint64_t bytes = 0, reqs = 0;
    alarm(20);
    int rc = extent_io_move(&x, write, 3, mem, 0, EXTENT, &bytes, &reqs, err, errlen);
    alarm(0);
    return rc;
}

static void each_engine(void (*body)(void *ring, bool direct, const char *what))
{
    for (int direct = 0; direct < 2; direct++) {
        body(NULL, direct, direct ? "pread, direct" : "pread, buffered");
#ifdef SLUICE_HAVE_URING
        struct io_uring ring;
        if (io_uring_queue_init(8, &ring, 0) == 0) {
            body(&ring, direct, direct ? "io_uring, direct" : "io_uring, buffered");
            io_uring_queue_exit(&ring);
        } else {
            printf("# io_uring unavailable: the ring cases are skipped\n");
        }
#endif
    }
}

static void whole(void *ring, bool direct, const char *what)
{
    const char *p = make_file("whole.bin", EXTENT);
    int fd;
    if (!open_file(p, direct, &fd))
        return;
    unsigned char *mem = aligned_alloc(4096, EXTENT);
    assert_non_null(mem);
    char err[512] = "";
    if (move(fd, p, ring, direct, false, mem, err, sizeof err) != 0)
        fail_msg("%s: %s", what, err);
    for (uint64_t i = 0; i < EXTENT; i++)
        if (mem[i] != pattern(i))
            fail_msg("%s: byte %" PRIu64 " differs", what, i);
    /* written back changed, read again */
    for (uint64_t i = 0; i < EXTENT; i++)
        mem[i] = (unsigned char)~pattern(i);
    if (move(fd, p, ring, direct, true, mem, err, sizeof err) != 0)
        fail_msg("%s: write-back: %s", what, err);
    memset(mem, 0, EXTENT);
    if (move(fd, p, ring, direct, false, mem, err, sizeof err) != 0)
        fail_msg("%s: reading back: %s", what, err);
    for (uint64_t i = 0; i < EXTENT; i++)
        if (mem[i] != (unsigned char)~pattern(i))
            fail_msg("%s: byte %" PRIu64 " after the write-back differs", what, i);
    free(mem);
    close(fd);
}

static void test_whole(void **state)
{
    (void)state;
    each_engine(whole);
}

static void short_file(void *ring, bool direct, const char *what)
{
    /* ends mid-request on a block boundary (6144) and off one (6000) */
    const size_t sizes[] = {6144, 6000};
    for (size_t k = 0; k < 2; k++) {
        const char *p = make_file("short.bin", sizes[k]);
        int fd;
        if (!open_file(p, direct, &fd))
            return;
        unsigned char *mem = aligned_alloc(4096, EXTENT);
        assert_non_null(mem);
        char err[512] = "";
        int rc = move(fd, p, ring, direct, false, mem, err, sizeof err);
        if (rc != -EIO || !strstr(err, "the file ends early") || !strstr(err, "partition 3"))
            fail_msg("%s, a file of %zu bytes: rc %d, '%s'", what, sizes[k], rc, err);
        for (uint64_t i = 0; i < 4096; i++) /* the first request's rows did arrive */
            if (mem[i] != pattern(i))
                fail_msg("%s, a file of %zu bytes: byte %" PRIu64 " differs", what, sizes[k], i);
        free(mem);
        close(fd);
    }
}

static void test_short_file(void **state)
{
    (void)state;
    each_engine(short_file);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_whole),
        cmocka_unit_test(test_short_file),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
