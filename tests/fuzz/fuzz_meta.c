/* fuzz_meta.c - libFuzzer target for the dataset.toml reader
 * (dataset_meta_parse in core/dataset.c): sizes read from disk are never
 * trusted, so any accepted metadata must be internally consistent, with
 * every size one a file can have. */
#include <stdint.h>
#include <stdlib.h>

#include "core/dataset.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[1024];
    struct dataset_meta m;
    if (dataset_meta_parse((const char *)data, size, "dataset.toml", &m, err, sizeof err) == 0) {
        /* accepted: every shape and size must agree without overflow */
        if (m.nodes == 0 || m.f[DATASET_INDPTR].rows != m.nodes + 1 || m.f[DATASET_INDICES].rows != m.edges ||
            m.f[DATASET_FEATURES].rows != m.nodes || m.f[DATASET_LABELS].rows != m.nodes || m.feat_dim == 0 ||
            m.feat_dim > INT32_MAX || m.classes == 0 || m.classes > INT32_MAX)
            abort();
        for (int i = 0; i < DATASET_FILES; i++) {
            const struct dataset_file *f = &m.f[i];
            unsigned __int128 data_bytes = (unsigned __int128)f->rows * f->row_stride;
            /* every file size is one a file can have (offsets into it fit off_t) */
            if (!f->present || data_bytes > f->bytes || f->bytes > INT64_MAX ||
                f->row_stride < f->cols * dtype_size(f->dtype))
                abort();
        }
    }
    return 0;
}
