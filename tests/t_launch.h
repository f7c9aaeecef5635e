/* t_launch.h - helpers for the gnnlaunch tests (test_launch.c): start
 * gnnlaunch as a child with the test stage programs (SLUICE_STAGE_DIR) and
 * a private XDG_RUNTIME_DIR, wait for it with a bound, find its stage
 * processes, and check that a run left nothing behind. Prefix t_ as in
 * t_util.h; include after it. */
#ifndef SLUICE_T_LAUNCH_H
#define SLUICE_T_LAUNCH_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "ipc/shm.h"

#define T_MAX_KIDS 16

/* Paths every launch uses (t_launch_setup fills them). */
extern char t_ldir[1024];     /* scratch directory */
extern char t_xdg[1200];      /* XDG_RUNTIME_DIR of every launch */
extern char t_base[1300];     /* t_xdg/sluice: where run directories go */
extern char t_stages[1200];   /* the test stage programs */
extern char t_launcher[1200]; /* gnnlaunch */
extern volatile pid_t t_lpid; /* the launcher running now (killed by t_launch_alarm) */
/* When set, t_launch_start runs the launcher on a pseudo-terminal (its
 * stdout then is a terminal) and copies its output to the log. */
extern bool t_launch_pty;

struct t_proc {
    pid_t pid;
    char log[1300];
    char report[1300];
    double t0, t_end;
    int code;       /* exit status, or 128 + signal */
    char args[512]; /* the command line, for messages */
};

struct t_kid {
    pid_t pid;
    int stage, rank;
    char run[SHM_RUN_ID_MAX];
    char cmdline[2048];
};

/* cmocka fixtures every launch test uses: t_launch_case_setup arms an
 * alarm of t_case_alarm_s seconds (its handler is t_launch_alarm, which
 * main installs); t_launch_case_teardown SIGKILLs a launcher a failed case
 * left running and disarms it; t_launch_group_teardown removes t_ldir. */
extern unsigned t_case_alarm_s;
int t_launch_case_setup(void **state);
int t_launch_case_teardown(void **state);
int t_launch_group_teardown(void **state);

/* Makes the scratch directory `name` and the paths above: 0 or -1. */
int t_launch_setup(const char *name);

/* SIGALRM handler: SIGKILLs the running launcher (its stages follow by
 * PDEATHSIG) and exits 1. */
void t_launch_alarm(int sig);

double t_now(void);
void t_sleep_ms(int ms);
void t_slurp(const char *path, char *buf, size_t len);

/* Starts gnnlaunch with args and extra "K=V" environment entries (both
 * NULL-terminated; extra entries win over the defaults). */
void t_launch_start(struct t_proc *r, const char *const *env, const char *const *args);
/* Waits at most timeout_s for it to end (fails the test otherwise);
 * returns its exit status, or 128 + signal. */
int t_launch_wait(struct t_proc *r, double timeout_s);
int t_launch_run(struct t_proc *r, const char *const *env, const char *const *args, double timeout_s);

/* "SLUICE_STAGE_DIR=<the build's bin>" (SLUICE_BIN, else build/bin): the
 * environment entry that runs the real stages. */
void t_real_stages(char *out, size_t len);

/* The last line of r's log that starts with prefix, into out; false when
 * none does (stdout and stderr share the log). */
bool t_last_line(const struct t_proc *r, const char *prefix, char *out, size_t len);
/* The final line `test_acc=<f> val_acc=<f> epochs=<n> seconds=<f>` of a
 * finished run, checked (epochs as given, values in range): test_acc. */
double t_final_test_acc(const struct t_proc *r, unsigned epochs);

void t_expect_log(const struct t_proc *r, const char *what);
void t_expect_no_log(const struct t_proc *r, const char *what);
void t_expect_code(const struct t_proc *r, int want);
/* No segment and no run directory left of the launcher's runs. */
void t_expect_clean(const struct t_proc *r);

/* The exec'd stage processes whose parent is `parent`. */
int t_find_kids(pid_t parent, struct t_kid *k, int max);
/* Waits until n stages run with their metrics blocks claimed and every
 * sampler has pushed min_items; returns how many stages were found. */
int t_wait_flowing(struct t_proc *r, int n, struct t_kid *k, uint64_t min_items);
/* The same, but until every stage of every rank (the last one too: the
 * whole pipeline has run) is past min_items. */
int t_wait_all_moved(struct t_proc *r, int n, struct t_kid *k, uint64_t min_items);
bool t_kids_gone(const struct t_kid *k, int n);
/* /dev/shm entries starting with prefix; entries of t_base. */
int t_shm_count(const char *prefix);
int t_base_entries(void);

/* A small strict JSON syntax check. */
bool t_json_valid(const char *s);

#endif
