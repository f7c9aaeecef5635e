/* jsonl.c - a JSON-lines output file (jsonl.h). */
#include "launcher/jsonl.h"

#include <errno.h>
#include <math.h>
#include <string.h>

#include "core/util.h"

void jsonl_open(struct jsonl *j, const char *path)
{
    j->f = NULL;
    j->failed = false;
    j->path = path;
    if (!path || !path[0])
        return;
    j->f = sl_fopen_write(path, 0644); /* no group/other write, whatever the umask */
    if (!j->f) {
        fprintf(stderr, "gnnlaunch: warning: cannot write --metrics %s: %s; continuing without it\n", path,
                strerror(errno));
        j->failed = true;
    }
}

void jsonl_num(FILE *f, const char *key, double v, bool comma)
{
    if (isfinite(v))
        fprintf(f, "\"%s\":%.6g%s", key, v, comma ? "," : "");
    else
        fprintf(f, "\"%s\":null%s", key, comma ? "," : "");
}

void jsonl_flush(struct jsonl *j)
{
    FILE *f = j->f;
    if (!f)
        return;
    errno = 0;
    if (fflush(f) == 0 && !ferror(f))
        return;
    int e = errno ? errno : EIO;
    fprintf(stderr, "gnnlaunch: warning: --metrics %s: write failed: %s; training goes on without it\n", j->path,
            strerror(e));
    fclose(f);
    j->f = NULL;
    j->failed = true;
}

void jsonl_close(struct jsonl *j)
{
    if (j->f) {
        jsonl_flush(j);
        if (j->f && fclose(j->f) != 0) {
            fprintf(stderr, "gnnlaunch: warning: --metrics %s: closing failed: %s\n", j->path, strerror(errno));
            j->failed = true;
        }
        j->f = NULL;
    }
    if (j->failed)
        fprintf(stderr, "gnnlaunch: warning: --metrics %s is incomplete: a write failed during the run (above)\n",
                j->path ? j->path : "");
}
