/* pack_read_bench.c - a packed run's reads alone (issue 21; docs/packed.md):
 * every batch of a pack read as gnn-extractor's threads read them
 * (stages/pack_rows.h: the chunk's rows and tail, the batch's extents of
 * cache.bin), by --threads threads taking the batches in turn, with
 * nothing else running: no sampler, no feature buffer, no trainer. Each
 * round reads the whole pack once per mode, the modes taking turns:
 *   serial    the rows and tail in one read, then the extents (up to
 *             PACK_ROWS_DEPTH in flight): what a packed run does;
 *   overlap   the tail's blocks first, then the rows and the extents
 *             together (a packed run with SLUICE_PACK_OVERLAP=1).
 * Prints a key=value line per (round, mode): batches, reads and MiB (all,
 * and of them the cache extents, with the mean request of each kind), the
 * wall time, the time some thread was reading ("busy"), the rate over
 * each, and the time of the reads that had extents in flight summed over
 * the threads. Reports; asserts nothing. The pack's files are read
 * O_DIRECT unless --buffered: the page cache does not serve them.
 *
 *   pack-read-bench PACK [--threads T] [--rounds R] [--modes serial,overlap] [--buffered] */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/opt.h"
#include "core/util.h"
#include "stages/pack_rows.h"

#define THREADS_MAX 64

static void usage(FILE *f)
{
    fprintf(f, "usage: pack-read-bench PACK [--threads T] [--rounds R] [--modes serial,overlap] [--buffered]\n");
}

struct worker {
    struct pack_rows *pr;
    uint32_t index, threads;
    bool serial;
    struct pack_rows_buf b;
    int rc;
    char err[1024];
};

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    w->b.overlap = !w->serial;
    const struct pack *p = &w->pr->pack;
    for (uint64_t i = w->index; i < p->m.batches && w->rc == 0; i += w->threads)
        w->rc = pack_rows_read(w->pr, &w->b, &p->ent[i], w->err, sizeof w->err);
    return NULL;
}

static int modes_fn(const char *v, void *dst, char *err, size_t errlen)
{
    unsigned *m = dst;
    *m = 0;
    char buf[64];
    snprintf(buf, sizeof buf, "%s", v);
    for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        if (!strcmp(t, "serial"))
            *m |= 1u;
        else if (!strcmp(t, "overlap"))
            *m |= 2u;
        else
            return sl_errf(err, errlen, -EINVAL, "pack-read-bench: --modes %s: serial, overlap or both", v);
    }
    return *m ? 0 : sl_errf(err, errlen, -EINVAL, "pack-read-bench: --modes needs serial, overlap or both");
}

int main(int argc, char **argv)
{
    uint64_t threads = 2, rounds = 2;
    unsigned modes = 3;
    bool buffered = false, help = false;
    const struct opt opts[] = {
        {.name = "--threads", .kind = OPT_UINT, .dst = &threads, .lo = 1, .hi = THREADS_MAX},
        {.name = "--rounds", .kind = OPT_UINT, .dst = &rounds, .lo = 1, .hi = 100},
        {.name = "--modes", .kind = OPT_FN, .dst = &modes, .fn = modes_fn},
        {.name = "--buffered", .kind = OPT_FLAG, .dst = &buffered},
        {.name = "--help", .kind = OPT_FLAG, .dst = &help},
    };
    int first = argc > 1 && strncmp(argv[1], "--", 2) != 0 ? 2 : 1;
    char err[1024];
    if (opt_parse("pack-read-bench", opts, (int)(sizeof opts / sizeof opts[0]), argc, argv, first, NULL,
                  "; see --help", err, sizeof err) != 0) {
        fprintf(stderr, "%s\n", err);
        usage(stderr);
        return 2;
    }
    if (help) {
        usage(stdout);
        return 0;
    }
    if (first != 2) {
        usage(stderr);
        return 2;
    }
    struct pack_rows pr;
    if (pack_rows_open_reads(&pr, argv[1], buffered, err, sizeof err) != 0) {
        fprintf(stderr, "pack-read-bench: %s\n", err);
        return 2;
    }
    const struct pack_manifest *m = &pr.pack.m;
    printf("pack=%s batches=%" PRIu64 " row_bytes=%" PRIu64 " cache_rows=%" PRIu64 " direct=%d threads=%" PRIu64
           " depth=%u rows_max=%" PRIu64 " cache_max=%" PRIu64 " ext_max=%" PRIu32 " memory=%" PRIu64 "\n",
           argv[1], m->batches, m->row_bytes, m->cache_rows, pr.pack.direct, threads, PACK_ROWS_DEPTH, pr.rows_max,
           pr.cache_max, pr.ext_max, pack_rows_memory(&pr.pack, (uint32_t)threads));
    fflush(stdout);
    struct worker w[THREADS_MAX];
    pthread_t tid[THREADS_MAX];
    int rc = 0;
    for (uint64_t round = 1; round <= rounds && rc == 0; round++)
        for (unsigned mode = 1; mode <= 2 && rc == 0; mode++) {
            if (!(modes & mode))
                continue;
            uint64_t busy0 = pack_rows_busy(&pr), t0 = sl_now_ns();
            for (uint32_t t = 0; t < threads; t++) {
                w[t] = (struct worker){.pr = &pr, .index = t, .threads = (uint32_t)threads, .serial = mode == 1};
                if ((rc = pthread_create(&tid[t], NULL, worker_main, &w[t])) != 0) {
                    fprintf(stderr, "pack-read-bench: pthread_create: %s\n", strerror(rc));
                    return 1;
                }
            }
            uint64_t reads = 0, bytes = 0, creads = 0, cbytes = 0, cns = 0, rns = 0;
            for (uint32_t t = 0; t < threads; t++) {
                pthread_join(tid[t], NULL);
                if (w[t].rc && rc == 0) {
                    fprintf(stderr, "pack-read-bench: %s\n", w[t].err);
                    rc = w[t].rc;
                }
                reads += w[t].b.reads;
                bytes += w[t].b.bytes;
                creads += w[t].b.cache_reads;
                cbytes += w[t].b.cache_bytes;
                cns += w[t].b.cache_ns;
                rns += w[t].b.read_ns;
                pack_rows_buf_free(&w[t].b);
            }
            double wall = (double)(sl_now_ns() - t0) / 1e9, busy = (double)(pack_rows_busy(&pr) - busy0) / 1e9;
            double mib = (double)bytes / (1 << 20), cmib = (double)cbytes / (1 << 20);
            uint64_t oreads = reads - creads;
            printf("round=%" PRIu64 " mode=%s reads=%" PRIu64 " MiB=%.1f cache_reads=%" PRIu64
                   " cache_MiB=%.1f cache_req_KiB=%.1f other_req_KiB=%.1f wall_s=%.3f busy_s=%.3f MiB_per_s=%.0f "
                   "MiB_per_busy_s=%.0f read_s_threads=%.3f cache_phase_s_threads=%.3f\n",
                   round, mode == 1 ? "serial" : "overlap", reads, mib, creads, cmib,
                   creads ? (double)cbytes / 1024.0 / (double)creads : 0.0,
                   oreads ? (double)(bytes - cbytes) / 1024.0 / (double)oreads : 0.0, wall, busy,
                   wall > 0 ? mib / wall : 0.0, busy > 0 ? mib / busy : 0.0, (double)rns / 1e9, (double)cns / 1e9);
            fflush(stdout);
        }
    pack_rows_free(&pr);
    return rc ? 1 : 0;
}
