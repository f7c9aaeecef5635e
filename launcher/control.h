/* control.h - the launcher's ZeroMQ endpoints, both ipc:// sockets inside
 * the private run directory (nothing listens on a network port):
 *
 *     ipc://RUNDIR/control   REP. A request is one frame of text:
 *                              "status" -> the run snapshot (JSON, below)
 *                              "stop"   -> {"ok":true,"state":"stopping"};
 *                                          the launcher then stops the run
 *                                          as on Ctrl-C and exits 130
 *                            anything else -> {"ok":false,"error":"..."}
 *     ipc://RUNDIR/metrics   PUB. The same snapshot, one frame, once a
 *                            second (subscribe to "" or to "{").
 *
 * Snapshot: {"run_id", "name", "pid", "state" ("running"|"stopping"),
 * "uptime_s", "ranks", "processes": [{"stage", "name", "rank", "pid",
 * "alive", "exit" (words or null), "exit_status", "exit_signal" (int or
 * null), "state" (metrics block: "starting"|"running"|"done"|"failed"),
 * "busy_ns", "wait_ns", "items", "bytes", "io_ops", "errors",
 * "heartbeat_age_s" (null before the block is claimed)}, ...],
 * "epoch": {"current" (the epoch under way at the slowest rank, 1-based;
 * total once all are done), "total" (train.epochs), "done" (epochs the
 * launcher has printed a line for, resumed ones included; it prints once a
 * second, so this may lag), "start" (epochs the resumed checkpoint held),
 * "published": [epochs each rank's trainer has finished, resumed ones
 * included]},
 * "rank_stats": [{"rank", "queues": {"extract", "train", "release": each
 * {"used", "capacity", "closed"}}, "featbuf": {"slots", "standby", "hits",
 * "waits", "loads", "evictions", "failed"} (stages/featbuf.h counters since
 * the start; null when the rank has none, or its lock stayed held for the
 * ~1 ms a snapshot waits, or it is broken)}, ...]}
 * Counters only grow; rates come from two snapshots (gnnstat uses the
 * difference of "uptime_s" as the interval).
 *
 * Setup failures are fatal (ZMQ_CHECK: prints the call, function, file,
 * line and zmq's error, then exit(2); gnnlaunch's exit handler removes what
 * the run had created). Errors while serving are reported and survived. */
#ifndef SLUICE_LAUNCHER_CONTROL_H
#define SLUICE_LAUNCHER_CONTROL_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>

struct launch; /* launch.h */

struct control {
    void *ctx;
    void *rep; /* control requests */
    void *pub; /* metrics publisher */
    char rep_endpoint[PATH_MAX + 8];
    char pub_endpoint[PATH_MAX + 8];
    bool send_failed_once; /* a publish error was reported already */
};

enum control_request { CONTROL_NONE = 0, CONTROL_STOP = 1 };

/* Creates the context and binds both sockets in run_dir. Exits on failure
 * (ZMQ_CHECK). */
void control_open(struct control *c, const char *run_dir);

/* Answers every request waiting on the REP socket without blocking.
 * Returns CONTROL_STOP if one of them asked to stop. */
enum control_request control_serve(struct control *c, const struct launch *l);

/* Publishes one snapshot on the PUB socket (never blocks). */
void control_publish(struct control *c, const struct launch *l);

/* Closes the sockets and the context. A reply still queued on the REP
 * socket (the answer to "stop", typically) gets up to 1 s to reach its
 * peer; the PUB socket drops what it holds. Accepts a zeroed or closed
 * control. */
void control_close(struct control *c);

/* The snapshot as a NUL-terminated malloc'd JSON string (NULL when out of
 * memory); *len receives its length. */
char *control_snapshot_json(const struct launch *l, size_t *len);

#endif
