/* fuzz_npy.c - libFuzzer target for the .npy reader (prep/npy.c): the
 * header parser on raw bytes, then the whole file through npy_open and
 * npy_read to its end. Accepted headers must describe a consistent
 * array (item size times element count without overflow). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fuzz_input.h"
#include "prep/npy.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[1024];
    struct npy_hdr h;
    (void)npy_parse_header(data, size, &h, err, sizeof err);

    char path[64];
    int fd = fuzz_file(data, size, path, sizeof path);
    struct npy r;
    npy_init(&r);
    if (npy_open(&r, path, err, sizeof err) == 0) {
        char buf[4096];
        uint64_t total = r.h.data_bytes;
        if (total != (uint64_t)r.h.itemsize * r.h.count || total + r.h.header_bytes != size)
            abort(); /* open checked that the file is exactly header + data */
        while (total) {
            size_t k = total < sizeof buf ? (size_t)total : sizeof buf;
            if (npy_read(&r, buf, k, err, sizeof err) < 0)
                abort(); /* the size was checked on open: reads cannot fail */
            total -= k;
        }
        if (npy_end(&r, err, sizeof err) < 0)
            abort();
    }
    npy_close(&r);
    close(fd);
    return 0;
}
