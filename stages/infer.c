/* infer.c - exact layer-wise inference (infer.h). */
#include "stages/infer.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/util.h"
#include "ops/ops.h"

#define INFER_CHUNK 4096u

/* A dataset file or a layer table, mapped read-only. */
struct mapped {
    const unsigned char *p;
    size_t len;
};

static int map_file(struct mapped *f, const char *path, char *err, size_t errlen)
{
    f->p = NULL;
    f->len = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return sl_errf(err, errlen, -errno, "cannot open %s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        close(fd);
        return sl_errf(err, errlen, -errno, "%s: %s", path, strerror(errno));
    }
    f->len = (size_t)st.st_size;
    if (f->len) {
        void *p = mmap(NULL, f->len, PROT_READ, MAP_SHARED, fd, 0);
        if (p == MAP_FAILED) {
            close(fd);
            return sl_errf(err, errlen, -errno, "cannot map %s: %s", path, strerror(errno));
        }
        madvise(p, f->len, MADV_RANDOM); /* neighbours' rows: no read-ahead to waste the page cache on */
        f->p = p;
    }
    close(fd);
    return 0;
}

static void unmap(struct mapped *f)
{
    if (f->p)
        munmap((void *)f->p, f->len);
    f->p = NULL;
}

static uint64_t id_at(const struct mapped *f, enum dtype t, uint64_t i)
{
    return t == DTYPE_U64 ? ((const uint64_t *)f->p)[i] : ((const uint32_t *)f->p)[i];
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* Grows *p to n elements of size sz. */
static int grow(void **p, size_t *cap, size_t n, size_t sz)
{
    if (n <= *cap)
        return 0;
    size_t c = SL_MAX(n, *cap * 2);
    void *q = realloc(*p, c * sz);
    if (!q)
        return -ENOMEM;
    *p = q;
    *cap = c;
    return 0;
}

int infer_layerwise(const struct infer_params *p, struct predict_files *out, char *err, size_t errlen)
{
    const struct dataset_meta *m = p->m;
    const struct model_config *mc = p->mc;
    const struct dataset_file *fp = &m->f[DATASET_INDPTR], *fi = &m->f[DATASET_INDICES], *ff = &m->f[DATASET_FEATURES];
    uint64_t N = m->nodes, chunk = p->chunk ? p->chunk : INFER_CHUNK;
    bool mlp = mc->kind == MODEL_MLP;
    struct mapped indptr = {0}, indices = {0}, feat = {0}, table = {0};
    char path[4200], prev[4200] = "";
    int rc = 0, fd = -1;
    /* per chunk: the block and its rows */
    uint64_t *nbr = NULL, *src = NULL;
    uint32_t *bptr = NULL, *bsrc = NULL, *deg = NULL;
    float *x = NULL, *y = NULL;
    size_t nbr_cap = 0, src_cap = 0, bsrc_cap = 0, deg_cap = 0, x_cap = 0, y_cap = 0;
    if (!(bptr = malloc((chunk + 1) * sizeof *bptr)))
        return sl_errf(err, errlen, -ENOMEM, "out of memory for a chunk of %" PRIu64 " nodes", chunk);
    if ((rc = sl_path_join(path, sizeof path, p->dir, fp->file)) != 0 || (rc = map_file(&indptr, path, err, errlen)) ||
        (rc = sl_path_join(path, sizeof path, p->dir, fi->file)) != 0 || (rc = map_file(&indices, path, err, errlen)) ||
        (rc = sl_path_join(path, sizeof path, p->dir, ff->file)) != 0 || (rc = map_file(&feat, path, err, errlen)))
        goto out;
    for (uint32_t layer = 0; layer < mc->layers; layer++) {
        bool last = layer + 1 == mc->layers;
        uint32_t din = layer ? mc->hidden : mc->in_dim, dout = model_layer_width(mc, layer);
        /* this layer's input rows: the features, or the previous layer's table */
        const unsigned char *rows = layer ? table.p : feat.p;
        size_t stride = layer ? (size_t)din * sizeof(float) : (size_t)ff->row_stride;
        bool f16 = !layer && ff->dtype == DTYPE_F16;
        if (!last) {
            snprintf(path, sizeof path, "%s/layer-%u.f32", p->scratch, layer + 1);
            fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
            if (fd < 0) {
                rc = sl_errf(err, errlen, -errno, "cannot create %s: %s", path, strerror(errno));
                goto out;
            }
        }
        for (uint64_t v0 = 0; v0 < N; v0 += chunk) {
            uint64_t v1 = SL_MIN(N, v0 + chunk);
            uint32_t nd = (uint32_t)(v1 - v0);
            /* the distinct in-neighbours outside the chunk, in id order */
            uint64_t e0 = id_at(&indptr, fp->dtype, v0), e1 = id_at(&indptr, fp->dtype, v1), ne = mlp ? 0 : e1 - e0;
            size_t nn = 0;
            if (ne && (rc = grow((void **)&nbr, &nbr_cap, ne, sizeof *nbr)) != 0)
                goto nomem;
            for (uint64_t e = 0; e < ne; e++) {
                uint64_t u = id_at(&indices, fi->dtype, e0 + e);
                if (u < v0 || u >= v1)
                    nbr[nn++] = u;
            }
            qsort(nbr, nn, sizeof *nbr, cmp_u64);
            size_t nu = 0;
            for (size_t k = 0; k < nn; k++)
                if (!nu || nbr[nu - 1] != nbr[k])
                    nbr[nu++] = nbr[k];
            uint32_t ns = nd + (uint32_t)nu;
            if ((rc = grow((void **)&src, &src_cap, ns, sizeof *src)) != 0 ||
                (rc = grow((void **)&bsrc, &bsrc_cap, SL_MAX(ne, 1), sizeof *bsrc)) != 0 ||
                (rc = grow((void **)&x, &x_cap, (size_t)ns * din, sizeof *x)) != 0 ||
                (rc = grow((void **)&y, &y_cap, (size_t)nd * dout, sizeof *y)) != 0)
                goto nomem;
            for (uint32_t k = 0; k < nd; k++)
                src[k] = v0 + k;
            memcpy(src + nd, nbr, nu * sizeof *nbr);
            /* the block: each destination's list, sources as local ids */
            bptr[0] = 0;
            for (uint32_t k = 0; k < nd; k++) {
                uint64_t a = id_at(&indptr, fp->dtype, v0 + k), b = id_at(&indptr, fp->dtype, v0 + k + 1);
                uint32_t at = bptr[k];
                for (uint64_t e = a; !mlp && e < b; e++) {
                    uint64_t u = id_at(&indices, fi->dtype, e);
                    if (u >= v0 && u < v1) {
                        bsrc[at++] = (uint32_t)(u - v0);
                    } else {
                        uint64_t *hit = bsearch(&u, nbr, nu, sizeof *nbr, cmp_u64);
                        bsrc[at++] = nd + (uint32_t)(hit - nbr);
                    }
                }
                bptr[k + 1] = at;
            }
            if (p->graph_degrees) {
                if ((rc = grow((void **)&deg, &deg_cap, ns, sizeof *deg)) != 0)
                    goto nomem;
                for (uint32_t k = 0; k < ns; k++)
                    deg[k] = (uint32_t)(id_at(&indptr, fp->dtype, src[k] + 1) - id_at(&indptr, fp->dtype, src[k]));
            }
            /* its input rows */
            for (uint32_t k = 0; k < ns; k++) {
                const unsigned char *r = rows + src[k] * stride;
                float *dst = x + (size_t)k * din;
                if (f16)
                    for (uint32_t c = 0; c < din; c++) {
                        uint16_t h;
                        memcpy(&h, r + 2 * c, 2);
                        dst[c] = half_to_f32(h);
                    }
                else
                    memcpy(dst, r, (size_t)din * sizeof(float));
            }
            struct ops_block blk = {.n_dst = nd, .n_src = mlp ? nd : ns, .indptr = bptr, .src = bsrc,
                                    .deg = p->graph_degrees ? deg : NULL};
            if ((rc = model_forward_layer(p->model, layer, &blk, x, y, err, errlen)) != 0)
                goto out;
            if (!last) {
                if ((rc = sl_pwrite_all(fd, y, (size_t)nd * dout * sizeof(float),
                                        (off_t)(v0 * dout * sizeof(float)))) != 0) {
                    rc = sl_errf(err, errlen, rc, "writing %s: %s", path, strerror(-rc));
                    goto out;
                }
            } else {
                for (uint32_t k = 0; k < nd; k++) {
                    int64_t row = predict_row(out, v0 + k);
                    if (row >= 0) /* the embedding is the last layer's input row */
                        predict_put(out, (uint64_t)row, y + (size_t)k * dout, x + (size_t)k * din);
                }
            }
            if (p->progress)
                p->progress(p->arg, layer, v1, N);
        }
        if (!last) {
            if (fsync(fd) != 0 || close(fd) != 0) {
                fd = -1;
                rc = sl_errf(err, errlen, -EIO, "writing %s", path);
                goto out;
            }
            fd = -1;
            /* the new table replaces the old one as the next input */
            unmap(&table);
            if (prev[0])
                unlink(prev);
            snprintf(prev, sizeof prev, "%s", path);
            if ((rc = map_file(&table, path, err, errlen)) != 0)
                goto out;
        }
    }
    goto out;
nomem:
    rc = sl_errf(err, errlen, -ENOMEM, "out of memory for a chunk of %" PRIu64 " nodes and its neighbours", chunk);
out:
    if (fd >= 0) {
        close(fd);
        unlink(path);
    }
    unmap(&table);
    if (prev[0])
        unlink(prev);
    unmap(&indptr);
    unmap(&indices);
    unmap(&feat);
    free(nbr), free(src), free(bptr), free(bsrc), free(deg), free(x), free(y);
    return rc;
}
