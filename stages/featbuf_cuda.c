/* featbuf_cuda.c - a GPU rank's feature rows exported by its trainer and
 * imported by its extractor with CUDA IPC (API and the life of the rows
 * in featbuf_cuda.h; the shared-memory protocol in featbuf_device.c).
 * Built only with CUDA.
 *
 * Which GPU. CUDA ordinals depend on each process's CUDA_VISIBLE_DEVICES,
 * so the exporter publishes its device's PCI bus id beside its ordinal and
 * the importer looks the bus id up (cudaDeviceGetByPCIBusId); only when
 * that fails does it trust the ordinal. A caller that names a device must
 * name that same GPU: copying into another GPU's memory over peer access
 * works, but is not what a rank's extractor should do by accident. */
#include "stages/featbuf_cuda.h"

#include <cuda_runtime_api.h>
#include <errno.h>
#include <inttypes.h>
#include <string.h>

#include "core/util.h"

_Static_assert(sizeof(cudaIpcMemHandle_t) == FEATBUF_IPC_HANDLE_BYTES,
               "the feature buffer's header keeps the CUDA IPC handle as 64 opaque bytes");

#define SLICE_MS 200

/* A CUDA error as -errno, with a message naming the call. */
static int cuda_fail(char *err, size_t errlen, cudaError_t e, const char *what)
{
    int rc = e == cudaErrorMemoryAllocation                                                              ? -ENOMEM
             : e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver || e == cudaErrorInvalidDevice ? -ENODEV
                                                                                                         : -EIO;
    return sl_errf(err, errlen, rc, "%s: %s (%s)", what, cudaGetErrorString(e), cudaGetErrorName(e));
}

/* Waits on one of the record's transitions in SLICE_MS slices, calling idle
 * between them; wait(fb, ms) is featbuf_device_wait_ready or _closed. */
static int wait_sliced(struct featbuf *fb, int (*wait)(struct featbuf *, int), int timeout_ms, int (*idle)(void *),
                       void *arg)
{
    uint64_t t0 = sl_now_ns();
    for (;;) {
        int slice = SLICE_MS;
        if (timeout_ms >= 0) {
            uint64_t spent = (sl_now_ns() - t0) / 1000000u;
            if (spent >= (uint64_t)timeout_ms)
                slice = 0;
            else
                slice = (int)SL_MIN((uint64_t)SLICE_MS, (uint64_t)timeout_ms - spent);
        }
        int rc = wait(fb, slice);
        if (rc != -ETIMEDOUT || slice < SLICE_MS)
            return rc;
        int irc = idle ? idle(arg) : 0;
        if (irc)
            return irc;
    }
}

int featbuf_cuda_export(struct featbuf_cuda *c, struct featbuf *fb, int device, char *err, size_t errlen)
{
    memset(c, 0, sizeof *c);
    c->fb = fb;
    uint64_t bytes;
    if (fb->rows || sl_mul_ovf(fb->nslots, fb->stride, &bytes) || bytes > SIZE_MAX)
        return sl_errf(err, errlen, -EINVAL,
                       "the feature buffer keeps its rows in host memory; a GPU rank needs one made with "
                       "rows_on_device (layout_featbuf_use_device)");
    cudaError_t e = cudaSetDevice(device);
    if (e != cudaSuccess)
        return cuda_fail(err, errlen, e, "cudaSetDevice");
    void *rows = NULL;
    e = cudaMalloc(&rows, (size_t)bytes);
    if (e != cudaSuccess) {
        char need[32];
        int rc = cuda_fail(err, errlen, e, "cudaMalloc");
        return sl_errf(err, errlen, rc,
                       "cannot allocate the feature rows (%u slots x %zu B = %s) on GPU %d: %s; lower "
                       "pipeline.feature_buffer_mb",
                       fb->nslots, fb->stride, sl_fmt_bytes(bytes, need, sizeof need), device, cudaGetErrorString(e));
    }
    cudaIpcMemHandle_t h;
    char bus[FEATBUF_DEV_BUS_ID_BYTES] = "";
    int rc;
    if ((e = cudaIpcGetMemHandle(&h, rows)) != cudaSuccess) {
        rc = cuda_fail(err, errlen, e, "cudaIpcGetMemHandle (exporting the feature rows to the extractor)");
        goto err;
    }
    if (cudaDeviceGetPCIBusId(bus, (int)sizeof bus, device) != cudaSuccess) {
        bus[0] = '\0';          /* importers fall back to the ordinal */
        (void)cudaGetLastError(); /* else the trainer's first checked kernel launch would report it */
    }
    rc = featbuf_device_publish(fb, &h, sizeof h, device, bus, bytes);
    if (rc) {
        sl_errf(err, errlen, rc, "publishing the feature rows' handle: %s",
                rc == -EALREADY ? "another trainer published one already" : strerror(-rc));
        goto err;
    }
    c->rows = rows;
    c->bytes = (size_t)bytes;
    c->device = device;
    c->exporter = true;
    fb->dev_rows = rows;
    fb->dev_ordinal = device;
    return 0;
err:
    cudaFree(rows);
    return rc;
}

static int wait_closed(struct featbuf *fb, int ms)
{
    return featbuf_device_wait_closed(fb, ms);
}

