/* spawn.h - starting, signalling and describing the stage processes of a
 * run (the supervision loop that uses these is in supervise.c).
 *
 * A stage is started with fork + exec. Between the two, in the child, only
 * async-signal-safe calls run (libzmq's threads exist in the parent): the
 * child asks to be SIGKILLed when the launcher dies (PR_SET_PDEATHSIG) and
 * exits at once if the launcher already died before that call took effect
 * (getppid changed); it moves into its own process group so a terminal's
 * Ctrl-C reaches only the launcher, which then stops the run cleanly; it
 * unblocks every signal (the launcher blocks the ones it reads through a
 * signalfd), reads stdin from /dev/null and keeps stdout/stderr. An exec
 * failure travels back through a close-on-exec pipe, so spawn_start()
 * returns only once the stage program is running or has failed to start. */
#ifndef SLUICE_LAUNCHER_SPAWN_H
#define SLUICE_LAUNCHER_SPAWN_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "launcher/layout.h"

/* One stage process, as the launcher tracks it. */
struct spawn_child {
    enum run_stage stage;
    int rank;
    pid_t pid;       /* 0 until started */
    bool running;    /* started and not yet reaped */
    int status;      /* wait status, once reaped */
    bool term_sent;  /* SIGTERM sent by the launcher */
    bool kill_sent;  /* SIGKILL sent by the launcher */
    double ended_at; /* sl_now() when reaped */
    bool noted;      /* the supervisor has handled its end */
};

/* Where the stage programs are: $SLUICE_STAGE_DIR when set and non-empty,
 * else the directory of this executable (/proc/self/exe). */
int spawn_stage_dir(char *out, size_t len, char *err, size_t errlen);

/* Checks that dir holds the four stage programs, executable: 0 or -ENOENT
 * with a message naming the first one missing. */
int spawn_check_programs(const char *dir, char *err, size_t errlen);

/* Starts path with argv (argv[0] is what ps shows) and envp (NULL: this
 * process's environment). Blocks until the exec happened. 0 (c->pid set,
 * c->running true), or -errno with a message when fork or exec failed (the
 * failed child is reaped). devnull: an open fd of /dev/null for stdin, or
 * -1 to inherit stdin. */
int spawn_start(struct spawn_child *c, const char *path, char *const argv[], char *const envp[], int devnull,
                char *err, size_t errlen);

/* Sends sig to a running child (no-op when it is not running). */
void spawn_signal(struct spawn_child *c, int sig);

/* Reaps every child that has ended, without blocking; *reaped (may be
 * NULL) receives how many. Returns the index of the first child reaped by
 * this call, or -1. Children not in cs are reaped and ignored. */
int spawn_reap(struct spawn_child *cs, int n, int *reaped);

/* Waits for one child to end (blocking) and records how; no-op when it is
 * not running. */
void spawn_wait(struct spawn_child *c);

/* How a process ended, as words: "exited with status 3", "was killed by
 * signal 9 (SIGKILL)". */
void spawn_describe_status(int status, char *buf, size_t len);

/* "gnn-extractor rank 1 (pid 4711)" into buf. */
void spawn_describe_child(const struct spawn_child *c, char *buf, size_t len);

/* Children still running. */
int spawn_running(const struct spawn_child *cs, int n);

#endif
