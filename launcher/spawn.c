/* spawn.c - fork + exec of stage processes, signals, reaping and words for
 * how a process ended (see spawn.h). */
#include "launcher/spawn.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/util.h"

extern char **environ;

int spawn_stage_dir(char *out, size_t len, char *err, size_t errlen)
{
    const char *env = getenv("SLUICE_STAGE_DIR");
    if (env && *env) {
        if (strlen(env) >= len)
            return sl_errf(err, errlen, -ENAMETOOLONG, "SLUICE_STAGE_DIR is too long");
        snprintf(out, len, "%s", env);
        return 0;
    }
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0) {
        int rc = n < 0 ? -errno : -EINVAL;
        return sl_errf(err, errlen, rc,
                       "cannot read /proc/self/exe to find the stage programs: %s; set "
                       "SLUICE_STAGE_DIR to the directory holding gnn-sampler etc.",
                       strerror(-rc));
    }
    self[n] = '\0';
    char *slash = strrchr(self, '/');
    if (!slash)
        return sl_errf(err, errlen, -EINVAL, "/proc/self/exe is '%s'; set SLUICE_STAGE_DIR", self);
    *slash = '\0';
    if ((size_t)(slash - self) >= len)
        return sl_errf(err, errlen, -ENAMETOOLONG, "the directory of gnnlaunch is too long a path");
    snprintf(out, len, "%s", self[0] ? self : "/");
    return 0;
}

int spawn_check_programs(const char *dir, char *err, size_t errlen)
{
    for (int s = 0; s < RUN_STAGES; s++) {
        char path[PATH_MAX];
        const char *prog = run_stage_program((enum run_stage)s);
        if (sl_path_join(path, sizeof path, dir, prog) < 0)
            return sl_errf(err, errlen, -ENAMETOOLONG, "stage directory %s is too long a path", dir);
        if (access(path, X_OK) != 0) {
            int rc = -errno;
            return sl_errf(err, errlen, rc == -EACCES ? rc : -ENOENT,
                           "stage program %s: %s; the stage programs (gnn-sampler, gnn-extractor, gnn-trainer, "
                           "gnn-releaser) are built next to gnnlaunch - build them, or set SLUICE_STAGE_DIR to "
                           "where they are",
                           path, strerror(-rc));
        }
    }
    return 0;
}

/* The child between fork and exec: async-signal-safe calls only. Reports
 * an exec failure's errno on fd and exits 127. */
static void child_exec(const char *path, char *const argv[], char *const envp[], int devnull, pid_t parent, int fd)
{
    int e = 0;
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0)
        e = errno;
    else if (getppid() != parent)
        _exit(127); /* the launcher died before PDEATHSIG was armed */
    if (e == 0) {
        setpgid(0, 0);
        struct sigaction dfl = {.sa_handler = SIG_DFL};
        sigaction(SIGPIPE, &dfl, NULL); /* the launcher ignores it; exec would keep that */
        /* the launcher's forwarding handlers (to its main thread), before
         * the mask opens: a signal before exec takes its default action */
        static const int fwd[] = {SIGINT, SIGTERM, SIGHUP, SIGCHLD};
        for (size_t i = 0; i < sizeof fwd / sizeof fwd[0]; i++) {
            struct sigaction cur;
            if (sigaction(fwd[i], NULL, &cur) == 0 && cur.sa_handler != SIG_IGN && cur.sa_handler != SIG_DFL)
                sigaction(fwd[i], &dfl, NULL); /* ignored ones (SIGHUP under nohup) stay ignored */
        }
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        if (devnull >= 0 && dup2(devnull, STDIN_FILENO) < 0)
            e = errno;
    }
    if (e == 0) {
        execve(path, argv, envp ? envp : environ);
        e = errno;
    }
    ssize_t w = write(fd, &e, sizeof e);
    (void)w;
    _exit(127);
}

int spawn_start(struct spawn_child *c, const char *path, char *const argv[], char *const envp[], int devnull,
                char *err, size_t errlen)
{
    int p[2];
    if (pipe2(p, O_CLOEXEC) != 0)
        return sl_errf(err, errlen, -errno, "pipe: %s", strerror(errno));
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) {
        int rc = -errno;
        close(p[0]);
        close(p[1]);
        return sl_errf(err, errlen, rc, "cannot start %s: fork: %s", argv[0], strerror(-rc));
    }
    if (pid == 0) {
        close(p[0]);
        child_exec(path, argv, envp, devnull, parent, p[1]);
    }
    close(p[1]);
    setpgid(pid, pid); /* also done by the child; whichever runs first wins */
    int e = 0;
    ssize_t n;
    do
        n = read(p[0], &e, sizeof e);
    while (n < 0 && errno == EINTR);
    close(p[0]);
    if (n == (ssize_t)sizeof e) {
        while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
            ;
        return sl_errf(err, errlen, -e, "cannot start %s (%s): %s", argv[0], path, strerror(e));
    }
    c->pid = pid;
    c->running = true;
    c->status = 0;
    c->term_sent = c->kill_sent = c->noted = false;
    return 0;
}

void spawn_signal(struct spawn_child *c, int sig)
{
    if (!c->running || c->pid <= 0)
        return;
    if (kill(c->pid, sig) == 0) {
        if (sig == SIGTERM)
            c->term_sent = true;
        if (sig == SIGKILL)
            c->kill_sent = true;
    }
}

int spawn_reap(struct spawn_child *cs, int n, int *reaped)
{
    int first = -1, count = 0;
    for (;;) {
        int st;
        pid_t pid = waitpid(-1, &st, WNOHANG);
        if (pid < 0 && errno == EINTR)
            continue;
        if (pid <= 0)
            break;
        for (int i = 0; i < n; i++)
            if (cs[i].running && cs[i].pid == pid) {
                cs[i].running = false;
                cs[i].status = st;
                cs[i].ended_at = sl_now();
                count++;
                if (first < 0)
                    first = i;
                break;
            }
    }
    if (reaped)
        *reaped = count;
    return first;
}

void spawn_wait(struct spawn_child *c)
{
    if (!c->running || c->pid <= 0)
        return;
    int st;
    pid_t r;
    do
        r = waitpid(c->pid, &st, 0);
    while (r < 0 && errno == EINTR);
    c->running = false;
    c->status = r == c->pid ? st : 0;
    c->ended_at = sl_now();
}

void spawn_describe_status(int status, char *buf, size_t len)
{
    if (WIFEXITED(status)) {
        snprintf(buf, len, "exited with status %d", WEXITSTATUS(status));
    } else if (WIFSIGNALED(status)) {
        int sig = WTERMSIG(status);
        const char *abbrev = sigabbrev_np(sig);
        snprintf(buf, len, "was killed by signal %d (%s%s)%s", sig, abbrev ? "SIG" : "", abbrev ? abbrev : "unknown",
                 WCOREDUMP(status) ? ", core dumped" : "");
    } else {
        snprintf(buf, len, "ended with wait status %#x", (unsigned)status);
    }
}

void spawn_describe_child(const struct spawn_child *c, char *buf, size_t len)
{
    snprintf(buf, len, "%s rank %d (pid %ld)", run_stage_program(c->stage), c->rank, (long)c->pid);
}

int spawn_running(const struct spawn_child *cs, int n)
{
    int k = 0;
    for (int i = 0; i < n; i++)
        k += cs[i].running;
    return k;
}
