/* t_mp.c - see t_mp.h. */
#include "t_mp.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/util.h"

char t_mp_run[SHM_RUN_ID_MAX];
pid_t t_mp_children[T_MP_MAX_CHILDREN];
volatile sig_atomic_t t_mp_nchildren;
static char guard_msg[160];

static void on_alarm(int sig)
{
    (void)sig;
    ssize_t w = write(2, guard_msg, strlen(guard_msg));
    (void)w;
    for (int i = 0; i < t_mp_nchildren; i++)
        if (t_mp_children[i] > 0)
            kill(t_mp_children[i], SIGKILL);
    shm_run_unlink(t_mp_run); /* readdir + unlink: good enough on this last path */
    _exit(1);
}

void t_mp_init(const char *name)
{
    if (shm_run_id_new(t_mp_run, sizeof t_mp_run) != 0)
        abort();
    snprintf(guard_msg, sizeof guard_msg, "%s: a case did not finish in time (hang); killing its processes\n", name);
    signal(SIGALRM, on_alarm);
}

void t_mp_child_init(void)
{
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    const int sigs[] = {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT, SIGALRM};
    for (size_t i = 0; i < SL_ARRAY_LEN(sigs); i++)
        signal(sigs[i], SIG_DFL);
    alarm(0);
}

void t_mp_track(pid_t pid)
{
    if (t_mp_nchildren >= T_MP_MAX_CHILDREN)
        abort(); /* a test forks more than the table holds: raise the limit */
    t_mp_children[t_mp_nchildren] = pid;
    t_mp_nchildren = t_mp_nchildren + 1;
}

int t_mp_teardown(void **state)
{
    (void)state;
    for (int i = 0; i < t_mp_nchildren; i++)
        if (t_mp_children[i] > 0) {
            kill(t_mp_children[i], SIGKILL);
            waitpid(t_mp_children[i], NULL, 0);
        }
    t_mp_nchildren = 0;
    alarm(0);
    shm_run_unlink(t_mp_run);
    return 0;
}
