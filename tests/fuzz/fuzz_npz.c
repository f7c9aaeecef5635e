/* fuzz_npz.c - libFuzzer target for .npz members (prep/npz.c through
 * npy_open_npz) and npy edge lists inside them (prep/edgelist.c): a
 * damaged zip, a bad member or a bad npy header must be rejected cleanly. */
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

#include "fuzz_input.h"
#include "prep/edgelist.h"
#include "prep/npy.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[1024], path[64], buf[4096];
    int fd = fuzz_file(data, size, path, sizeof path);
    struct npy r;
    npy_init(&r);
    if (npy_open_npz(&r, path, "node_feat.npy", true, err, sizeof err) == 0) {
        uint64_t left = r.h.data_bytes;
        int rc = 0;
        while (left && rc == 0) {
            size_t k = left < sizeof buf ? (size_t)left : sizeof buf;
            rc = npy_read(&r, buf, k, err, sizeof err);
            left -= k;
        }
        if (rc == 0)
            (void)npy_end(&r, err, sizeof err);
    }
    npy_close(&r);

    struct edges *e = NULL;
    if (edges_open_npz(&e, path, "edge_index.npy", 1000, err, sizeof err) == 0) {
        uint64_t src[256], dst[256];
        size_t n;
        while (edges_read(e, src, dst, 256, &n, err, sizeof err) == 0 && n > 0)
            for (size_t i = 0; i < n; i++)
                if (src[i] >= 1000 || dst[i] >= 1000)
                    abort(); /* ids were range-checked */
    }
    edges_close(e);
    close(fd);
    return 0;
}
