/* trace.c - gnnlaunch --trace FILE.json: after the run, merges the spans
 * every stage appended to <run-dir>/trace.<stage>.<rank> (struct
 * run_span) into one Chrome trace (the JSON "traceEvents" format that
 * Perfetto and chrome://tracing open): one track per stage process (named
 * "gnn-<stage> rank <r>") and thread (named "<stage> thread <k>", k in
 * order of first appearance), one complete event ("ph":"X") per
 * batch per stage, and one per phase a stage recorded (named after it:
 * "start-up", "topology", "warm start"; ipc/run.h RUN_SPAN_PHASE),
 * timestamps in microseconds since the run started.
 * Written to FILE.json.partial-<pid> and renamed, so FILE.json is whole or
 * absent. One event per line (tests read it line by line). */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "core/util.h"
#include "launcher/launch.h"

static const char *split_name(uint32_t s)
{
    static const char *const names[] = {"train", "val", "test"};
    return s < 3 ? names[s] : "?";
}

int trace_write(struct launch *l, char *err, size_t errlen)
{
    char tmp[PATH_MAX + 32];
    snprintf(tmp, sizeof tmp, "%s.partial-%d", l->trace_file, (int)getpid());
    FILE *out = sl_fopen_write(tmp, 0644); /* no group/other write, whatever the umask */
    if (!out)
        return sl_errf(err, errlen, -errno, "--trace %s: %s", tmp, strerror(errno));
    uint64_t base = (uint64_t)(l->t_start * 1e9);
    uint64_t events = 0;
    fputs("{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n", out);
    bool first = true;
    for (int i = 0; i < l->nchildren; i++) {
        const struct spawn_child *c = &l->children[i];
        char file[64], path[PATH_MAX + 80];
        run_trace_name(file, sizeof file, c->stage, c->rank);
        snprintf(path, sizeof path, "%s/%s", l->dir.path, file);
        fprintf(out, "%s{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,\"args\":{\"name\":\"%s rank %d\"}}",
                first ? "" : ",\n", (int)c->pid, run_stage_program(c->stage), c->rank);
        fprintf(out, ",\n{\"name\":\"process_sort_index\",\"ph\":\"M\",\"pid\":%d,\"args\":{\"sort_index\":%d}}",
                (int)c->pid, c->rank * RUN_STAGES + (int)c->stage);
        first = false;
        FILE *in = fopen(path, "re");
        if (!in)
            continue; /* a stage that recorded nothing (or could not) */
        struct run_span sp;
        uint32_t tids[64];
        int ntids = 0;
        while (fread(&sp, sizeof sp, 1, in) == 1) {
            /* name each thread's track the first time it shows up */
            int t = 0;
            while (t < ntids && tids[t] != sp.tid)
                t++;
            if (t == ntids && ntids < (int)SL_ARRAY_LEN(tids)) {
                tids[ntids++] = sp.tid;
                fprintf(out, ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":%" PRIu32
                        ",\"args\":{\"name\":\"%s thread %d\"}}",
                        (int)c->pid, sp.tid, run_stage_name(c->stage), t);
            }
            double ts = sp.t0_ns > base ? (double)(sp.t0_ns - base) / 1e3 : 0.0;
            double dur = sp.t1_ns > sp.t0_ns ? (double)(sp.t1_ns - sp.t0_ns) / 1e3 : 0.0;
            if (sp.split & RUN_SPAN_PHASE) {
                const char *ph = run_phase_name(sp.split & ~RUN_SPAN_PHASE);
                fprintf(out,
                        ",\n{\"name\":\"%s\",\"cat\":\"%s\",\"ph\":\"X\",\"ts\":%.3f,\"dur\":%.3f,\"pid\":%d,"
                        "\"tid\":%" PRIu32 ",\"args\":{\"phase\":\"%s\"}}",
                        ph, run_stage_name(c->stage), ts, dur, (int)c->pid, sp.tid, ph);
                events++;
                continue;
            }
            fprintf(out,
                    ",\n{\"name\":\"batch %" PRIu64 "\",\"cat\":\"%s\",\"ph\":\"X\",\"ts\":%.3f,\"dur\":%.3f,\"pid\":%d,"
                    "\"tid\":%" PRIu32 ",\"args\":{\"batch\":%" PRIu64 ",\"split\":\"%s\"}}",
                    sp.batch, run_stage_name(c->stage), ts, dur, (int)c->pid, sp.tid, sp.batch,
                    split_name(sp.split));
            events++;
        }
        fclose(in);
    }
    fputs("\n]}\n", out);
    if (fflush(out) != 0 || fsync(fileno(out)) != 0 || ferror(out)) {
        int e = errno;
        fclose(out);
        unlink(tmp);
        return sl_errf(err, errlen, -e, "--trace %s: %s", tmp, strerror(e));
    }
    fclose(out);
    if (rename(tmp, l->trace_file) != 0) {
        int e = errno;
        unlink(tmp);
        return sl_errf(err, errlen, -e, "--trace: renaming %s to %s: %s", tmp, l->trace_file, strerror(e));
    }
    fprintf(stderr, "gnnlaunch: trace of %" PRIu64 " spans written to %s (open it in https://ui.perfetto.dev)\n",
            events, l->trace_file);
    return 0;
}
