/* featbuf_device.c - where a GPU rank's feature rows are (API in
 * featbuf.h): the device record in the feature buffer's header, through
 * which the rank's trainer (the exporter) hands its device rows to the
 * extractor processes (the importers) and takes them back. Only the
 * protocol is here, on opaque handle bytes; the CUDA calls around it are
 * in featbuf_cuda.c, so this file is built and tested without CUDA.
 *
 * Protocol
 * --------
 * The record (struct featbuf_dev, FEATBUF_DEV_OFFSET bytes into the
 * buffer) has one 32-bit word that is both the state and the futex word:
 *
 *     bits 31..28  state: NONE, (PUBLISHING), READY, CLOSING, CLOSED
 *     bit  24      broken (set by featbuf_mark_broken)
 *     bits 23..0   importers: processes that have the handle open
 *
 * Keeping the importer count in the state word makes "attach only while
 * READY" and "free only when CLOSING with no importer" single CAS
 * decisions: an importer cannot slip in between the exporter's check of
 * the count and its free.
 *
 *     NONE -> PUBLISHING -> READY     exporter, featbuf_device_publish: it
 *                                     owns the record's fields while
 *                                     PUBLISHING, writes them, then stores
 *                                     READY (seq_cst, so release)
 *     READY, n -> READY, n + 1        importer, featbuf_device_attach (CAS);
 *                                     then reads the fields (acquire) and
 *                                     opens the handle
 *     any, n -> any, n - 1            importer, featbuf_device_detach,
 *                                     after it closed the handle
 *     READY, n -> CLOSING, n          exporter, featbuf_device_close
 *     CLOSING, 0 -> CLOSED            exporter, featbuf_device_wait_closed:
 *                                     only now may it free the rows
 *
 * Closing order: importers close (cudaIpcCloseMemHandle) before they
 * detach, and the exporter frees only after it saw the count reach 0 in
 * CLOSING, when nobody can attach any more. So no process holds a mapping
 * of freed device memory.
 *
 * Waiting: a sleeper announces itself in `waiters` (seq_cst), re-reads the
 * word and sleeps on the value it read (FUTEX_WAIT, shared), like the slot
 * words of featbuf.c; every change of the word is followed by a wake when
 * `waiters` is non-zero. featbuf_mark_broken sets the broken bit in the
 * word, so a racing sleeper's FUTEX_WAIT returns at once.
 *
 * Dead peers: an importer that dies with the handle open is never counted
 * out. Its CUDA context dies with it (the driver drops its mapping), but
 * the exporter cannot tell a dead importer from a slow one, so it never
 * waits for ever: featbuf_device_wait_closed takes a timeout (the trainer
 * waits in slices, heartbeating), and when the supervisor sees the dead
 * process it tears the run down and marks the buffer broken, which ends
 * the wait with -EPIPE. The exporter then does not free: the allocation
 * goes with its process. An exporter that dies leaves READY (or CLOSING)
 * behind; importers see the buffer broken when the run is torn down. */
#include <errno.h>
#include <limits.h>
#include <string.h>
#include <unistd.h>

#include "core/util.h"
#include "ipc/futex.h"
#include "stages/featbuf_int.h"

static uint32_t state_of(uint32_t w)
{
    uint32_t st = w >> FB_DEV_STATE_SHIFT;
    return st == FB_DEV_PUBLISHING ? FEATBUF_DEV_NONE : st;
}

static uint32_t with_state(uint32_t w, uint32_t st)
{
    return (w & ((1u << FB_DEV_STATE_SHIFT) - 1)) | st << FB_DEV_STATE_SHIFT;
}

static bool dev_broken(const struct featbuf *fb, uint32_t w)
{
    return (w & FB_DEV_BROKEN) || atomic_load_explicit(&fb->hdr->broken, memory_order_acquire);
}

static void dev_wake(struct featbuf *fb)
{
    struct featbuf_dev *d = &fb->hdr->dev;
    if (atomic_load_explicit(&d->waiters, memory_order_seq_cst))
        futex_wake(&d->word, INT_MAX);
}

