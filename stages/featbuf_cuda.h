/* featbuf_cuda.h - the CUDA side of a GPU rank's feature rows: the
 * trainer's device allocation exported with CUDA IPC, and the extractor's
 * mapping of it, around the protocol of featbuf_device.c (featbuf.h, "rows
 * on the device"). Implemented in featbuf_cuda.c, which is built only with
 * CUDA (SLUICE_HAVE_CUDA; stages/cuda.cmake); this header needs no CUDA
 * header, so code of every build may name the struct.
 *
 * Why here and not in gpu/: gpu/ is the layer below stages/ (kernels and
 * library wrappers) and knows no feature buffer; this file ties CUDA calls
 * to the buffer's shared header, like the row sinks beside it. The CUDA
 * runtime API is plain C, so it compiles with the C compiler.
 *
 * Life of the rows, one rank:
 *   trainer     featbuf_cuda_export: cudaMalloc(nslots x stride) on its
 *               device, cudaIpcGetMemHandle, publish (READY).
 *   extractor   featbuf_cuda_import (once per process, before its sinks):
 *               wait for READY, count itself in, cudaIpcOpenMemHandle on
 *               the exporter's device (found by PCI bus id); fb->dev_rows
 *               is then this process's pointer to row 0, and row_sink_pick
 *               gives the CUDA sink.
 *   extractor   featbuf_cuda_unimport at its end, after every sink on the
 *               rows is freed (no copy in flight): cudaIpcCloseMemHandle,
 *               then count itself out.
 *   trainer     featbuf_cuda_unexport: no new importers, wait (in slices,
 *               calling idle) until none is left, then cudaFree. If the run
 *               broke first (an importer died) or the wait ran out, the
 *               memory is not freed: it goes with the process.
 *
 * Errors: 0 or -errno with a message in err (may be NULL): -ENODEV (no
 * usable device or driver), -ENOMEM (cudaMalloc), -EPIPE (the run is
 * stopping), -ETIMEDOUT, -EINVAL (a buffer with rows in host memory, or a
 * record that does not match this buffer), -EIO (another CUDA error). */
#ifndef SLUICE_STAGES_FEATBUF_CUDA_H
#define SLUICE_STAGES_FEATBUF_CUDA_H

#include <stdbool.h>
#include <stddef.h>

#include "stages/featbuf.h"

/* One process's hold on the device rows. */
struct featbuf_cuda {
    struct featbuf *fb;
    void *rows;    /* device pointer to row 0: the allocation (exporter) or the mapping (importer) */
    size_t bytes;  /* of the allocation */
    int device;    /* the CUDA ordinal in this process */
    bool exporter; /* allocated here (else imported) */
    bool counted;  /* an importer counted in (featbuf_device_attach) */
};

/* Trainer: allocates fb's rows on `device` and publishes them. Sets
 * fb->dev_rows and fb->dev_ordinal. The rows' bytes are undefined until
 * loaded (a row is read only once its slot is VALID). */
int featbuf_cuda_export(struct featbuf_cuda *c, struct featbuf *fb, int device, char *err, size_t errlen);

/* Trainer: closes the rows to importers, waits for the last one to close
 * (timeout_ms in all, < 0: no limit; idle(arg), when not NULL, every
 * 200 ms: a nonzero return ends the wait with that error), then frees.
 * 0 (freed), or the wait's error (not freed). Clears fb->dev_rows. Accepts
 * a zeroed c. */
int featbuf_cuda_unexport(struct featbuf_cuda *c, int timeout_ms, int (*idle)(void *arg), void *arg, char *err,
                          size_t errlen);

/* Extractor: waits (timeout_ms, < 0: no limit; idle as above) until fb's
 * rows are published, counts itself in and opens them. device < 0: the
 * exporter's device (found by its PCI bus id, else its ordinal); >= 0: that
 * ordinal, which must be the same GPU. Sets fb->dev_rows, fb->dev_ordinal
 * and this thread's current device. */
int featbuf_cuda_import(struct featbuf_cuda *c, struct featbuf *fb, int device, int timeout_ms, int (*idle)(void *arg),
                        void *arg, char *err, size_t errlen);

/* Extractor: closes the mapping, then counts itself out (in that order:
 * the exporter frees only after the last importer counted out). Call after
 * every sink copying into the rows was freed. Accepts a zeroed c. */
void featbuf_cuda_unimport(struct featbuf_cuda *c);

#endif