static int wait_ready(struct featbuf *fb, int ms)
{
    return featbuf_device_wait_ready(fb, ms);
}

int featbuf_cuda_unexport(struct featbuf_cuda *c, int timeout_ms, int (*idle)(void *arg), void *arg, char *err,
                          size_t errlen)
{
    if (!c->exporter || !c->rows)
        return 0;
    struct featbuf *fb = c->fb;
    featbuf_device_close(fb);
    int rc = wait_sliced(fb, wait_closed, timeout_ms, idle, arg);
    fb->dev_rows = NULL;
    if (rc) {
        uint32_t n = 0;
        featbuf_device_state(fb, &n);
        c->rows = NULL; /* left to process exit: an importer may still map it */
        return sl_errf(err, errlen, rc,
                       "%u extractor process%s still hold%s the feature rows open (%s); not freeing them, the "
                       "memory goes with this process",
                       n, n == 1 ? "" : "es", n == 1 ? "s" : "",
                       rc == -EPIPE       ? "the run is stopping"
                       : rc == -ETIMEDOUT ? "timed out"
                                          : strerror(-rc));
    }
    cudaSetDevice(c->device);
    cudaError_t e = cudaFree(c->rows);
    c->rows = NULL;
    if (e != cudaSuccess)
        return cuda_fail(err, errlen, e, "cudaFree (the feature rows)");
    return 0;
}

/* The device to open the handle on: see the top of the file. */
static int pick_device(const struct featbuf_device *d, int want, int *out, char *err, size_t errlen)
{
    int found = -1;
    if (d->pci_bus_id[0] && cudaDeviceGetByPCIBusId(&found, d->pci_bus_id) != cudaSuccess)
        found = -1;
    if (want >= 0) {
        if (found >= 0 && found != want)
            return sl_errf(err, errlen, -EINVAL,
                           "the trainer's feature rows are on GPU %s (device %d here), but this extractor was given "
                           "device %d; give a rank's stages the same GPU",
                           d->pci_bus_id, found, want);
        *out = want;
        return 0;
    }
    *out = found >= 0 ? found : d->device;
    return 0;
}

int featbuf_cuda_import(struct featbuf_cuda *c, struct featbuf *fb, int device, int timeout_ms, int (*idle)(void *arg),
                        void *arg, char *err, size_t errlen)
{
    memset(c, 0, sizeof *c);
    c->fb = fb;
    if (fb->rows)
        return sl_errf(err, errlen, -EINVAL, "the feature buffer keeps its rows in host memory: nothing to import");
    int rc = wait_sliced(fb, wait_ready, timeout_ms, idle, arg);
    if (rc == -ETIMEDOUT)
        return sl_errf(err, errlen, rc, "the trainer did not publish its feature rows within %d ms", timeout_ms);
    if (rc == -EPIPE)
        return sl_errf(err, errlen, rc, "the feature rows will not be published (the run is stopping)");
    if (rc)
        return sl_errf(err, errlen, rc, "stopped while waiting for the trainer's feature rows");
    struct featbuf_device d;
    if ((rc = featbuf_device_attach(fb, &d)) != 0)
        return sl_errf(err, errlen, rc, "cannot attach to the trainer's feature rows: %s",
                       rc == -EPIPE ? "the run is stopping" : strerror(-rc));
    c->counted = true;
    uint64_t need;
    int dev = -1;
    if (d.stride != fb->stride || sl_mul_ovf(fb->nslots, fb->stride, &need) || d.bytes < need) {
        rc = sl_errf(err, errlen, -EINVAL,
                     "the trainer's feature rows (%" PRIu64 " bytes, rows %" PRIu64 " apart) do not fit this buffer "
                     "(%u slots, rows %zu apart); restart the run",
                     d.bytes, d.stride, fb->nslots, fb->stride);
        goto err;
    }
    if ((rc = pick_device(&d, device, &dev, err, errlen)) != 0)
        goto err;
    cudaError_t e = cudaSetDevice(dev);
    if (e != cudaSuccess) {
        rc = cuda_fail(err, errlen, e, "cudaSetDevice");
        goto err;
    }
    cudaIpcMemHandle_t h;
    memcpy(&h, d.handle, sizeof h);
    void *rows = NULL;
    e = cudaIpcOpenMemHandle(&rows, h, cudaIpcMemLazyEnablePeerAccess);
    if (e != cudaSuccess) {
        rc = cuda_fail(err, errlen, e, "cudaIpcOpenMemHandle (opening the trainer's feature rows)");
        goto err;
    }
    c->rows = rows;
    c->bytes = (size_t)d.bytes;
    c->device = dev;
    fb->dev_rows = rows;
    fb->dev_ordinal = dev;
    return 0;
err:
    featbuf_cuda_unimport(c);
    return rc;
}

void featbuf_cuda_unimport(struct featbuf_cuda *c)
{
    if (!c || c->exporter)
        return;
    if (c->rows) {
        cudaSetDevice(c->device);
        cudaIpcCloseMemHandle(c->rows); /* closed first: then the exporter may free */
        if (c->fb->dev_rows == c->rows)
            c->fb->dev_rows = NULL;
        c->rows = NULL;
    }
    if (c->counted)
        featbuf_device_detach(c->fb);
    c->counted = false;
}