/* Sleeps while the word still reads w (announce, re-check, wait). 0 or
 * -ETIMEDOUT once the deadline (NULL: none) has passed. */
static int dev_sleep(struct featbuf *fb, uint32_t w, const struct timespec *deadline)
{
    struct featbuf_dev *d = &fb->hdr->dev;
    atomic_fetch_add_explicit(&d->waiters, 1, memory_order_seq_cst);
    int rc = 0;
    if (atomic_load_explicit(&d->word, memory_order_seq_cst) == w)
        rc = futex_wait_until(&d->word, w, deadline);
    atomic_fetch_sub_explicit(&d->waiters, 1, memory_order_relaxed);
    return rc == -ETIMEDOUT ? -ETIMEDOUT : 0;
}

/* Called by featbuf_mark_broken: the broken bit, then the sleepers. */
void fb_device_broken(struct featbuf *fb)
{
    atomic_fetch_or_explicit(&fb->hdr->dev.word, FB_DEV_BROKEN, memory_order_seq_cst);
    dev_wake(fb);
}

int featbuf_device_publish(struct featbuf *fb, const void *handle, size_t handle_len, int device,
                           const char *pci_bus_id, uint64_t bytes)
{
    struct featbuf_dev *d = &fb->hdr->dev;
    uint64_t need;
    if (fb->rows || !handle || handle_len != FEATBUF_IPC_HANDLE_BYTES || device < 0 ||
        sl_mul_ovf(fb->nslots, fb->stride, &need) || bytes < need ||
        (pci_bus_id && strlen(pci_bus_id) >= FEATBUF_DEV_BUS_ID_BYTES))
        return -EINVAL;
    uint32_t w = atomic_load_explicit(&d->word, memory_order_relaxed);
    for (;;) {
        if (dev_broken(fb, w))
            return -EPIPE;
        if (w >> FB_DEV_STATE_SHIFT != FEATBUF_DEV_NONE)
            return -EALREADY;
        if (atomic_compare_exchange_weak_explicit(&d->word, &w, with_state(w, FB_DEV_PUBLISHING), memory_order_acquire,
                                                  memory_order_relaxed))
            break;
    }
    /* the record's fields are ours until READY */
    memcpy(d->handle, handle, FEATBUF_IPC_HANDLE_BYTES);
    d->device = device;
    d->exporter_pid = (int32_t)getpid();
    d->bytes = bytes;
    d->stride = fb->stride;
    memset(d->pci_bus_id, 0, sizeof d->pci_bus_id);
    if (pci_bus_id)
        memcpy(d->pci_bus_id, pci_bus_id, strlen(pci_bus_id));
    /* nobody else changes a PUBLISHING word but mark_broken (its bit) */
    w = atomic_load_explicit(&d->word, memory_order_relaxed);
    while (!atomic_compare_exchange_weak_explicit(&d->word, &w, with_state(w, FEATBUF_DEV_READY), memory_order_seq_cst,
                                                  memory_order_relaxed))
        ;
    dev_wake(fb);
    return 0;
}

int featbuf_device_wait_ready(struct featbuf *fb, int timeout_ms)
{
    struct featbuf_dev *d = &fb->hdr->dev;
    struct timespec deadline;
    if (timeout_ms >= 0)
        futex_deadline(&deadline, timeout_ms);
    for (;;) {
        uint32_t w = atomic_load_explicit(&d->word, memory_order_seq_cst);
        if (dev_broken(fb, w))
            return -EPIPE;
        uint32_t st = state_of(w);
        if (st == FEATBUF_DEV_READY)
            return 0;
        if (st != FEATBUF_DEV_NONE)
            return -EPIPE;
        if (dev_sleep(fb, w, timeout_ms >= 0 ? &deadline : NULL) == -ETIMEDOUT &&
            state_of(atomic_load_explicit(&d->word, memory_order_seq_cst)) == FEATBUF_DEV_NONE)
            return -ETIMEDOUT;
    }
}

