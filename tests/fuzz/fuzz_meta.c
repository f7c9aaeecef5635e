/* fuzz_meta.c - libFuzzer target for the dataset.toml reader
 * (sl_meta_parse in core/dataset.c): sizes read from disk are never
 * trusted, so any accepted metadata must be internally consistent. */
#include <stdint.h>
#include <stdlib.h>

#include "core/dataset.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[1024];
    sl_dataset_meta m;
    if (sl_meta_parse((const char *)data, size, "dataset.toml", &m, err, sizeof err) == 0) {
        /* accepted: every shape and size must agree without overflow */
        if (m.nodes == 0 || m.f[SL_F_INDPTR].rows != m.nodes + 1 || m.f[SL_F_INDICES].rows != m.edges ||
            m.f[SL_F_FEATURES].rows != m.nodes || m.f[SL_F_LABELS].rows != m.nodes)
            abort();
        for (int i = 0; i < SL_F_COUNT; i++) {
            const sl_dsfile *f = &m.f[i];
            unsigned __int128 data_bytes = (unsigned __int128)f->rows * f->row_stride;
            if (!f->present || data_bytes > f->bytes || f->row_stride < f->cols * sl_dtype_size(f->dtype))
                abort();
        }
    }
    return 0;
}
