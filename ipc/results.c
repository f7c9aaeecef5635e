/* results.c - the results page (API and protocol in results.h). */
#include "ipc/results.h"

#include <errno.h>
#include <inttypes.h>
#include <string.h>

#include "core/util.h"

static size_t results_bytes(uint32_t ranks)
{
    return sizeof(struct results_hdr) + (size_t)ranks * RESULTS_WINDOW * sizeof(struct results_rec);
}

int results_create(struct results *r, const char *run_id, const char *object, uint32_t ranks, uint64_t epochs,
                   char *err, size_t errlen)
{
    memset(r, 0, sizeof *r);
    if (ranks == 0 || ranks > RESULTS_RANKS_MAX || epochs == 0)
        return sl_errf(err, errlen, -EINVAL, "results page: %" PRIu32 " ranks, %" PRIu64 " epochs", ranks, epochs);
    int rc = shm_seg_create(&r->seg, run_id, object, SHM_KIND_RESULTS, results_bytes(ranks), err, errlen);
    if (rc)
        return rc;
    memset(r->seg.data, 0, r->seg.data_size);
    struct results_hdr *h = r->seg.data;
    h->ranks = ranks;
    h->window = RESULTS_WINDOW;
    h->epochs = epochs;
    r->hdr = h;
    r->recs = (struct results_rec *)((char *)r->seg.data + sizeof(struct results_hdr));
    r->ranks = ranks;
    atomic_thread_fence(memory_order_release);
    r->hdr->magic = RESULTS_MAGIC;
    return 0;
}

int results_attach(struct results *r, const char *name, char *err, size_t errlen)
{
    memset(r, 0, sizeof *r);
    int rc = shm_seg_attach(&r->seg, name, SHM_KIND_RESULTS, 0, err, errlen);
    if (rc)
        return rc;
    /* Each header field is read once: what was checked is what is used. */
    const volatile struct results_hdr *h = r->seg.data;
    uint64_t magic = 0;
    uint32_t ranks = 0, window = 0;
    if (r->seg.data_size >= sizeof(struct results_hdr)) {
        magic = h->magic;
        atomic_thread_fence(memory_order_acquire);
        ranks = h->ranks;
        window = h->window;
    }
    if (magic != RESULTS_MAGIC || window != RESULTS_WINDOW || ranks == 0 || ranks > RESULTS_RANKS_MAX ||
        results_bytes(ranks) > r->seg.data_size) {
        shm_seg_detach(&r->seg);
        memset(r, 0, sizeof *r);
        return sl_errf(err, errlen, -EINVAL, "%s is not a results page of this build", name);
    }
    r->hdr = r->seg.data;
    r->recs = (struct results_rec *)((char *)r->seg.data + sizeof(struct results_hdr));
    r->ranks = ranks;
    return 0;
}

void results_free(struct results *r)
{
    if (!r)
        return;
    shm_seg_detach(&r->seg);
    memset(r, 0, sizeof *r);
}

static struct results_rec *rec_at(const struct results *r, uint32_t rank, uint64_t epoch)
{
    return &r->recs[(size_t)rank * RESULTS_WINDOW + epoch % RESULTS_WINDOW];
}

struct results_rec *results_slot(struct results *r, uint32_t rank, uint64_t epoch)
{
    if (rank >= r->ranks)
        return NULL;
    if (epoch >= RESULTS_WINDOW && atomic_load_explicit(&r->hdr->consumed, memory_order_acquire) <= epoch - RESULTS_WINDOW)
        return NULL;
    struct results_rec *rec = rec_at(r, rank, epoch);
    memset((char *)rec + sizeof rec->seq, 0, sizeof *rec - sizeof rec->seq); /* seq still names the old epoch */
    return rec;
}

void results_publish(struct results_rec *rec, uint64_t epoch)
{
    atomic_store_explicit(&rec->seq, epoch + 1, memory_order_release);
}

void results_rec_add(struct results_rec *sum, const struct results_rec *rec)
{
    sum->loss_sum += rec->loss_sum;
    sum->val_loss_sum += rec->val_loss_sum;
    sum->lr = rec->lr;
    sum->train_batches += rec->train_batches;
    sum->train_labelled += rec->train_labelled;
    sum->train_correct += rec->train_correct;
    sum->val_labelled += rec->val_labelled;
    sum->val_correct += rec->val_correct;
    sum->test_labelled += rec->test_labelled;
    sum->test_correct += rec->test_correct;
    sum->seconds = SL_MAX(sum->seconds, rec->seconds);
    sum->busy_s = SL_MAX(sum->busy_s, rec->busy_s);
    sum->reduce_s = SL_MAX(sum->reduce_s, rec->reduce_s);
    sum->train_s = SL_MAX(sum->train_s, rec->train_s);
    sum->eval_s = SL_MAX(sum->eval_s, rec->eval_s);
}

bool results_get(const struct results *r, uint32_t rank, uint64_t epoch, struct results_rec *out)
{
    if (rank >= r->ranks)
        return false;
    const struct results_rec *rec = rec_at(r, rank, epoch);
    if (atomic_load_explicit(&((struct results_rec *)rec)->seq, memory_order_acquire) != epoch + 1)
        return false;
    memcpy((char *)out + sizeof out->seq, (const char *)rec + sizeof rec->seq, sizeof *out - sizeof out->seq);
    atomic_store_explicit(&out->seq, epoch + 1, memory_order_relaxed);
    return true;
}

bool results_epoch(const struct results *r, uint64_t epoch, struct results_rec *sum)
{
    memset(sum, 0, sizeof *sum);
    for (uint32_t k = 0; k < r->ranks; k++) {
        struct results_rec rec;
        if (!results_get(r, k, epoch, &rec))
            return false;
        results_rec_add(sum, &rec);
    }
    atomic_store_explicit(&sum->seq, epoch + 1, memory_order_relaxed);
    return true;
}

void results_consume(struct results *r, uint64_t epoch)
{
    uint64_t c = atomic_load_explicit(&r->hdr->consumed, memory_order_relaxed);
    if (epoch + 1 > c)
        atomic_store_explicit(&r->hdr->consumed, epoch + 1, memory_order_release);
}
