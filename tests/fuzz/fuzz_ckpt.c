/* fuzz_ckpt.c - libFuzzer target for the safetensors checkpoint reader
 * (ckpt_read in ops/ckpt.c). The input is the file. An accepted file must
 * be consistent: each entry's bytes = elements x dtype size, inside the
 * data buffer, the entries tile the buffer exactly, names unique, every
 * tensor byte readable. It is then written again with ckpt_write and read
 * back, which must give the same names, shapes, bytes and metadata (this
 * runs the writer on whatever names and metadata strings the fuzzer
 * finds). The rewrite goes to a private directory under /dev/shm (tmpfs:
 * fsync is free there), emptied after each input and removed at exit. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fuzz_input.h"
#include "ops/ckpt.h"

static char out_dir[128];
static char out_path[192];
static volatile uint8_t sink;

static void remove_out_dir(void)
{
    if (out_dir[0])
        rmdir(out_dir);
}

static void check_consistent(const struct ckpt *c)
{
    uint64_t covered = 0;
    for (uint32_t i = 0; i < ckpt_count(c); i++) {
        const struct ckpt_entry *e = ckpt_entry_at(c, i);
        unsigned __int128 bytes = ckpt_dtype_size(e->dtype);
        for (uint32_t d = 0; d < e->ndim; d++)
            bytes *= e->shape[d];
        if (e->ndim > CKPT_MAX_NDIM || e->begin > e->end || e->end > c->data_len || bytes != e->end - e->begin)
            abort();
        covered += e->end - e->begin;
        for (uint32_t j = 0; j < i; j++)
            if (strcmp(ckpt_name(c, j), e->name) == 0)
                abort();
        uint32_t nd;
        uint64_t sh[CKPT_MAX_NDIM];
        const uint8_t *p = ckpt_find(c, e->name, e->dtype, &nd, sh);
        if (p != c->data + e->begin || nd != e->ndim || (uintptr_t)p % ckpt_dtype_size(e->dtype))
            abort();
        uint8_t sum = 0;
        for (uint64_t k = 0; k < e->end - e->begin; k++)
            sum ^= p[k]; /* ASan checks every byte is mapped */
        sink ^= sum;
    }
    if (covered != c->data_len)
        abort();
    for (uint32_t i = 0; i < c->nmeta; i++)
        if (ckpt_meta(c, c->meta[2 * i]) != c->meta[2 * i + 1])
            abort(); /* keys are unique, so the first match is this one */
}

static void rewrite(const struct ckpt *c)
{
    if (!out_dir[0]) {
        snprintf(out_dir, sizeof out_dir, "/dev/shm/sluice-fuzz-ckpt-%ld", (long)getpid());
        if (mkdir(out_dir, 0700) < 0 && errno != EEXIST) {
            out_dir[0] = '\0';
            return;
        }
        atexit(remove_out_dir);
        snprintf(out_path, sizeof out_path, "%s/x.safetensors", out_dir);
    }
    uint32_t n = ckpt_count(c);
    struct ckpt_tensor *t = calloc(n ? n : 1, sizeof *t);
    const char **kv = calloc(c->nmeta ? 2 * c->nmeta : 1, sizeof *kv);
    if (!t || !kv)
        abort();
    for (uint32_t i = 0; i < n; i++) {
        const struct ckpt_entry *e = ckpt_entry_at(c, i);
        t[i].name = e->name;
        t[i].data = c->data + e->begin;
        t[i].dtype = e->dtype;
        t[i].ndim = e->ndim;
        memcpy(t[i].shape, e->shape, sizeof t[i].shape);
    }
    for (uint32_t i = 0; i < 2 * c->nmeta; i++)
        kv[i] = c->meta[i];
    char err[1024];
    if (ckpt_write(out_path, t, n, kv, c->nmeta, err, sizeof err) < 0) {
        fprintf(stderr, "rewrite failed: %s\n", err);
        abort();
    }
    struct ckpt r;
    if (ckpt_read(&r, out_path, err, sizeof err) < 0) {
        fprintf(stderr, "reading the rewrite failed: %s\n", err);
        abort();
    }
    if (ckpt_count(&r) != n || r.nmeta != c->nmeta)
        abort();
    for (uint32_t i = 0; i < n; i++) {
        const struct ckpt_entry *a = ckpt_entry_at(c, i), *b = ckpt_entry_at(&r, i);
        if (strcmp(a->name, b->name) || a->dtype != b->dtype || a->ndim != b->ndim ||
            memcmp(a->shape, b->shape, sizeof a->shape) || a->end - a->begin != b->end - b->begin ||
            memcmp(c->data + a->begin, r.data + b->begin, a->end - a->begin))
            abort();
    }
    for (uint32_t i = 0; i < c->nmeta; i++) {
        const char *v = ckpt_meta(&r, c->meta[2 * i]);
        if (!v || strcmp(v, c->meta[2 * i + 1]))
            abort();
    }
    ckpt_free(&r);
    unlink(out_path);
    free(t);
    free(kv);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char path[64], err[1024];
    int fd = fuzz_file(data, size, path, sizeof path);
    struct ckpt c;
    if (ckpt_read(&c, path, err, sizeof err) == 0) {
        check_consistent(&c);
        rewrite(&c);
    } else if (c.map || c.e || c.meta || c.n) {
        abort(); /* a failed read leaves the struct empty */
    }
    ckpt_free(&c);
    close(fd);
    return 0;
}
