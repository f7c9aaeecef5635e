/* fuzz_ogbcsv.c - libFuzzer target for OGB's CSV raw layout reader
 * (prep/ogbcsv.c): the first byte picks which of the five files the rest
 * of the input replaces (edge, node-feat, node-label, num-node-list,
 * num-edge-list); the other four hold a small valid graph (4 nodes, 3
 * edges, 2 features). Everything the reader hands out must hold what it
 * promises: labels >= -1, ids below N, finite features, and a clean end
 * only after exactly N labels, N rows and E edges. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fuzz_input.h"
#include "prep/importutil.h"
#include "prep/ogbcsv.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    static const char *const good[5] = {"0,1\n1,2\n3,3\n", "0.5,1\n-2,3e2\n0,0\n1.25,-0\n", "0\nnan\n2.0\n\n",
                                        "4\n", "3\n"};
    const int which = data[0] % 5;
    char path[5][64];
    int fd[5];
    for (int k = 0; k < 5; k++) {
        if (k == which)
            fd[k] = fuzz_file(data + 1, size - 1, path[k], sizeof path[k]);
        else
            fd[k] = fuzz_file((const uint8_t *)good[k], strlen(good[k]), path[k], sizeof path[k]);
    }
    struct imp_job j;
    imp_job_init(&j, "fuzz");
    j.edges.path = path[0];
    j.feat.path = path[1];
    j.labels.path = path[2];
    j.num_nodes.path = path[3];
    j.num_edges.path = path[4];
    char err[2048];
    struct imp_input *in = NULL;
    if (ogbcsv_open(&in, &j, err, sizeof err) == 0) {
        const uint64_t n = in->nodes, dim = in->dim;
        if (n == 0 || dim == 0 || dim > IMP_MAX_DIM)
            abort();
        int32_t lab[64];
        size_t got;
        uint64_t total = 0;
        while (in->ops->labels(in, lab, 64, &got, err, sizeof err) == 0) {
            if (got == 0) {
                if (total != n)
                    abort();
                break;
            }
            for (size_t i = 0; i < got; i++)
                if (lab[i] < -1)
                    abort();
            total += got;
        }
        uint64_t src[64], dst[64];
        while (in->ops->edges(in, src, dst, 64, &got, err, sizeof err) == 0 && got > 0)
            for (size_t i = 0; i < got; i++)
                if (src[i] >= n || dst[i] >= n)
                    abort();
        const size_t rows = dim > 4096 ? 1 : 16;
        float *x = malloc(rows * dim * sizeof *x);
        total = 0;
        while (x && in->ops->features(in, x, rows, &got, err, sizeof err) == 0) {
            if (got == 0) {
                if (total != n)
                    abort();
                break;
            }
            for (size_t i = 0; i < got * dim; i++)
                if (!isfinite(x[i]))
                    abort();
            total += got;
        }
        free(x);
        in->ops->close(in);
    }
    for (int k = 0; k < 5; k++)
        close(fd[k]);
    return 0;
}
