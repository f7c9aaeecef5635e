/* jsonl.h - a JSON-lines output file (gnnlaunch --metrics FILE;
 * docs/metrics.md), shared by the GNN runs' progress (progress.c) and the
 * link-prediction runs (link.c), so that both follow one set of rules:
 *
 *   - the file is created, or truncated, when the run starts (also on
 *     --resume), mode 0644 whatever the umask (sl_fopen_write); the
 *     launcher checked before the start that it can be written (exit 2);
 *   - one JSON object per line, flushed when the caller ends a record;
 *   - a number that does not exist (NaN, infinities) is written as null;
 *   - the first failure (open, write, flush, close) is a warning on
 *     stderr, the file is closed and the run goes on without it; `failed`
 *     stays set, jsonl_close says so again and the launcher turns it into
 *     exit 3 under --strict-outputs.
 *
 * The caller writes each object's text with fprintf on j->f while it is
 * open (j->f NULL: closed or never opened, write nothing). One thread. */
#ifndef SLUICE_LAUNCHER_JSONL_H
#define SLUICE_LAUNCHER_JSONL_H

#include <stdbool.h>
#include <stdio.h>

struct jsonl {
    FILE *f;          /* open: write records here; NULL otherwise */
    bool failed;      /* a write or the open failed (warned about once) */
    const char *path; /* for messages; outlives the struct */
};

/* Opens path (NULL or "": no file, nothing to do). A failure is a
 * warning: f stays NULL and failed is set. */
void jsonl_open(struct jsonl *j, const char *path);

/* `"key":<v>` with %.6g, or `"key":null` when v is not finite, then a
 * comma when comma is set. */
void jsonl_num(FILE *f, const char *key, double v, bool comma);

/* Ends a record: flushes; a failed flush warns once and closes the file. */
void jsonl_flush(struct jsonl *j);

/* Closes the file (flushing it) and, when a write failed at any time,
 * says that the file is incomplete. Accepts a closed j. */
void jsonl_close(struct jsonl *j);

#endif
