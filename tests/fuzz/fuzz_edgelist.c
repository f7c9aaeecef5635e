/* fuzz_edgelist.c - libFuzzer target for the edge-list readers
 * (prep/edgelist.c): the first byte picks the format (SNAP text, binary
 * u32/u64 pairs, .npy), the rest is the file. Every edge delivered must
 * have ids below the node count given to open. */
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

#include "fuzz_input.h"
#include "prep/edgelist.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    static const enum edge_fmt fmts[] = {EDGE_FMT_SNAP, EDGE_FMT_BIN32, EDGE_FMT_BIN64, EDGE_FMT_NPY};
    enum edge_fmt fmt = fmts[data[0] % 4];
    const uint64_t nodes = 1 + data[0] / 4 * 100; /* 1 .. 6301 */
    char err[1024], path[64];
    int fd = fuzz_file(data + 1, size - 1, path, sizeof path);
    struct edges *e = NULL;
    if (edges_open(&e, path, fmt, nodes, err, sizeof err) == 0) {
        uint64_t src[128], dst[128];
        size_t n;
        while (edges_read(e, src, dst, 128, &n, err, sizeof err) == 0 && n > 0)
            for (size_t i = 0; i < n; i++)
                if (src[i] >= nodes || dst[i] >= nodes)
                    abort();
    }
    edges_close(e);
    close(fd);
    return 0;
}
