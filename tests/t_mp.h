/* t_mp.h - scaffolding for tests that fork processes over one run's shared
 * memory (t_mp_ prefix): the run id, the table of forked children, a
 * SIGALRM hang guard that kills them and unlinks the run's segments, the
 * setup every child needs right after fork, and a cmocka teardown that
 * reaps whatever a failed case left behind. */
#ifndef SLUICE_T_MP_H
#define SLUICE_T_MP_H

#include <signal.h>
#include <sys/types.h>

#include "ipc/shm.h"

#define T_MP_MAX_CHILDREN 64

extern char t_mp_run[SHM_RUN_ID_MAX];
extern pid_t t_mp_children[T_MP_MAX_CHILDREN];
extern volatile sig_atomic_t t_mp_nchildren;

/* Makes the run id and installs the hang guard; name prefixes its message. */
void t_mp_init(const char *name);
/* In each child right after fork: die with the parent, and let fatal
 * signals kill it instead of cmocka's handlers resuming the suite there. */
void t_mp_child_init(void);
/* Records a forked child so the guard and the teardown can kill it. */
void t_mp_track(pid_t pid);
/* cmocka teardown: SIGKILL and reap every tracked child, cancel the alarm,
 * unlink the run's segments. */
int t_mp_teardown(void **state);

#endif