int featbuf_device_attach(struct featbuf *fb, struct featbuf_device *out)
{
    struct featbuf_dev *d = &fb->hdr->dev;
    uint32_t w = atomic_load_explicit(&d->word, memory_order_relaxed);
    for (;;) {
        if (dev_broken(fb, w))
            return -EPIPE;
        uint32_t st = state_of(w);
        if (st == FEATBUF_DEV_NONE)
            return -EAGAIN;
        if (st != FEATBUF_DEV_READY)
            return -EPIPE;
        if ((w & FB_DEV_COUNT_MASK) == FEATBUF_DEV_IMPORTERS_MAX)
            return -EOVERFLOW;
        if (atomic_compare_exchange_weak_explicit(&d->word, &w, w + 1, memory_order_seq_cst, memory_order_relaxed))
            break;
    }
    /* READY was stored after the fields, and they never change again */
    memcpy(out->handle, d->handle, FEATBUF_IPC_HANDLE_BYTES);
    out->device = d->device;
    memcpy(out->pci_bus_id, d->pci_bus_id, sizeof out->pci_bus_id);
    out->pci_bus_id[sizeof out->pci_bus_id - 1] = '\0';
    out->bytes = d->bytes;
    out->stride = d->stride;
    out->exporter_pid = d->exporter_pid;
    return 0;
}

int featbuf_device_detach(struct featbuf *fb)
{
    struct featbuf_dev *d = &fb->hdr->dev;
    uint32_t w = atomic_load_explicit(&d->word, memory_order_relaxed);
    do {
        if ((w & FB_DEV_COUNT_MASK) == 0)
            return -EINVAL;
    } while (!atomic_compare_exchange_weak_explicit(&d->word, &w, w - 1, memory_order_seq_cst, memory_order_relaxed));
    dev_wake(fb);
    return 0;
}

int featbuf_device_close(struct featbuf *fb)
{
    struct featbuf_dev *d = &fb->hdr->dev;
    uint32_t w = atomic_load_explicit(&d->word, memory_order_relaxed);
    for (;;) {
        uint32_t st = state_of(w);
        if (st == FEATBUF_DEV_CLOSING || st == FEATBUF_DEV_CLOSED)
            return 0;
        if (st != FEATBUF_DEV_READY)
            return -EINVAL;
        if (atomic_compare_exchange_weak_explicit(&d->word, &w, with_state(w, FEATBUF_DEV_CLOSING),
                                                  memory_order_seq_cst, memory_order_relaxed))
            break;
    }
    dev_wake(fb);
    return 0;
}

int featbuf_device_wait_closed(struct featbuf *fb, int timeout_ms)
{
    struct featbuf_dev *d = &fb->hdr->dev;
    struct timespec deadline;
    if (timeout_ms >= 0)
        futex_deadline(&deadline, timeout_ms);
    for (;;) {
        uint32_t w = atomic_load_explicit(&d->word, memory_order_seq_cst), st = state_of(w);
        if (st == FEATBUF_DEV_CLOSED)
            return 0;
        if (st != FEATBUF_DEV_CLOSING)
            return -EINVAL;
        if ((w & FB_DEV_COUNT_MASK) == 0) {
            /* nobody can attach in CLOSING, so 0 stays 0: free to free */
            if (atomic_compare_exchange_strong_explicit(&d->word, &w, with_state(w, FEATBUF_DEV_CLOSED),
                                                        memory_order_seq_cst, memory_order_relaxed))
                return 0;
            continue;
        }
        if (dev_broken(fb, w))
            return -EPIPE;
        if (dev_sleep(fb, w, timeout_ms >= 0 ? &deadline : NULL) == -ETIMEDOUT) {
            w = atomic_load_explicit(&d->word, memory_order_seq_cst);
            if (state_of(w) == FEATBUF_DEV_CLOSING && (w & FB_DEV_COUNT_MASK) && !dev_broken(fb, w))
                return -ETIMEDOUT;
        }
    }
}

int featbuf_device_state(const struct featbuf *fb, uint32_t *importers)
{
    uint32_t w = atomic_load_explicit(&fb->hdr->dev.word, memory_order_seq_cst);
    if (importers)
        *importers = w & FB_DEV_COUNT_MASK;
    return (int)state_of(w);
}
