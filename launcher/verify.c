/* verify.c - gnnlaunch's verification of the dataset's contents before
 * anything starts (docs/format.md, "Verification"; launch.h).
 *
 * A record of an earlier successful check whose file identities equal the
 * files' now (core/dataset_verify.h) makes it cost a few stat calls; else
 * every byte is read once and checked (core/dataset_check.h) before the
 * run may start. A first pass over more than DATASET_VERIFY_ANNOUNCE_BYTES
 * says beforehand how long it should take and shows its progress on
 * stderr: rewritten in place on a terminal, a line every 5 s otherwise.
 * --skip-verify reads nothing and says so. Either way the files' stamp at
 * launch is kept in l->data_stamp; the run directory gets a copy
 * (launch_write_stamp) that gnn-trainer compares against at every epoch
 * boundary and before every checkpoint. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "core/dataset_check.h"
#include "core/dataset_verify.h"
#include "core/util.h"
#include "launcher/launch.h"

struct verify_view {
    const char *dir;
    const struct dataset_meta *m;
    bool shown, tty;
    double t0, last;
};

static void on_begin(void *arg, uint64_t bytes, const char *why)
{
    struct verify_view *w = arg;
    w->t0 = w->last = sl_now();
    if (bytes < DATASET_VERIFY_ANNOUNCE_BYTES)
        return;
    w->shown = true;
    char b[32];
    fprintf(stderr,
            "gnnlaunch: verifying the dataset %s before the run: %s; reading its %s takes about %.0f s at %.1f GB/s "
            "(once: the result is recorded until a file changes; gnnlaunch --skip-verify skips it)\n",
            w->dir, why, sl_fmt_bytes(bytes, b, sizeof b), (double)bytes / DATASET_VERIFY_ASSUMED_BPS,
            DATASET_VERIFY_ASSUMED_BPS / 1e9);
}

static void on_progress(void *arg, int file, uint64_t done, uint64_t total)
{
    struct verify_view *w = arg;
    double now = sl_now();
    if (!w->shown || now - w->last < (w->tty ? 0.5 : 5.0))
        return;
    w->last = now;
    double rate = (double)done / SL_MAX(now - w->t0, 1e-3);
    char d[32], t[32];
    fprintf(stderr, "%sgnnlaunch: verifying %s: %s of %s, %.2f GB/s, %.0f s left%s", w->tty ? "\r\033[K" : "",
            w->m->f[file].file, sl_fmt_bytes(done, d, sizeof d), sl_fmt_bytes(total, t, sizeof t), rate / 1e9,
            (double)(total - SL_MIN(done, total)) / SL_MAX(rate, 1.0), w->tty ? "" : "\n");
}

int launch_verify_dataset(struct launch *l, const char *dir, const struct dataset_meta *m, bool skip, char *err,
                          size_t errlen)
{
    if (skip) {
        fprintf(stderr, "gnnlaunch: warning: --skip-verify: the contents of %s are not checked against dataset.toml "
                        "(only the files' sizes are); corrupted features or topology would train silently\n", dir);
        return dataset_verify_stamp_take(dir, m, &l->data_stamp, err, errlen);
    }
    struct verify_view w = {.dir = dir, .m = m, .tty = isatty(STDERR_FILENO) == 1};
    struct dataset_verify v = {.begin = on_begin, .progress = on_progress, .arg = &w};
    int rc = dataset_verify_run(&v, dir, m, err, errlen);
    if (w.shown && w.tty)
        fputs("\r\033[K", stderr);
    if (rc)
        return rc;
    l->data_stamp = v.stamp;
    if (v.checked) {
        char b[32];
        double s = sl_now() - w.t0;
        fprintf(stderr, "gnnlaunch: dataset %s verified: %s read in %.1f s (%.2f GB/s)%s%s\n", dir,
                sl_fmt_bytes(dataset_check_bytes(m), b, sizeof b), s,
                (double)dataset_check_bytes(m) / SL_MAX(s, 1e-6) / 1e9, v.recorded ? "; recorded in " : "",
                v.recorded ? v.record : "");
    }
    if (v.note[0])
        fprintf(stderr, "gnnlaunch: note: %s\n", v.note);
    return 0;
}

int launch_write_stamp(const struct launch *l, char *err, size_t errlen)
{
    char path[PATH_MAX];
    if (rundir_file(&l->dir, DATASET_VERIFY_RUN_STAMP, path, sizeof path) != 0)
        return sl_errf(err, errlen, -ENAMETOOLONG, "%s: path too long", l->dir.path);
    return dataset_verify_stamp_write(path, &l->data_stamp, 0600, err, errlen); /* the run directory is private */
}
