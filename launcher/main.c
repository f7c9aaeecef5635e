/* main.c - gnnlaunch: checks a training run (flags, config, dataset, stage
 * programs, output paths) before starting anything, then creates the run
 * (run directory, shared memory, control sockets), starts the four stage
 * processes of every rank and supervises them until they end, and removes
 * everything it created on every way out (DESIGN.md sections 2, 7, 8;
 * docs/architecture.md). With --nodes K it is one of K launchers, one per
 * machine, which meet before creating anything and then watch each other
 * (cluster.h; docs/multinode.md). With --gpus N it first finds the GPUs
 * and, for a run of more than one, has node 0 make the NCCL unique id,
 * both in child processes (gpu/device.h; docs/gpu.md).
 *
 * Exit status: 0 every stage finished; 2 bad input found before start
 * (usage, config, dataset, paths) or the run could not be set up; 3 a stage
 * failed at run time; 130 interrupted (SIGINT, SIGTERM, SIGHUP, or "stop"
 * on the control socket). The launcher writes only to stderr: stdout
 * belongs to the stages (the trainer's final result line). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <libgen.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/dataset.h"
#include "core/dataset_labelled.h"
#include "core/util.h"
#include "ipc/shm.h"
#include "launcher/launch.h"
#include "launcher/cgroup.h"
#include "launcher/clusterenv.h"
#include "stages/pack.h"
#include "stages/pack_rows.h"
#include "stages/schedule_partitions.h"
#include "stages/predict.h"
#include "ops/ckpt.h"
#include "stages/trainer.h"
#include "stages/trainer_reduce.h"

extern char **environ;

/* Most bytes of labels.bin the classes warning reads (dataset_labels_used). */
#define LABELS_SCAN_MAX ((uint64_t)64 << 20)

#define EXIT_USAGE 2

_Static_assert(DEVICE_NCCL_ID_BYTES == RUN_NCCL_ID_BYTES && RUN_NCCL_ID_BYTES == MESH_BLOB_BYTES &&
                   MESH_BLOB_BYTES == TRAINER_UNIQUE_ID_BYTES,
               "the NCCL unique id travels whole: helper, rendezvous blob, cluster.toml, --nccl-id");

static const char usage_text[] =
    "usage: gnnlaunch [--cpu | --gpus N [--ranks-per-gpu K]] CONFIG [--epochs E] [--set section.key=value]...\n"
    "                 [--metrics FILE.jsonl] [--trace FILE.json] [--strict-outputs]\n"
    "                 [--resume | --resume-from CKPT] [--run-name NAME] [--skip-verify]\n"
    "                 [--nodes K --node-rank I --master HOST:PORT [--rendezvous-timeout S]]\n"
    "       gnnlaunch [--cpu | --gpus N] --predict CHECKPOINT CONFIG [--split all|train|val|test]\n"
    "                 [--out DIR] [--set section.key=value]...\n"
    "\n"
    "Trains the model that CONFIG describes: checks the configuration and the\n"
    "dataset, creates the run's shared memory and private run directory, starts\n"
    "gnn-sampler, gnn-extractor, gnn-trainer and gnn-releaser for every rank and\n"
    "supervises them. Ctrl-C stops the run cleanly.\n"
    "\n"
    "  --cpu              train on the CPU with pipeline.ranks ranks (the default)\n"
    "  --gpus N           N ranks, one per GPU: rank r uses GPU r of those CUDA sees\n"
    "                     (CUDA_VISIBLE_DEVICES chooses them); pipeline.ranks is set to N.\n"
    "                     More GPUs than visible is refused before anything starts.\n"
    "                     With more than one GPU in all, node 0 makes the NCCL unique id\n"
    "                     every rank joins with (docs/gpu.md)\n"
    "  --ranks-per-gpu K  with --gpus N: N x K ranks, K on each GPU (rank r on GPU r / K),\n"
    "                     joined through NCCL's socket transport; for testing data\n"
    "                     parallelism on fewer GPUs, not for speed (docs/gpu.md)\n"
    "  --epochs E         shorthand for --set train.epochs=E\n"
    "  --set K=V          override a config key; V is TOML (--set model.fanouts=[10,5])\n"
    "  --metrics FILE     per-epoch and per-second metrics as JSON lines\n"
    "  --metrics-csv FILE one row per epoch (loss, accuracies, lr, seconds, hit rate,\n"
    "                     reads, stage busy and wait) for spreadsheets\n"
    "  --tensorboard DIR  the same per epoch as TensorBoard scalars (event files in DIR)\n"
    "  --trace FILE       Chrome trace events (open in Perfetto)\n"
    "                     (both paths are checked before start; their contents are\n"
    "                     written once the trainer exists)\n"
    "  --resume           continue from the newest checkpoint in train.checkpoint_dir;\n"
    "                     only a checkpoint of this run (same model, batch size, lr,\n"
    "                     seed, ranks and dataset: its run identity) is continued, and\n"
    "                     the keys that differ are listed otherwise\n"
    "  --resume-from FILE continue from checkpoint FILE, whatever run made it (the\n"
    "                     directory's checkpoints are moved aside into old-<time>/)\n"
    "                     Without either, a run starts afresh and moves the previous\n"
    "                     run's checkpoints aside into old-<time>/. The directory is\n"
    "                     locked while a run lives: a second run there is refused\n"
    "  --strict-outputs   a failed write of --metrics or --trace fails the run (exit 3)\n"
    "                     instead of a warning\n"
    "  --skip-verify      do not verify the dataset's contents before the run (a warning\n"
    "                     says so). By default every file is checked against the XXH3\n"
    "                     that dataset.toml records, and its contents (finite features,\n"
    "                     ids, labels, splits), once per state of the files: a check\n"
    "                     that passed is recorded with the files' identities (device,\n"
    "                     inode, size, times) in DATASET/verified or ~/.cache/sluice,\n"
    "                     so that an unchanged dataset costs a few stat calls\n"
    "                     (docs/format.md, \"Verification\"). A file of the dataset that\n"
    "                     changes during the run stops it (exit 3) before its epoch\n"
    "                     is checkpointed\n"
    "  --predict CKPT     no training: evaluate checkpoint CKPT (of this CONFIG's model)\n"
    "                     on the nodes of --split (default all) and write nodes.npy,\n"
    "                     logits.npy, embeddings.npy, pred.npy and accuracy.json into\n"
    "                     --out DIR (default predictions/<run name>; must not exist).\n"
    "                     Sampled with model.fanouts; --set model.fanouts=[-1,-1] for\n"
    "                     every neighbour, or --exact: layer-wise over the whole graph\n"
    "                     in gnnlaunch itself, layer tables on disk (docs/inference.md).\n"
    "                     The last line is\n"
    "                     [train_acc=F] [val_acc=F] [test_acc=F] nodes=N seconds=S out=DIR\n"
    "  --run-name NAME    name the run directory (default: the run id); refused\n"
    "                     while another live run uses the name\n"
    "  --nodes K          train on K machines, one gnnlaunch on each (docs/multinode.md);\n"
    "                     global rank = I x pipeline.ranks + local rank\n"
    "  --node-rank I      this machine's place, 0..K-1 (node 0 is the master)\n"
    "  --master HOST:PORT node 0's address and a TCP port, the same on every node;\n"
    "                     node I's trainers also use port PORT+1+I\n"
    "  --nnodes K, --master-addr HOST, --master-port PORT  torchrun's names for them.\n"
    "                     Without the flags, NNODES (or WORLD_SIZE, SLURM_NNODES),\n"
    "                     NODE_RANK (or GROUP_RANK, SLURM_NODEID), MASTER_ADDR (or the\n"
    "                     first host of SLURM_JOB_NODELIST) and MASTER_PORT (or 29500)\n"
    "                     are read, and what was taken is printed\n"
    "  --rendezvous-timeout S  how long the nodes wait for each other (default 120)\n"
    "  --help, --version\n"
    "\n"
    "Exit status: 0 done; 2 bad input (nothing was started), a split without a\n"
    "labelled node, or a checkpoint directory in use or of another run; 3 a stage\n"
    "(or another node) failed, a stage stalled (pipeline.stall_timeout_s), the loss\n"
    "or gradient was not finite (train.on_nonfinite), or --strict-outputs and an\n"
    "output was not written; 130 interrupted or stopped. Stage programs are taken from the\n"
    "directory of gnnlaunch, or from $SLUICE_STAGE_DIR. The run directory is under\n"
    "$XDG_RUNTIME_DIR/sluice (or ${TMPDIR:-/tmp}/sluice-UID, or a private\n"
    "sluice-UID-XXXXXX beside it when another user holds that name, recorded in\n"
    "$HOME/.cache/sluice/run-base) and holds the ZeroMQ control\n"
    "(ipc://RUNDIR/control: status, stop) and metrics (ipc://RUNDIR/metrics)\n"
    "sockets. See docs/architecture.md.\n";

struct opts {
    const char *config;
    long gpus; /* -1: not given */
    long ranks_per_gpu; /* 0: not given */
    bool cpu;
    const char **sets; /* (nsets) --set and --epochs values, in order */
    int nsets;
    char **owned; /* (nowned) strings made for --epochs */
    int nowned;
    const char *metrics, *trace, *run_name;
    const char *metrics_csv, *tensorboard; /* --metrics-csv FILE, --tensorboard DIR */
    const char *resume_from; /* --resume-from FILE, or NULL */
    bool resume, strict_outputs;
    bool skip_verify; /* --skip-verify */
    struct cluster_opts cluster; /* --nodes, --node-rank, --master, --rendezvous-timeout */
    struct clusterenv flags;     /* what the command line said of them (the environment fills the rest) */
    const char *predict;         /* --predict CKPT, or NULL */
    const char *split, *out;     /* --split, --out (with --predict) */
    bool exact;                  /* --exact (with --predict) */
    bool epochs_given;
    char master[300];            /* HOST:PORT, from the flags or the environment */
};

static struct launch g_run; /* static: the exit handler runs after main returns */
static bool g_cleaned;

/* ---- arguments ------------------------------------------------------------------------ */

static int usage_error(const char *fmt, ...) SL_PRINTF(1, 2);
static int usage_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "gnnlaunch: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\nTry 'gnnlaunch --help'.\n");
    va_end(ap);
    return EXIT_USAGE;
}

/* Takes the value of option `name` at argv[*i] ("--name=V" or "--name V");
 * NULL if arg is not this option. *missing when the value is absent. */
static const char *opt_value(int argc, char **argv, int *i, const char *name, bool *missing)
{
    size_t n = strlen(name);
    const char *arg = argv[*i];
    if (strncmp(arg, name, n) != 0)
        return NULL;
    if (arg[n] == '=')
        return arg + n + 1;
    if (arg[n] != '\0')
        return NULL;
    if (*i + 1 >= argc) {
        *missing = true;
        return NULL;
    }
    return argv[++*i];
}

static bool parse_long(const char *s, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end)
        return false;
    *out = v;
    return true;
}

static const char *env_get(const char *name)
{
    return getenv(name);
}

/* An option gnnlaunch does not know: the nearest known one, if any is
 * near ("--epoch" -> "--epochs"). Exit status 2. */
static int unknown_option(const char *arg)
{
    static const char *const known[] = {
        "--help", "--version", "--cpu", "--gpus", "--ranks-per-gpu", "--epochs", "--set", "--metrics", "--trace", "--resume",
        "--resume-from", "--run-name", "--skip-verify", "--strict-outputs", "--nodes", "--nnodes", "--node-rank",
        "--master", "--master-addr", "--master-port", "--rendezvous-timeout", "--predict", "--split", "--out", "--exact", "--metrics-csv", "--tensorboard"};
    char name[64];
    snprintf(name, sizeof name, "%.*s", (int)strcspn(arg, "="), arg);
    const char *best = NULL;
    size_t bd = (size_t)-1;
    for (size_t k = 0; k < SL_ARRAY_LEN(known); k++) {
        /* in half steps, a known name that starts with it a half step nearer ("--gpu": --gpus, not --cpu) */
        size_t d = 2 * sl_edit_distance(name, known[k]) - !strncmp(known[k], name, strlen(name));
        if (d < bd)
            bd = d, best = known[k];
    }
    if (best && bd <= 2 * SL_MAX((size_t)2, strlen(name) / 4))
        return usage_error("unknown option '%s'; did you mean %s?", arg, best);
    return usage_error("unknown option '%s'", arg);
}

/* -1 to go on, else the exit status (help, version, usage error). */
static int parse_args(int argc, char **argv, struct opts *o)
{
    memset(o, 0, sizeof *o);
    o->gpus = -1;
    o->cluster.nodes = 1;
    o->cluster.node = -1;
    o->flags.node = -1;
    o->sets = calloc((size_t)argc + 1, sizeof *o->sets);
    o->owned = calloc((size_t)argc + 1, sizeof *o->owned);
    if (!o->sets || !o->owned)
        return usage_error("%s", "out of memory");
    bool only_positional = false;
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i], *v;
        bool missing = false;
        if (only_positional || arg[0] != '-' || !strcmp(arg, "-")) {
            if (o->config)
                return usage_error("one CONFIG expected, got '%s' as well", arg);
            o->config = arg;
        } else if (!strcmp(arg, "--")) {
            only_positional = true;
        } else if (!strcmp(arg, "--help") || !strcmp(arg, "-h")) {
            fputs(usage_text, stdout);
            return 0;
        } else if (!strcmp(arg, "--version")) {
            printf("gnnlaunch (sluice) %s\n", SLUICE_VERSION);
            return 0;
        } else if (!strcmp(arg, "--cpu")) {
            o->cpu = true;
        } else if (!strcmp(arg, "--resume")) {
            o->resume = true;
        } else if (!strcmp(arg, "--exact")) {
            o->exact = true;
        } else if (!strcmp(arg, "--skip-verify")) {
            o->skip_verify = true;
        } else if (!strcmp(arg, "--strict-outputs")) {
            o->strict_outputs = true;
        } else if ((v = opt_value(argc, argv, &i, "--resume-from", &missing))) {
            o->resume_from = v;
        } else if ((v = opt_value(argc, argv, &i, "--predict", &missing))) {
            o->predict = v;
        } else if ((v = opt_value(argc, argv, &i, "--split", &missing))) {
            if (run_predict_parse(v) < 0)
                return usage_error("--split needs all, train, val or test, not '%s'", v);
            o->split = v;
        } else if ((v = opt_value(argc, argv, &i, "--out", &missing))) {
            o->out = v;
        } else if ((v = opt_value(argc, argv, &i, "--gpus", &missing))) {
            if (!parse_long(v, &o->gpus) || o->gpus < 1 || o->gpus > RUN_RANKS_MAX)
                return usage_error("--gpus needs a number of GPUs from 1 to %d, not '%s'", RUN_RANKS_MAX, v);
        } else if ((v = opt_value(argc, argv, &i, "--ranks-per-gpu", &missing))) {
            if (!parse_long(v, &o->ranks_per_gpu) || o->ranks_per_gpu < 1 || o->ranks_per_gpu > RUN_RANKS_MAX)
                return usage_error("--ranks-per-gpu needs a number of ranks from 1 to %d, not '%s'", RUN_RANKS_MAX, v);
        } else if ((v = opt_value(argc, argv, &i, "--epochs", &missing))) {
            long e;
            if (!parse_long(v, &e) || e < 1)
                return usage_error("--epochs needs a positive integer, not '%s'", v);
            char *s = malloc(48);
            if (!s)
                return usage_error("%s", "out of memory");
            snprintf(s, 48, "train.epochs=%ld", e);
            o->epochs_given = true;
            o->owned[o->nowned++] = s;
            o->sets[o->nsets++] = s;
        } else if ((v = opt_value(argc, argv, &i, "--set", &missing))) {
            o->sets[o->nsets++] = v;
        } else if ((v = opt_value(argc, argv, &i, "--metrics-csv", &missing))) {
            o->metrics_csv = v;
        } else if ((v = opt_value(argc, argv, &i, "--tensorboard", &missing))) {
            o->tensorboard = v;
        } else if ((v = opt_value(argc, argv, &i, "--metrics", &missing))) {
            o->metrics = v;
        } else if ((v = opt_value(argc, argv, &i, "--trace", &missing))) {
            o->trace = v;
        } else if ((v = opt_value(argc, argv, &i, "--run-name", &missing))) {
            o->run_name = v;
        } else if ((v = opt_value(argc, argv, &i, "--nodes", &missing)) ||
                   (v = opt_value(argc, argv, &i, "--nnodes", &missing))) { /* torchrun's name */
            if (!parse_long(v, &o->flags.nodes) || o->flags.nodes < 1)
                return usage_error("%s needs a number of nodes >= 1, not '%s'", arg, v);
        } else if ((v = opt_value(argc, argv, &i, "--node-rank", &missing)) ||
                   (v = opt_value(argc, argv, &i, "--node_rank", &missing))) {
            if (!parse_long(v, &o->flags.node) || o->flags.node < 0)
                return usage_error("--node-rank needs a node rank >= 0, not '%s'", v);
        } else if ((v = opt_value(argc, argv, &i, "--master", &missing))) {
            o->flags.master = v;
        } else if ((v = opt_value(argc, argv, &i, "--master-addr", &missing)) ||
                   (v = opt_value(argc, argv, &i, "--master_addr", &missing))) {
            o->flags.addr = v;
        } else if ((v = opt_value(argc, argv, &i, "--master-port", &missing)) ||
                   (v = opt_value(argc, argv, &i, "--master_port", &missing))) {
            long port;
            if (!parse_long(v, &port) || port < 1 || port > 65535)
                return usage_error("--master-port needs a TCP port from 1 to 65535, not '%s'", v);
            o->flags.port = v;
        } else if ((v = opt_value(argc, argv, &i, "--rendezvous-timeout", &missing))) {
            if (sl_parse_double(v, &o->cluster.timeout_s) != 0 || !(o->cluster.timeout_s > 0))
                return usage_error("--rendezvous-timeout needs seconds > 0, not '%s'", v);
        } else if (missing) {
            return usage_error("%s needs a value", arg);
        } else {
            return unknown_option(arg);
        }
        if (missing)
            return usage_error("%s needs a value", arg);
    }
    if (o->cpu && o->gpus >= 0)
        return usage_error("%s", "--cpu and --gpus exclude each other");
    if (o->ranks_per_gpu && o->gpus < 0)
        return usage_error("%s", "--ranks-per-gpu needs --gpus N (on the CPU, pipeline.ranks sets the ranks)");
    if (o->ranks_per_gpu > 1 && o->gpus * o->ranks_per_gpu > RUN_RANKS_MAX)
        return usage_error("--gpus %ld --ranks-per-gpu %ld makes %ld ranks; at most %d ranks run on a node", o->gpus,
                           o->ranks_per_gpu, o->gpus * o->ranks_per_gpu, RUN_RANKS_MAX);
    if ((o->split || o->out || o->exact) && !o->predict)
        return usage_error("%s needs --predict CHECKPOINT", o->split ? "--split" : o->out ? "--out" : "--exact");
    if (o->exact && o->gpus >= 0)
        return usage_error("%s", "--exact runs on the CPU (layer-wise inference in gnnlaunch itself); drop --gpus");
    if (o->predict && (o->resume || o->resume_from || o->epochs_given))
        return usage_error("--predict evaluates a checkpoint; %s belongs to training",
                           o->resume ? "--resume" : o->resume_from ? "--resume-from" : "--epochs");
    char said[512], err[512];
    if (clusterenv_resolve(&o->flags, env_get, &o->cluster.nodes, &o->cluster.node, o->master, sizeof o->master, said,
                           sizeof said, err, sizeof err) != 0)
        return usage_error("%s", err);
    o->cluster.master = o->master[0] ? o->master : NULL;
    if (said[0])
        fprintf(stderr, "gnnlaunch: from the environment: %s (flags win over these)\n", said);
    o->cluster.gpus = o->gpus > 0 ? o->gpus : 0;
    if (!o->config)
        return usage_error("%s", "no CONFIG given");
    return -1;
}

static void free_opts(struct opts *o)
{
    for (int i = 0; i < o->nowned; i++)
        free(o->owned[i]);
    free(o->owned);
    free(o->sets);
}

/* ---- checks before start --------------------------------------------------------------- */

/* Checks that an output file can be written (its directory exists and is
 * writable; the file, if there, is a writable non-directory) and makes its
 * path absolute into abs. Nothing is created. */
static int check_output(const char *flag, const char *path, char *abs, size_t len, char *err, size_t errlen)
{
    if (!*path)
        return sl_errf(err, errlen, -EINVAL, "%s: empty path", flag);
    char a[PATH_MAX], b[PATH_MAX];
    snprintf(a, sizeof a, "%s", path);
    snprintf(b, sizeof b, "%s", path);
    const char *dir = dirname(a), *base = basename(b);
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
        return sl_errf(err, errlen, -ENOENT, "%s %s: directory %s does not exist; create it or choose another path",
                       flag, path, dir);
    if (access(dir, W_OK | X_OK) != 0)
        return sl_errf(err, errlen, -EACCES, "%s %s: directory %s is not writable (%s); choose another path", flag,
                       path, dir, strerror(errno));
    if (!strcmp(base, ".") || !strcmp(base, "..") || !strcmp(base, "/"))
        return sl_errf(err, errlen, -EINVAL, "%s %s: not a file name", flag, path);
    if (stat(path, &st) == 0) {
        if (S_ISDIR(st.st_mode))
            return sl_errf(err, errlen, -EISDIR, "%s %s: is a directory; give a file name", flag, path);
        if (access(path, W_OK) != 0)
            return sl_errf(err, errlen, -EACCES, "%s %s: cannot be written (%s)", flag, path, strerror(errno));
    }
    char real[PATH_MAX];
    if (!realpath(dir, real))
        return sl_errf(err, errlen, -errno, "%s %s: %s", flag, path, strerror(errno));
    int n = snprintf(abs, len, "%s/%s", strcmp(real, "/") ? real : "", base);
    if (n < 0 || (size_t)n >= len)
        return sl_errf(err, errlen, -ENAMETOOLONG, "%s %s: path too long", flag, path);
    return 0;
}

/* --tensorboard DIR: an existing writable directory, or one whose parent
 * is (it is created when the run starts), made absolute into abs. */
static int check_tensorboard(const char *dir, char *abs, size_t len, char *err, size_t errlen)
{
    struct stat st;
    if (stat(dir, &st) == 0) {
        if (!S_ISDIR(st.st_mode))
            return sl_errf(err, errlen, -ENOTDIR, "--tensorboard %s: not a directory", dir);
        if (access(dir, W_OK | X_OK) != 0)
            return sl_errf(err, errlen, -EACCES, "--tensorboard %s: not writable (%s)", dir, strerror(errno));
        if (!realpath(dir, abs))
            return sl_errf(err, errlen, -errno, "--tensorboard %s: %s", dir, strerror(errno));
        return 0;
    }
    /* to be created: its parent checked as an output file's directory would be */
    return check_output("--tensorboard", dir, abs, len, err, errlen);
}

/* ROOT/<run name>: --run-name, else the config file's name without .toml
 * (the default of train.checkpoint_dir and of --predict's --out). */
static void run_dir_default(const struct opts *o, const char *root, char *out, size_t len)
{
    const char *base = strrchr(o->config, '/');
    base = o->run_name ? o->run_name : base ? base + 1 : o->config;
    size_t n = strlen(base);
    if (!o->run_name && n > 5 && !strcmp(base + n - 5, ".toml"))
        n -= 5;
    snprintf(out, len, "%s/%.*s", root, (int)SL_MIN(n, 200), base);
}

/* train.checkpoint_dir: "" becomes checkpoints/<run name> (--run-name, or
 * the config file's name without .toml); relative paths are made absolute
 * (stages need not share our cwd). Then, under the directory's lock
 * (launcher/ckptdir.h; node 0 only: one writer for all nodes), which the
 * launcher holds until it exits:
 *   --resume: the newest complete checkpoint there must be of this run
 *     (its `run` identity: the configuration's keys that decide what is
 *     computed, and the dataset) and sets the first epoch to run;
 *   --resume-from FILE: FILE, of whatever run, becomes the directory's
 *     only checkpoint (the others are moved aside) and is continued;
 *   neither: a fresh start moves every checkpoint there aside, into
 *     old-<time>/, so no file of the old run is left to mix with this one.
 * Last of the checks: nothing is moved unless the run is otherwise
 * valid. */
static int check_checkpoints(struct launch *l, const struct opts *o, uint64_t dataset_id, char *err, size_t errlen)
{
    char *dir = l->cfg.train.checkpoint_dir, rel[PATH_MAX], cwd[PATH_MAX], msg[2048];
    size_t cap = sizeof l->cfg.train.checkpoint_dir;
    if (!dir[0]) {
        run_dir_default(o, "checkpoints", rel, sizeof rel);
    } else {
        snprintf(rel, sizeof rel, "%s", dir);
    }
    if (rel[0] != '/') {
        if (!getcwd(cwd, sizeof cwd))
            return sl_errf(err, errlen, -errno, "cannot read the current directory: %s", strerror(errno));
        if (sl_path_join(dir, cap, cwd, rel) != 0)
            return sl_errf(err, errlen, -ENAMETOOLONG, "train.checkpoint_dir: path too long");
    } else {
        snprintf(dir, cap, "%s", rel);
    }
    if (o->cluster.nodes > 1 && o->cluster.node != 0)
        return 0; /* node 0's launcher keeps the directory */
    int rc = ckptdir_lock(&l->ckd, dir, err, errlen);
    if (rc)
        return rc;
    char path[PATH_MAX], moved[128], run_text[2048];
    uint64_t run = config_run_identity(&l->cfg, dataset_id);
    config_run_text(&l->cfg, run_text, sizeof run_text);
    uint32_t epoch = 0;
    if (o->resume_from) { /* checked before anything is moved */
        struct ckpt k;
        if ((rc = ckpt_read(&k, o->resume_from, msg, sizeof msg)) != 0)
            return sl_errf(err, errlen, rc, "--resume-from: %s", msg);
        const char *ep = ckpt_meta(&k, "epoch");
        unsigned long e = ep ? strtoul(ep, NULL, 10) : 0;
        ckpt_free(&k);
        if (e >= (unsigned long)l->cfg.train.epochs)
            return sl_errf(err, errlen, -EINVAL,
                           "--resume-from %s holds %lu epochs, not fewer than train.epochs = %" PRId64
                           "; pass a larger --epochs to train on",
                           o->resume_from, e, l->cfg.train.epochs);
        if ((rc = ckptdir_adopt(&l->ckd, o->resume_from, &epoch, moved, sizeof moved, msg, sizeof msg)) != 0)
            return sl_errf(err, errlen, rc, "--resume-from %s: %s", o->resume_from, msg);
        if (moved[0])
            fprintf(stderr, "gnnlaunch: moved the checkpoints that were in %s to %s/%s\n", dir, dir, moved);
    }
    rc = ckpt_latest(dir, path, sizeof path, &epoch, msg, sizeof msg);
    if (rc != 0 && rc != -ENOENT)
        return sl_errf(err, errlen, rc, "train.checkpoint_dir = \"%s\": %s", dir, msg);
    if (l->resume) {
        if (rc == -ENOENT)
            return sl_errf(err, errlen, -ENOENT,
                           "--resume: no checkpoint in %s (train.checkpoint_dir); run without --resume to start "
                           "afresh",
                           dir);
        if (epoch >= (uint32_t)l->cfg.train.epochs)
            return sl_errf(err, errlen, -EINVAL,
                           "--resume: %s already holds %" PRIu32 " of train.epochs = %" PRId64
                           " epochs; pass a larger --epochs to train on",
                           path, epoch, l->cfg.train.epochs);
        if (o->resume_from) { /* named explicitly: another run's, even another dataset's, is the user's choice */
            if (ckpt_check_dataset(dir, epoch, dataset_id, l->cfg.dataset.path, msg, sizeof msg) != 0)
                fprintf(stderr, "gnnlaunch: note: %s\n", msg);
        } else {
            if ((rc = ckpt_check_dataset(dir, epoch, dataset_id, l->cfg.dataset.path, err, errlen)) != 0)
                return rc; /* trained on another dataset */
            if ((rc = ckptdir_check_run(path, run, run_text, err, errlen)) != 0)
                return rc; /* another run's */
        }
        l->start_epoch = epoch;
        fprintf(stderr, "gnnlaunch: resuming from %s: epochs %" PRIu32 "..%" PRId64 " to go\n", path, epoch + 1,
                l->cfg.train.epochs);
        return 0;
    }
    int n = ckptdir_move_aside(&l->ckd, moved, sizeof moved, msg, sizeof msg);
    if (n < 0)
        return sl_errf(err, errlen, n, "train.checkpoint_dir = \"%s\": %s", dir, msg);
    if (n > 0)
        fprintf(stderr,
                "gnnlaunch: note: this run starts afresh: the %d checkpoint%s of the previous run in %s moved to "
                "%s/%s (--resume continues a run instead)\n",
                n, n == 1 ? "" : "s", dir, dir, moved);
    return 0;
}

/* --predict: the checkpoint and --out made absolute (--out defaults to
 * predictions/<run name>), then checked, and the outputs created in
 * their partial directory (launcher/predict.h). */
static int check_predict(struct launch *l, const struct opts *o, char *err, size_t errlen)
{
    struct launch_predict *p = &l->predict;
    p->which = o->split ? (enum run_predict)run_predict_parse(o->split) : RUN_PREDICT_ALL;
    p->exact = o->exact;
    if (!realpath(o->predict, p->ckpt))
        return sl_errf(err, errlen, -errno, "--predict %s: %s", o->predict, strerror(errno));
    char rel[PATH_MAX], cwd[PATH_MAX];
    if (o->out) {
        snprintf(rel, sizeof rel, "%s", o->out);
    } else {
        run_dir_default(o, "predictions", rel, sizeof rel);
        if (mkdir("predictions", 0755) != 0 && errno != EEXIST)
            return sl_errf(err, errlen, -errno, "cannot create predictions/: %s", strerror(errno));
    }
    size_t n = strlen(rel);
    while (n > 1 && rel[n - 1] == '/')
        rel[--n] = '\0';
    if (rel[0] != '/') {
        if (!getcwd(cwd, sizeof cwd) || sl_path_join(p->out, sizeof p->out, cwd, rel) != 0)
            return sl_errf(err, errlen, -ENAMETOOLONG, "--out %s: path too long", rel);
    } else {
        snprintf(p->out, sizeof p->out, "%s", rel);
    }
    return launch_predict_prepare(p, &l->cfg, &l->meta, err, errlen);
}

/* pipeline.mode = "packed": the pack exists, was made from this dataset
 * for these sampling keys and ranks, holds every batch of the run, and
 * its index, hot tier and cache tier are what was packed (their XXH3
 * against the manifest: one sequential read of the files shared by every
 * batch; the replicated chunks are checked by size, and by gnnprep info
 * --verify) (stages/pack.h); its path is made absolute for the stages. */
static int check_pack(struct launch *l, const struct opts *o, const struct dataset_meta *meta, char *err,
                      size_t errlen)
{
    char msg[2048], real[PATH_MAX];
    if (o->cluster.nodes > 1)
        return sl_errf(err, errlen, -EINVAL, "%s: pipeline.mode = \"packed\" runs on one node; drop --nodes or use "
                       "pipeline.mode = \"online\"", o->config);
    if (l->gpus > 0) /* the CUDA row sink copies from registered staging; a chunk's rows are in private memory */
        return sl_errf(err, errlen, -EINVAL, "%s: pipeline.mode = \"packed\" runs on the CPU only for now (gnnlaunch "
                       "--cpu); on GPUs use pipeline.mode = \"online\"", o->config);
    if (!realpath(l->cfg.pipeline.pack, real))
        return sl_errf(err, errlen, -errno, "pipeline.pack = \"%s\" (from %s): %s; make it with gnnprep pack",
                       l->cfg.pipeline.pack, o->config, strerror(errno));
    snprintf(l->cfg.pipeline.pack, sizeof l->cfg.pipeline.pack, "%s", real);
    struct pack p;
    int rc = pack_open(&p, real, true, msg, sizeof msg);
    if (rc == 0) {
        rc = pack_check_run(&p, &l->cfg, (uint32_t)l->ranks, meta, msg, sizeof msg);
        if (rc == 0)
            rc = pack_verify(&p, PACK_FILE_INDEX | PACK_FILE_HOT | PACK_FILE_CACHE, msg, sizeof msg);
        /* the memory plan's packed reads: the extractor's buffers, and the sampler's copy of the index (its
         * threads' image buffers are added with the arena's slot size) */
        l->pack_mem = pack_rows_memory(&p, (uint32_t)l->cfg.pipeline.extractors) + p.m.batches * sizeof(struct pack_entry);
        pack_free(&p);
    }
    if (rc)
        return sl_errf(err, errlen, rc, "pipeline.pack (from %s): %s", o->config, msg);
    return 0;
}

/* pipeline.mode = "partitions" (docs/partitions.md): one rank on the
 * CPU of one node; the layout pipeline.partitions names (or the dataset's
 * only one) exists and was made from this dataset. Sets
 * pipeline.partitions to its P; pipeline.buffer_partitions is resolved by
 * the memory plan (memfit.h). */
static int check_partitions(struct launch *l, const struct opts *o, const struct dataset_meta *meta, char *err,
                            size_t errlen)
{
    struct config *c = &l->cfg;
    const char *ds = c->dataset.path;
    if (o->cluster.nodes > 1 || l->gpus > 0 || c->pipeline.ranks > 1)
        return sl_errf(err, errlen, -EINVAL, "%s: pipeline.mode = \"partitions\" runs one rank on the CPU of one node "
                       "for now (gnnlaunch --cpu, pipeline.ranks = 1, no --nodes); use pipeline.mode = \"online\" "
                       "otherwise", o->config);
    uint32_t parts = (uint32_t)c->pipeline.partitions;
    char name[32];
    if (parts == 0) { /* the dataset's only layout */
        DIR *d = opendir(ds);
        if (!d)
            return sl_errf(err, errlen, -errno, "dataset.path = \"%s\": %s", ds, strerror(errno));
        unsigned found = 0;
        struct dirent *e;
        while ((e = readdir(d))) {
            unsigned q;
            int n = 0;
            if (sscanf(e->d_name, "parts.%u%n", &q, &n) == 1 && e->d_name[n] == '\0' && q > 0) {
                found++;
                if (found == 1 || q < parts)
                    parts = q;
            }
        }
        closedir(d);
        if (found == 0)
            return sl_errf(err, errlen, -ENOENT, "%s: pipeline.mode = \"partitions\", but the dataset %s has no "
                           "partitioned layout (no %s/parts.P); make one with gnnprep partition %s --parts P",
                           o->config, ds, ds, ds);
        if (found > 1)
            return sl_errf(err, errlen, -EINVAL, "%s: the dataset %s has %u partitioned layouts (parts.P); say which "
                           "with pipeline.partitions = P (for instance %u)", o->config, ds, found, parts);
    }
    parts_dir_name(parts, name, sizeof name);
    if (sl_path_join(l->parts_dir, sizeof l->parts_dir, ds, name) < 0)
        return sl_errf(err, errlen, -ENAMETOOLONG, "dataset.path = \"%s\": too long", ds);
    char msg[2048];
    int rc = parts_meta_read(l->parts_dir, meta, &l->parts, msg, sizeof msg);
    if (rc == -ENOENT)
        return sl_errf(err, errlen, rc, "%s: pipeline.mode = \"partitions\" needs the layout %s, which does not exist "
                       "(%s); make it with gnnprep partition %s --parts %u", o->config, l->parts_dir, msg, ds, parts);
    if (rc)
        return sl_errf(err, errlen, rc, "%s: pipeline.mode = \"partitions\": %s", o->config, msg);
    if (l->parts.parts > PO_MAX_PARTS)
        return sl_errf(err, errlen, -EINVAL, "%s: %s has %u partitions, more than the %u an ordering takes", o->config,
                       l->parts_dir, l->parts.parts, PO_MAX_PARTS);
    if (c->pipeline.buffer_partitions > (int64_t)l->parts.parts)
        return sl_errf(err, errlen, -EINVAL, "%s: pipeline.buffer_partitions = %" PRId64 " is above the %" PRIu32
                       " partitions of %s; the buffer holds at most all of them", o->config,
                       c->pipeline.buffer_partitions, l->parts.parts, l->parts_dir);
    c->pipeline.partitions = parts;
    return 0;
}

/* What the partition mode will do, printed once every check passed: p, c,
 * the ordering, each epoch's states and swaps against the lower bound,
 * and the partitions the run reads in all (the extractor's closing note
 * counts the same). */
static int report_partitions(struct launch *l, char *err, size_t errlen)
{
    const struct config *c = &l->cfg;
    char arg[8300], msg[1024];
    struct schedule s;
    struct schedule_params sp = {.rank = 0, .ranks = 1, .batch_size = (uint64_t)c->train.batch_size,
                                 .epochs = (uint32_t)c->train.epochs, .eval_every = (uint32_t)c->train.eval_every,
                                 .test_with_val = c->train.early_stop_patience > 0, .seed = (uint64_t)c->train.seed};
    schedule_split_sizes(&l->meta, sp.split_n);
    sp.arg = arg;
    int rc = schedule_open(&s, schedule_for_config(c, arg, sizeof arg), &sp, msg, sizeof msg);
    if (rc)
        return sl_errf(err, errlen, rc, "pipeline.mode = \"partitions\": %s", msg);
    const struct parts_meta *pm = &l->parts;
    uint32_t cs = (uint32_t)c->pipeline.buffer_partitions, states_min = UINT32_MAX, states_max = 0;
    uint64_t total = 0;
    struct po_plan prev = {0}, pl;
    for (uint32_t e = l->start_epoch; e < sp.epochs && rc == 0; e++) {
        if ((rc = schedule_partitions_plan(&s, e, &pl, msg, sizeof msg)) != 0)
            break;
        total += (e == l->start_epoch ? pl.first_loads : po_epoch_carry_loads(&prev, &pl)) + pl.swaps;
        states_min = SL_MIN(states_min, pl.states);
        states_max = SL_MAX(states_max, pl.states);
        po_plan_free(&prev);
        prev = pl;
    }
    po_plan_free(&prev);
    bool eval_in = rc == 0 && schedule_partitions_eval_in_buffer(&s);
    schedule_free(&s);
    if (rc)
        return sl_errf(err, errlen, rc, "pipeline.mode = \"partitions\": %s", msg);
    enum po_order order = (enum po_order)c->pipeline.partition_order;
    struct po_params pp = {.parts = pm->parts, .slots = cs, .train_parts = pm->train_parts, .order = order,
                           .cover = PO_COVER_NODES};
    uint32_t spare = 0;
    if ((rc = schedule_partitions_spare(pm->parts, cs, pm->train_parts, order, &spare, msg, sizeof msg)) != 0)
        return sl_errf(err, errlen, rc, "pipeline.mode = \"partitions\": %s", msg);
    char b1[32], b2[32], b3[32];
    uint32_t epochs = sp.epochs - l->start_epoch;
    /* MariusGNN's rule (comet, k < c) needs no swap at all: its bound is 0 */
    bool one_state = order == PO_ORDER_COMET && pm->train_parts < cs;
    fprintf(stderr,
            "gnnlaunch: partitions: %s, p = %" PRIu32 " partitions of %" PRIu64 " nodes (%s each), %" PRIu32
            " holding the training nodes; buffer c = %" PRIu32 " (%s) + %" PRIu32 " spare frames = %s; ordering %s: "
            "%" PRIu32 "..%" PRIu32 " states an epoch, %" PRIu64 " swaps an epoch expected against the lower bound %" PRIu64
            " (%s; pairs: %" PRIu64 "); the run reads %" PRIu64 " partitions (%s) over %" PRIu32 " epochs; evaluation %s\n",
            l->parts_dir, pm->parts, pm->part_nodes, sl_fmt_bytes(pm->part_bytes, b1, sizeof b1), pm->train_parts, cs,
            l->mem.partbuf_sized ? "auto-tuned to the memory plan" : "as given", spare,
            sl_fmt_bytes((uint64_t)(cs + spare) * pm->part_bytes, b2, sizeof b2), po_order_name(order), states_min,
            states_max, po_expected_swaps(&pp), one_state ? 0 : po_lower_bound_nodes(pm->parts, cs),
            one_state ? "the training partitions fit the buffer: one state" : "p - c, every partition in once",
            cs >= 2 ? po_lower_bound_pairs(pm->parts, cs) : 0, total, sl_fmt_bytes(total * pm->part_bytes, b3, sizeof b3),
            epochs, eval_in ? "inside the buffer state" : "on the whole graph (rows read from features.bin)");
    return 0;
}

/* Everything that can be wrong with the input, found before anything is
 * created. 0, or an error message in err. */
/* model.kind = distmult | complex: a link-prediction run in this process
 * (launcher/link.h). What it does not do yet is refused here, before
 * anything is made: GPUs, several ranks or nodes, --predict,
 * --metrics-csv and --trace. */
/* pipeline.mode = "partitions" for a link run: p and c (given, or p 16
 * and the largest c whose frames, with the spare one, fit half of the
 * memory: the cgroup's limit, else MemAvailable), refusing c < 2, c > p
 * and p > nodes. The values chosen go into the run's configuration. */
static int check_link_ooc(struct launch *l, const struct opts *o, char *err, size_t errlen)
{
    struct launch_link *r = &l->link_run;
    const uint64_t nodes = r->meta.nodes, d = (uint64_t)l->cfg.model.hidden;
    int64_t p = l->cfg.pipeline.partitions, c = l->cfg.pipeline.buffer_partitions;
    if (p == 0)
        p = (int64_t)SL_MIN((uint64_t)16, nodes);
    if (p < 2 || (uint64_t)p > nodes || p > PO_MAX_PARTS)
        return sl_errf(err, errlen, -EINVAL,
                       "%s: pipeline.partitions = %" PRId64 " must be in 2..%" PRIu64 " (at most the %" PRIu64
                       " nodes, at most %u) for an out-of-core link run",
                       o->config, p, SL_MIN(nodes, (uint64_t)PO_MAX_PARTS), nodes, PO_MAX_PARTS);
    const uint64_t pn = (nodes + (uint64_t)p - 1) / (uint64_t)p, part = sl_round_up(2 * pn * d * 4, 4096);
    if (c == 0) {
        uint64_t mem = UINT64_MAX, shm = 0;
        struct cgroup_mem g;
        char msg[1024];
        if (cgroup_mem_read(&g, msg, sizeof msg) == 0 && g.limit != CGROUP_NONE)
            mem = g.limit;
        else if (layout_memory(&mem, &shm, msg, sizeof msg) != 0)
            mem = 8ull << 30;
        uint64_t fit = mem / 2 / part;
        c = fit < 1 ? 0 : (int64_t)SL_MIN(fit - 1, (uint64_t)p);
        if (c < 2) {
            char b1[32], b2[32];
            return sl_errf(err, errlen, -ENOMEM,
                           "%s: with pipeline.partitions = %" PRId64 " a partition takes %s, and half of the memory "
                           "(%s) holds fewer than 3 (two buffer partitions and a spare); raise pipeline.partitions",
                           o->config, p, sl_fmt_bytes(part, b1, sizeof b1), sl_fmt_bytes(mem / 2, b2, sizeof b2));
        }
    }
    if (c < 2 || c > p)
        return sl_errf(err, errlen, -EINVAL,
                       "%s: pipeline.buffer_partitions = %" PRId64 " must be in 2..%" PRId64
                       " (pipeline.partitions) for an out-of-core link run: every state holds a pair of partitions",
                       o->config, c, p);
    r->ooc = true;
    r->parts = (uint32_t)p;
    r->slots = (uint32_t)c;
    l->cfg.pipeline.partitions = p;
    l->cfg.pipeline.buffer_partitions = c;
    /* COMET for the GNN encoder (the config's default order; "beta" may be
     * asked for), BETA for the embeddings alone */
    if (l->cfg.model.encoder == MODEL_ENCODER_NONE)
        l->cfg.pipeline.partition_order = PO_ORDER_BETA;
    r->comet = l->cfg.pipeline.partition_order == PO_ORDER_COMET;
    return 0;
}

static int check_link(struct launch *l, const struct opts *o, char *err, size_t errlen)
{
    const char *kind = model_kind_name(l->cfg.model.kind), *no = NULL;
    if (l->gpus)
        no = "--gpus (it trains on the CPU so far; use --cpu)";
    else if (o->cluster.nodes > 1)
        no = "--nodes (one machine so far)";
    else if (l->cfg.pipeline.ranks > 1)
        no = "pipeline.ranks above 1 (one rank so far)";
    else if (o->predict)
        no = "--predict (the checkpoint's node_emb and rel_emb tensors are the embeddings)";
    else if (config_given(&l->cfg, "train.early_stop_metric") && l->cfg.train.early_stop_metric != EARLY_STOP_VALID_MRR)
        no = "train.early_stop_metric other than \"valid_mrr\" (it has no val_acc or val_loss: early stopping and "
             "best.safetensors follow the validation MRR; drop the key or set \"valid_mrr\")";
    else if (l->cfg.pipeline.mode == PIPELINE_PACKED)
        no = "pipeline.mode = \"packed\" (no batches to sample ahead; \"partitions\" keeps the node table out of core)";
    else if (l->cfg.model.encoder == MODEL_ENCODER_SAGE &&
             (l->cfg.model.dropout != 0 && config_given(&l->cfg, "model.dropout")))
        no = "model.dropout with model.encoder = \"sage\" (the encoder trains without dropout; drop the key)";
    else if (l->cfg.model.encoder == MODEL_ENCODER_SAGE && l->cfg.model.input_dropout != 0)
        no = "model.input_dropout with model.encoder = \"sage\" (the encoder's input is the learnt embeddings)";
    else if (l->cfg.pipeline.mode == PIPELINE_PARTITIONS && config_given(&l->cfg, "pipeline.partition_order") &&
             l->cfg.pipeline.partition_order != PO_ORDER_BETA && l->cfg.model.encoder == MODEL_ENCODER_NONE)
        no = "pipeline.partition_order other than \"beta\" without a GNN encoder (COMET orders the partitions of "
             "model.encoder = \"sage\", whose neighbourhoods stay in the buffer; the embeddings alone go in BETA's "
             "order)";
    /* the GNN trainer's optimizer keys: a link run trains with Adagrad at
     * train.lr, and a key it would ignore must not change the run silently */
    else if (config_given(&l->cfg, "train.optimizer") || l->cfg.train.weight_decay != 0)
        no = "train.optimizer or train.weight_decay (it trains with Adagrad at train.lr)";
    else if (l->cfg.train.lr_schedule != LR_CONSTANT || l->cfg.train.warmup_steps != 0)
        no = "train.lr_schedule or train.warmup_steps (a constant train.lr)";
    else if (l->cfg.train.grad_clip != 0)
        no = "train.grad_clip";
    else if (l->cfg.train.on_nonfinite != CONFIG_NONFINITE_FAIL)
        no = "train.on_nonfinite = \"skip-batch\" (a non-finite loss stops the run)";
    else if (o->metrics_csv || o->trace)
        no = "--metrics-csv or --trace (--metrics and --tensorboard carry the epoch numbers)";
    if (no)
        return sl_errf(err, errlen, -EINVAL, "%s: model.kind = \"%s\" (link prediction, docs/link.md) does not take %s",
                       o->config, kind, no);
    /* the batch's row count is 32-bit (ops/kge.h): heads, tails, relations
     * and the chunks' negatives */
    uint64_t b = (uint64_t)l->cfg.train.batch_size, chunk = l->cfg.link.sides == LINK_SIDES_KEY_PYG ? 1 : (uint64_t)l->cfg.link.chunk;
    uint64_t negs = l->cfg.link.sides == LINK_SIDES_KEY_PYG ? 1 : (uint64_t)l->cfg.link.negatives;
    if (3 * b + (b + chunk - 1) / chunk * negs > UINT32_MAX)
        return sl_errf(err, errlen, -EINVAL,
                       "%s: train.batch_size = %" PRIu64 " with link.chunk = %" PRIu64 " and link.negatives = %" PRIu64
                       " gathers more than 2^32 rows a batch; lower them",
                       o->config, b, chunk, negs);
    char msg[2048], real[PATH_MAX];
    struct launch_link *r = &l->link_run;
    int rc = link_meta_read(l->cfg.dataset.path, &r->meta, true, msg, sizeof msg);
    if (rc == -EMEDIUMTYPE)
        return sl_errf(err, errlen, rc, "model.kind = \"%s\" needs a link-prediction dataset, but dataset.path = "
                       "\"%s\" (from %s) holds a node-classification one: %s", kind, l->cfg.dataset.path, o->config, msg);
    if (rc)
        return sl_errf(err, errlen, rc, "dataset.path = \"%s\" (from %s): %s", l->cfg.dataset.path, o->config, msg);
    if (l->cfg.train.early_stop_patience > 0 &&
        (!r->meta.split[LINK_VALID].present || r->meta.split[LINK_VALID].rows == 0))
        return sl_errf(err, errlen, -EINVAL,
                       "%s: train.early_stop_patience = %" PRId64 " follows the validation MRR, but %s has no "
                       "validation triples; remove the patience, or import the dataset with a validation split",
                       o->config, l->cfg.train.early_stop_patience, l->cfg.dataset.path);
    if (!realpath(l->cfg.dataset.path, real))
        return sl_errf(err, errlen, -errno, "dataset.path = \"%s\": %s", l->cfg.dataset.path, strerror(errno));
    snprintf(l->cfg.dataset.path, sizeof l->cfg.dataset.path, "%s", real);
    /* the tables: embeddings and Adagrad sums of every node and relation */
    uint64_t rows = r->meta.nodes + r->meta.relations, need, mem, shm_free;
    char b1[32], b2[32];
    if (l->cfg.pipeline.mode == PIPELINE_PARTITIONS) {
        if ((rc = check_link_ooc(l, o, err, errlen)) != 0)
            return rc;
        rows = r->meta.relations; /* what stays in memory */
    }
    if (sl_mul_ovf(rows, (uint64_t)l->cfg.model.hidden * 8, &need) || need > (uint64_t)SIZE_MAX / 2)
        return sl_errf(err, errlen, -EINVAL, "%s: %" PRIu64 " nodes and relations of model.hidden = %" PRId64
                       " floats do not fit in memory", o->config, rows, l->cfg.model.hidden);
    if (layout_memory(&mem, &shm_free, msg, sizeof msg) == 0 && need > mem)
        return sl_errf(err, errlen, -ENOMEM,
                       "%s: the embedding tables and their Adagrad sums need %s (%" PRIu64 " nodes and relations x "
                       "model.hidden = %" PRId64 " x 8 bytes) but %s is available; lower model.hidden, or keep the "
                       "node table out of core with pipeline.mode = \"partitions\" (docs/link.md)",
                       o->config, sl_fmt_bytes(need, b1, sizeof b1), rows, l->cfg.model.hidden,
                       sl_fmt_bytes(mem, b2, sizeof b2));
    if (o->metrics &&
        (rc = check_output("--metrics", o->metrics, l->metrics_file, sizeof l->metrics_file, err, errlen)) != 0)
        return rc;
    if (o->tensorboard && (rc = check_tensorboard(o->tensorboard, l->tboard_dir, sizeof l->tboard_dir, err, errlen)) != 0)
        return rc;
    r->metrics_file = l->metrics_file[0] ? l->metrics_file : NULL;
    r->tboard_dir = l->tboard_dir[0] ? l->tboard_dir : NULL;
    if (o->run_name) {
        if ((rc = rundir_name_check(o->run_name, err, errlen)) != 0)
            return rc;
        snprintf(l->run_name, sizeof l->run_name, "%s", o->run_name);
    }
    l->ranks = 1;
    l->link = true;
    l->resume = o->resume || o->resume_from;
    if ((rc = check_checkpoints(l, o, link_meta_identity(&r->meta), err, errlen)) != 0)
        return rc;
    r->cfg = &l->cfg;
    r->config_path = l->config_path;
    r->start_epoch = l->start_epoch;
    return 0;
}

static int check_input(struct launch *l, const struct opts *o, char *err, size_t errlen)
{
    char msg[2048];
    int rc = config_load(&l->cfg, o->config, o->sets, o->nsets, msg, sizeof msg);
    if (rc)
        return sl_errf(err, errlen, rc, "%s", msg);
    if (l->gpus > 0) { /* ranks_per_gpu ranks per GPU, whatever the configuration says */
        int n = l->gpus * l->ranks_per_gpu;
        if (l->cfg.pipeline.ranks != 1 && l->cfg.pipeline.ranks != n) {
            char per[48] = "one per GPU";
            if (l->ranks_per_gpu > 1)
                snprintf(per, sizeof per, "%d per GPU", l->ranks_per_gpu);
            fprintf(stderr,
                    "gnnlaunch: note: --gpus %d runs %d rank%s, %s; pipeline.ranks = %" PRId64
                    " (%s) applies to --cpu runs\n",
                    l->gpus, n, n == 1 ? "" : "s", per, l->cfg.pipeline.ranks, o->config);
        }
        l->cfg.pipeline.ranks = n;
    }
    if (!realpath(o->config, l->config_path))
        return sl_errf(err, errlen, -errno, "%s: %s", o->config, strerror(errno));
    if (model_kind_is_link(l->cfg.model.kind))
        return check_link(l, o, err, errlen);
    if (o->predict) { /* one pass over the nodes, nothing trained, nothing checkpointed */
        if (o->cluster.nodes > 1)
            return sl_errf(err, errlen, -EINVAL, "--predict runs on one node; drop --nodes (or its environment "
                           "variables) for it");
        l->cfg.train.epochs = 1;
        l->cfg.train.early_stop_patience = 0;
    }
    if (l->cfg.train.early_stop_metric == EARLY_STOP_VALID_MRR)
        return sl_errf(err, errlen, -EINVAL,
                       "%s: train.early_stop_metric = \"valid_mrr\" is link prediction's (model.kind = \"distmult\" or "
                       "\"complex\"); a node-classification run follows \"val_acc\" or \"val_loss\"",
                       o->config);
    if (l->cfg.train.early_stop_patience > 0 && o->cluster.nodes > 1)
        return sl_errf(err, errlen, -EINVAL,
                       "%s: train.early_stop_patience = %" PRId64 " works on one node only (each node's launcher "
                       "would stop on its own); set it to 0 for --nodes %ld, or train on one node",
                       o->config, l->cfg.train.early_stop_patience, o->cluster.nodes);
    struct dataset_meta meta;
    rc = dataset_meta_read(l->cfg.dataset.path, &meta, true, msg, sizeof msg);
    if (rc == 0) /* a split without a labelled node: nothing to train on, or an accuracy of nan */
        rc = dataset_check_labelled(l->cfg.dataset.path, &meta, msg, sizeof msg);
    if (rc == -EMEDIUMTYPE)
        return sl_errf(err, errlen, rc,
                       "dataset.path = \"%s\" (from %s): %s; or train link prediction on it with model.kind = "
                       "\"distmult\" or \"complex\" (docs/link.md)",
                       l->cfg.dataset.path, o->config, msg);
    if (rc)
        return sl_errf(err, errlen, rc, "dataset.path = \"%s\" (from %s): %s", l->cfg.dataset.path, o->config, msg);
    uint32_t used = 0; /* classes = 1000 with 8 labels used: a model with 992 outputs that never train */
    if (dataset_labels_used(l->cfg.dataset.path, &meta, LABELS_SCAN_MAX, &used, msg, sizeof msg) == 1 &&
        used < meta.classes)
        fprintf(stderr,
                "gnnlaunch: warning: %s/dataset.toml says classes = %" PRIu32 " but labels.bin uses only %" PRIu32
                " (0..%" PRId64 "): the model gets %" PRIu32 " outputs that never train; check classes\n",
                l->cfg.dataset.path, meta.classes, used, (int64_t)used - 1, meta.classes - used);
    char real[PATH_MAX];
    if (!realpath(l->cfg.dataset.path, real))
        return sl_errf(err, errlen, -errno, "dataset.path = \"%s\": %s", l->cfg.dataset.path, strerror(errno));
    snprintf(l->cfg.dataset.path, sizeof l->cfg.dataset.path, "%s", real); /* stages need not share our cwd */
    l->ranks = (int)l->cfg.pipeline.ranks;
    uint64_t world = (uint64_t)l->ranks * (uint64_t)(o->cluster.nodes > 1 ? o->cluster.nodes : 1);
    if (!o->predict && meta.f[DATASET_TRAIN].rows < world) /* a rank without a training batch cannot step in time */
        return sl_errf(err, errlen, -EINVAL,
                       "dataset.path = \"%s\" (from %s): the training split has %" PRIu64 " nodes, fewer than the %" PRIu64
                       " ranks of the run (every rank trains on its share of it); use at most %" PRIu64 " ranks",
                       l->cfg.dataset.path, o->config, meta.f[DATASET_TRAIN].rows, world, meta.f[DATASET_TRAIN].rows);
    if (o->predict)
        l->cfg.pipeline.mode = PIPELINE_ONLINE; /* a prediction samples its own pass over the nodes */
    if (l->cfg.pipeline.mode == PIPELINE_PACKED && (rc = check_pack(l, o, &meta, err, errlen)) != 0)
        return rc;
    if (l->cfg.pipeline.mode == PIPELINE_PARTITIONS && (rc = check_partitions(l, o, &meta, err, errlen)) != 0)
        return rc;
    if ((rc = run_arena_plan(&l->cfg, &meta, &l->arena, msg, sizeof msg)) != 0)
        return sl_errf(err, errlen, rc, "%s: %s", o->config, msg);
    uint64_t mem, shm_free;
    if (layout_memory(&mem, &shm_free, msg, sizeof msg) != 0)
        fprintf(stderr, "gnnlaunch: warning: %s; the batch arenas' size is checked only against what was read\n", msg);
    if ((rc = layout_arena_check(&l->arena, l->ranks, mem, shm_free, msg, sizeof msg)) != 0)
        return sl_errf(err, errlen, rc, "%s: %s", o->config, msg);
    size_t floats = trainer_reduce_floats(&l->cfg, &meta, msg, sizeof msg);
    if (floats == 0)
        return sl_errf(err, errlen, -EINVAL, "%s: %s", o->config, msg);
    l->reduce_floats = l->ranks > 1 ? floats : 0; /* one rank needs no all-reduce */
    if ((rc = layout_featbuf_plan(&l->cfg, &meta, &l->arena, &l->featbuf, msg, sizeof msg)) != 0)
        return sl_errf(err, errlen, rc, "%s: %s", o->config, msg);
    layout_featbuf_use_device(&l->featbuf, l->gpus > 0); /* GPU ranks: rows on the device, metadata here */
    struct cgroup_mem cg; /* the limit: sizes what the configuration leaves unset, refuses what it sets too large */
    if (cgroup_mem_read(&cg, msg, sizeof msg) != 0)
        fprintf(stderr, "gnnlaunch: warning: %s; the memory limit is MemAvailable alone\n", msg);
    uint64_t pack_mem = 0; /* per rank */
    if (l->cfg.pipeline.mode == PIPELINE_PACKED)
        pack_mem = l->pack_mem + (uint64_t)l->cfg.pipeline.samplers * pack_round(l->arena.params.slot_size);
    if ((rc = memfit_plan_make(&l->mem, &l->cfg, &meta, &l->arena, &l->featbuf,
                               l->cfg.pipeline.mode == PIPELINE_PARTITIONS ? &l->parts : NULL, pack_mem, &cg, l->ranks,
                               l->gpus > 0, mem, shm_free, msg, sizeof msg)) != 0) {
        /* keys beyond half of MemAvailable or /dev/shm: the older rule's message, which names that */
        if (rc == -ENOMEM)
            layout_featbuf_check(&l->featbuf, &l->arena, l->ranks, mem, shm_free, msg, sizeof msg);
        return sl_errf(err, errlen, rc, "%s: %s", o->config, msg);
    }
    if ((rc = layout_warm_check(&l->cfg, &l->featbuf, l->gpus > 0, msg, sizeof msg)) != 0)
        return sl_errf(err, errlen, rc, "%s: %s", o->config, msg);
    if (l->cfg.pipeline.mode == PIPELINE_PACKED) { /* the hot tier must fit the buffer's pins as the plan made it */
        struct pack_manifest pm;
        if ((rc = pack_manifest_read(l->cfg.pipeline.pack, &pm, msg, sizeof msg)) != 0)
            return sl_errf(err, errlen, rc, "pipeline.pack: %s", msg);
        if (pm.hot_rows > l->featbuf.params.pin_slots) {
            uint64_t need = ((pm.hot_rows + l->featbuf.reserve) * l->featbuf.stride + (1ull << 20) - 1) >> 20;
            return sl_errf(err, errlen, -EINVAL,
                           "%s: the pack's hot tier holds %" PRIu64 " rows, but pipeline.feature_buffer_mb = %" PRId64
                           " leaves room to pin %" PRIu32 " beside the extraction reserve; set "
                           "pipeline.feature_buffer_mb to at least %" PRIu64
                           " (the pack was made for that), or make the pack again with this buffer",
                           o->config, pm.hot_rows, l->cfg.pipeline.feature_buffer_mb, l->featbuf.params.pin_slots, need);
        }
    }
    memfit_plan_describe(&l->mem, &l->cfg, msg, sizeof msg);
    fprintf(stderr, "gnnlaunch: %s\n", msg);
    if ((rc = layout_featbuf_check(&l->featbuf, &l->arena, l->ranks, mem, shm_free, msg, sizeof msg)) != 0)
        return sl_errf(err, errlen, rc, "%s: %s", o->config, msg);
    if (o->metrics &&
        (rc = check_output("--metrics", o->metrics, l->metrics_file, sizeof l->metrics_file, err, errlen)) != 0)
        return rc;
    if (o->trace && (rc = check_output("--trace", o->trace, l->trace_file, sizeof l->trace_file, err, errlen)) != 0)
        return rc;
    if (o->metrics_csv &&
        (rc = check_output("--metrics-csv", o->metrics_csv, l->csv_file, sizeof l->csv_file, err, errlen)) != 0)
        return rc;
    if (o->tensorboard && (rc = check_tensorboard(o->tensorboard, l->tboard_dir, sizeof l->tboard_dir, err, errlen)) != 0)
        return rc;
    if (o->run_name) {
        if ((rc = rundir_name_check(o->run_name, err, errlen)) != 0)
            return rc;
        snprintf(l->run_name, sizeof l->run_name, "%s", o->run_name);
    }
    l->resume = o->resume || o->resume_from;
    /* the dataset's contents, after the cheap checks (unless a check of
     * the same files was recorded, verify.c) and before the checkpoint
     * to resume from is chosen */
    if ((rc = launch_verify_dataset(l, l->cfg.dataset.path, &meta, o->skip_verify, msg, sizeof msg)) != 0)
        return sl_errf(err, errlen, rc, "dataset.path = \"%s\" (from %s): %s", l->cfg.dataset.path, o->config, msg);
    if ((rc = spawn_stage_dir(l->stage_dir, sizeof l->stage_dir, err, errlen)) != 0)
        return rc;
    if ((rc = spawn_check_programs(l->stage_dir, err, errlen)) != 0)
        return rc;
    char gpu_trainer[PATH_MAX];
    l->gpu_trainer = sl_path_join(gpu_trainer, sizeof gpu_trainer, l->stage_dir, RUN_TRAINER_GPU_PROGRAM) == 0 &&
                     access(gpu_trainer, X_OK) == 0;
    l->meta = meta;
    if (o->predict)
        return check_predict(l, o, err, errlen); /* last: it creates the partial output */
    return check_checkpoints(l, o, dataset_meta_identity(&meta), err, errlen); /* last: it moves files */
}

/* --gpus N: which GPU each rank uses, found by a child process (the
 * launcher never initialises CUDA: gpu/device.h). First of the checks,
 * so that a machine without a usable GPU says so whatever else is wrong;
 * before any thread. */
static int check_gpus(struct launch *l, char *err, size_t errlen)
{
    char msg[1024];
    int rc = device_probe_run(&l->gpu_probe, msg, sizeof msg);
    if (rc)
        return sl_errf(err, errlen, rc, "--gpus %d: %s", l->gpus, msg);
    rc = device_plan_make(l->gpus, &l->gpu_probe, getenv("CUDA_VISIBLE_DEVICES"), &l->gpu_plan, err, errlen);
    if (rc == 0)
        device_plan_share(&l->gpu_plan, l->ranks_per_gpu);
    return rc;
}

/* The GPU each rank got, once every check passed. */
static void report_gpus(const struct launch *l)
{
    char line[2048];
    if (l->gpu_probe.fake)
        fprintf(stderr, "gnnlaunch: warning: SLUICE_FAKE_GPUS is set: %d made-up GPUs (a setting for tests)\n",
                l->gpu_probe.count);
    device_plan_describe(&l->gpu_plan, &l->gpu_probe, getenv("CUDA_VISIBLE_DEVICES"), line, sizeof line);
    fprintf(stderr, "gnnlaunch: --gpus %d: %s\n", l->gpus, line);
    if (l->ranks_per_gpu > 1)
        fprintf(stderr,
                "gnnlaunch: --ranks-per-gpu %d: the ranks that share a GPU join NCCL as if on hosts of their own (each "
                "trainer gets its own NCCL_HOSTID, with NCCL_P2P_DISABLE=1 and NCCL_SHM_DISABLE=1) and sum through "
                "its socket transport: for testing several ranks on one GPU, slower than one rank per GPU\n",
                l->ranks_per_gpu);
}

/* --ranks-per-gpu K > 1: the environment of a trainer whose GPU other
 * ranks share. NCCL refuses two ranks of one communicator on one GPU of
 * one host, so each trainer says it is a host of its own (NCCL_HOSTID,
 * unique per global rank of the run) and turns off the transports that
 * need a real shared host (peer-to-peer, shared memory): the ranks sum
 * through NCCL's socket transport, on the loopback interface on one node
 * (unless NCCL_SOCKET_IFNAME says otherwise), InfiniBand off there (unless
 * NCCL_IB_DISABLE or NCCL_NET is set: a machine with IB cards would
 * otherwise take them for the "network" between the ranks). The launcher's environment
 * otherwise, with any NCCL_HOSTID / _P2P_DISABLE / _SHM_DISABLE of it
 * replaced. NULL when out of memory; free with shared_gpu_env_free. */
static char **shared_gpu_env(const struct launch *l, int global_rank)
{
    static const char *const ours[] = {"NCCL_HOSTID=", "NCCL_P2P_DISABLE=", "NCCL_SHM_DISABLE="};
    bool one_node = !(l->cl.on && l->cl.nodes > 1);
    size_t n = 0;
    while (environ[n])
        n++;
    char **env = calloc(n + 6, sizeof *env);
    if (!env)
        return NULL;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        bool replaced = false;
        for (size_t j = 0; j < SL_ARRAY_LEN(ours); j++)
            replaced |= !strncmp(environ[i], ours[j], strlen(ours[j]));
        if (!replaced)
            env[k++] = environ[i];
    }
    char *mine = malloc(512);
    if (!mine) {
        free(env);
        return NULL;
    }
    /* one block: the three (four) strings we own, env[k..] pointing into it */
    int o = snprintf(mine, 512, "NCCL_HOSTID=sluice-%s-rank%d", l->run_id, global_rank) + 1;
    env[k++] = mine;
    env[k++] = mine + o;
    o += snprintf(mine + o, (size_t)(512 - o), "NCCL_P2P_DISABLE=1") + 1;
    env[k++] = mine + o;
    o += snprintf(mine + o, (size_t)(512 - o), "NCCL_SHM_DISABLE=1") + 1;
    if (one_node && !getenv("NCCL_SOCKET_IFNAME")) {
        env[k++] = mine + o;
        o += snprintf(mine + o, (size_t)(512 - o), "NCCL_SOCKET_IFNAME=lo") + 1;
    }
    if (one_node && !getenv("NCCL_IB_DISABLE") && !getenv("NCCL_NET")) { /* the socket transport, not InfiniBand */
        env[k++] = mine + o;
        snprintf(mine + o, (size_t)(512 - o), "NCCL_IB_DISABLE=1");
    }
    env[k] = NULL;
    return env;
}

static void shared_gpu_env_free(char **env)
{
    if (!env)
        return;
    for (size_t i = 0; env[i]; i++)
        if (!strncmp(env[i], "NCCL_HOSTID=sluice-", 19)) { /* the start of our block */
            free(env[i]);
            break;
        }
    free(env);
}

/* A run of more than one GPU in all: node 0 makes the NCCL unique id in a
 * helper that keeps NCCL's bootstrap root alive until teardown; the other
 * nodes get it in the rendezvous (cluster_join). Before any thread. */
static int make_nccl_id(struct launch *l, char *err, size_t errlen)
{
    uint64_t world = (uint64_t)l->ranks * (l->cl.on ? l->cl.nodes : 1);
    if (l->gpus == 0 || world < 2 || (l->cl.on && l->cl.node != 0))
        return 0;
    char msg[1024];
    int rc = device_nccl_root_start(&l->nccl, msg, sizeof msg);
    if (rc)
        return sl_errf(err, errlen, rc, "--gpus %d: %s", l->gpus, msg);
    memcpy(l->nccl_id, l->nccl.id, sizeof l->nccl_id);
    l->has_nccl_id = true;
    char hex[2 * RUN_NCCL_ID_BYTES + 1], where[96] = "";
    sl_hex(l->nccl_id, sizeof l->nccl_id, hex);
    if (l->nccl.pid > 0)
        snprintf(where, sizeof where, "; its bootstrap root lives in helper pid %ld until the run ends",
                 (long)l->nccl.pid);
    fprintf(stderr, "gnnlaunch: NCCL unique id %.16s... made for %" PRIu64 " GPUs%s\n", hex, world, where);
    return 0;
}

/* ---- the run ---------------------------------------------------------------------------- */

/* Removes what the run created. Idempotent; also the exit handler, so an
 * exit() anywhere (ZMQ_CHECK) leaves nothing behind. */
static void teardown(void)
{
    struct launch *l = &g_run;
    if (g_cleaned)
        return;
    g_cleaned = true;
    for (int i = 0; i < l->nchildren; i++)
        spawn_signal(&l->children[i], SIGKILL); /* only children still running: an early exit */
    for (int i = 0; i < l->nchildren; i++)
        spawn_wait(&l->children[i]);
    device_nccl_root_stop(&l->nccl); /* every rank has joined or is gone */
    if (!l->cl.end_sent) /* an early exit: the other nodes stop too */
        cluster_abort(&l->cl, l->cause[0] ? l->cause : "its launcher exited during setup");
    cluster_free(&l->cl);
    control_close(&l->ctl);
    layout_free(&l->layout);
    if (l->run_id[0])
        shm_run_unlink(l->run_id);
    rundir_remove(&l->dir);
    launch_predict_abandon(&l->predict); /* a prediction that did not finish leaves nothing */
    if (l->sigfd >= 0)
        close(l->sigfd);
    if (l->devnull >= 0)
        close(l->devnull);
    free(l->children);
    l->children = NULL;
    l->nchildren = 0;
    ckptdir_free(&l->ckd); /* every stage is gone: no checkpoint is being written */
}

/* Blocks the signals the supervisor reads through a signalfd. Must run
 * before any thread exists (libzmq starts some), so no thread can take a
 * process-directed SIGINT with its default action. */
/* The main thread's id: the signals the signalfd reads are blocked there,
 * but threads that libraries started before main (OpenBLAS starts one as
 * it loads) do not block them, and the kernel delivers a process-directed
 * signal to such a thread: with the default action SIGINT or SIGTERM then
 * killed the launcher silently (no message, no LEAVE for the other nodes,
 * no teardown) and a SIGCHLD was lost. This handler, run by whichever
 * thread gets one, hands it to the main thread, where it stays pending
 * (blocked) for the signalfd. */
static pid_t g_main_tid;

static void forward_to_main(int sig)
{
    int e = errno;
    syscall(SYS_tgkill, getpid(), g_main_tid, sig);
    errno = e;
}

static int setup_signals(struct launch *l, char *err, size_t errlen)
{
    struct sigaction old;
    sigaction(SIGHUP, NULL, &old);
    l->watch_hup = old.sa_handler != SIG_IGN; /* under nohup, hang-ups stay ignored */
    g_main_tid = (pid_t)syscall(SYS_gettid);
    struct sigaction fwd = {.sa_handler = forward_to_main, .sa_flags = SA_RESTART};
    sigfillset(&fwd.sa_mask);
    sigaction(SIGINT, &fwd, NULL);
    sigaction(SIGTERM, &fwd, NULL);
    sigaction(SIGCHLD, &fwd, NULL);
    if (l->watch_hup)
        sigaction(SIGHUP, &fwd, NULL);
    signal(SIGPIPE, SIG_IGN); /* a closed stderr must not kill the supervisor; stages get SIG_DFL back */
    /* a file-size limit (ulimit -f) makes a write fail with EFBIG, which
     * every writer reports, instead of killing the process; ignored, it
     * stays ignored in the stages across exec (a checkpoint that does not
     * fit is then an error naming the file, docs/checkpoints.md) */
    signal(SIGXFSZ, SIG_IGN);
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGCHLD);
    if (l->watch_hup)
        sigaddset(&set, SIGHUP);
    if (sigprocmask(SIG_BLOCK, &set, NULL) != 0)
        return sl_errf(err, errlen, -errno, "sigprocmask: %s", strerror(errno));
    l->sigfd = signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
    if (l->sigfd < 0)
        return sl_errf(err, errlen, -errno, "signalfd: %s", strerror(errno));
    l->devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
    return 0;
}

/* Reclaims what dead runs left, then makes the run id, run directory and
 * shared memory. */
static int create_run(struct launch *l, char *err, size_t errlen)
{
    char msg[1024];
    int n = shm_run_reclaim(NULL, NULL, NULL, msg, sizeof msg);
    if (n < 0)
        fprintf(stderr, "gnnlaunch: warning: %s\n", msg);
    else if (n > 0)
        fprintf(stderr, "gnnlaunch: removed %d shared-memory segment%s left by dead runs\n", n, n == 1 ? "" : "s");
    char base[PATH_MAX];
    int rc = rundir_base(base, sizeof base, err, errlen);
    if (rc)
        return rc;
    int nd = rundir_reclaim(base);
    if (nd > 0)
        fprintf(stderr, "gnnlaunch: removed %d run director%s left by dead runs in %s\n", nd, nd == 1 ? "y" : "ies",
                base);

    if ((rc = shm_run_id_new(l->run_id, sizeof l->run_id)) != 0)
        return sl_errf(err, errlen, rc, "cannot make a run id");
    uint64_t start = 0;
    shm_pid_start_time(getpid(), &start);
    struct rundir_state st = {
        .run_id = l->run_id,
        .name = l->run_name[0] ? l->run_name : l->run_id,
        .pid = getpid(),
        .pid_start = start,
        .config_path = l->config_path,
        .metrics_file = l->metrics_file[0] ? l->metrics_file : NULL,
        .trace_file = l->trace_file[0] ? l->trace_file : NULL,
        .ranks = l->ranks,
        .resume = l->resume,
    };
    if ((rc = rundir_create(&l->dir, base, st.name, &st, &l->cfg, err, errlen)) != 0)
        return rc;
    if ((rc = launch_write_stamp(l, err, errlen)) != 0) /* what gnn-trainer compares the dataset with */
        return rc;
    if (l->predict.which != RUN_PREDICT_NONE) { /* where the trainers find the checkpoint and the outputs */
        char path[PATH_MAX + 16];
        snprintf(path, sizeof path, "%s/" PREDICT_RUN_FILE, l->dir.path);
        if ((rc = predict_write_run_file(path, l->predict.ckpt, l->predict.tmp, err, errlen)) != 0)
            return rc;
    }
    if ((rc = layout_create(&l->layout, l->run_id, &l->cfg, l->ranks,
                            &(struct layout_objects){.arena = &l->arena.params,
                                                     .featbuf = &l->featbuf.params,
                                                     .allreduce_floats = l->reduce_floats,
                                                     .epochs = (uint64_t)l->cfg.train.epochs},
                            err, errlen)) != 0)
        return rc;
    /* A resumed run's trainers publish epochs from start_epoch on: the
     * epochs before it count as read, else a trainer publishing epoch e >=
     * RESULTS_WINDOW waits for the reader to pass e - RESULTS_WINDOW, an
     * epoch this run never prints (a run resumed past epoch 64 hung). */
    if (l->start_epoch > 0)
        results_consume(&l->layout.results, l->start_epoch - 1);
    char slot[32], rank[32], all[32];
    const struct run_arena_plan *a = &l->arena;
    fprintf(stderr,
            "gnnlaunch: batch arena per rank: %" PRIu32
            " slots x %s = %s (%d rank%s: %s); a batch holds at most %" PRIu64 " nodes\n",
            a->params.nslots, sl_fmt_bytes(a->params.slot_size, slot, sizeof slot),
            sl_fmt_bytes(a->rank_bytes, rank, sizeof rank), l->ranks, l->ranks == 1 ? "" : "s",
            sl_fmt_bytes(a->rank_bytes * (uint64_t)l->ranks, all, sizeof all), a->batch.n_max[a->shape.layers]);
    const struct layout_featbuf_plan *f = &l->featbuf;
    char map[32], dev[96] = "";
    if (f->params.rows_on_device) { /* the segment is the slot table; the rows are device memory */
        char rows[32];
        snprintf(dev, sizeof dev, "%s of rows on the GPU, here ",
                 sl_fmt_bytes((uint64_t)f->params.nslots * f->stride, rows, sizeof rows));
    }
    fprintf(stderr,
            "gnnlaunch: feature buffer per rank: %" PRIu32 " slots x %" PRIu64 " B = %s%s (node map %s), at least %" PRIu64
            " slots needed; staging at most %s per extractor thread (pipeline.io_depth reads)\n",
            f->params.nslots, f->stride, dev, sl_fmt_bytes(f->rank_bytes, rank, sizeof rank),
            sl_fmt_bytes(featbuf_map_bytes(&f->params), map, sizeof map), f->reserve,
            sl_fmt_bytes(f->staging_used, all, sizeof all));
    if (f->params.policy != FEATBUF_POLICY_LRU || f->params.pin_slots) {
        char region[32];
        uint64_t covers = f->params.hint_entries / SL_MAX(a->batch.n_max[a->shape.layers], 1);
        fprintf(stderr,
                "gnnlaunch: cache policy %s%s: %" PRIu32 " slots pinned to the hot set; window %" PRIu32
                " batches, hint log %" PRIu64 " rows (%s with its node table, in the buffer above; room for %" PRIu64
                " worst-case batches)\n",
                cache_policy_name(l->cfg.pipeline.cache_policy),
                l->cfg.pipeline.cache_policy == CACHE_POLICY_AUTO ? " (lookahead: the features do not fit the buffer)" : "",
                f->params.pin_slots, f->params.window,
                f->params.hint_entries,
                sl_fmt_bytes(f->params.window ? f->params.hint_entries * 12 + f->params.n_nodes * 4 : 0, region,
                             sizeof region),
                covers);
    }
    return 0;
}

/* Starts the four stages of every rank. A failure stops the run. */
static void start_stages(struct launch *l)
{
    l->children = calloc((size_t)l->ranks * RUN_STAGES, sizeof *l->children);
    if (!l->children) {
        launch_stop(l, LAUNCH_FAILED, "out of memory for the process table");
        return;
    }
    char config[PATH_MAX];
    rundir_file(&l->dir, RUNDIR_CONFIG, config, sizeof config);
    for (int r = 0; r < l->ranks; r++)
        for (int s = 0; s < RUN_STAGES; s++) {
            struct spawn_child *c = &l->children[l->nchildren];
            c->stage = (enum run_stage)s;
            c->rank = r;
            struct run_args a = {.stage = c->stage,
                                 .rank = r,
                                 .ranks = l->ranks,
                                 .metrics_block = run_block(r, c->stage),
                                 .start_epoch = l->start_epoch,
                                 .resume = l->resume,
                                 .trace = l->trace_file[0] != '\0',
                                 .predict = l->predict.which,
                                 .node = l->cl.on ? (int)l->cl.node : 0,
                                 .nodes = l->cl.on ? (int)l->cl.nodes : 1,
                                 .device = l->gpus ? device_of_rank(&l->gpu_plan, r) : -1,
                                 .has_nccl_id = l->has_nccl_id && c->stage == RUN_TRAINER};
            if (a.has_nccl_id)
                memcpy(a.nccl_id, l->nccl_id, sizeof a.nccl_id);
            snprintf(a.run_id, sizeof a.run_id, "%s", l->run_id);
            snprintf(a.run_dir, sizeof a.run_dir, "%s", l->dir.path);
            snprintf(a.config, sizeof a.config, "%s", config);
            char buf[3 * PATH_MAX + RUN_ARGV_SLACK], path[PATH_MAX], err[1024];
            char *argv[RUN_ARGV_MAX];
            int rc = run_args_build(&a, buf, sizeof buf, argv, RUN_ARGV_MAX, err, sizeof err);
            /* a GPU rank's trainer: the CUDA build of it where there is one
             * (else gnn-trainer, which refuses a --device it cannot serve) */
            const char *prog = c->stage == RUN_TRAINER && a.device >= 0 && l->gpu_trainer ? RUN_TRAINER_GPU_PROGRAM
                                                                                    : run_stage_program(c->stage);
            if (rc == 0 && sl_path_join(path, sizeof path, l->stage_dir, prog) != 0)
                rc = sl_errf(err, sizeof err, -ENAMETOOLONG, "stage path too long");
            char **envp = NULL;
            if (rc == 0 && l->ranks_per_gpu > 1 && c->stage == RUN_TRAINER &&
                !(envp = shared_gpu_env(l, (int)run_global_rank(&a))))
                rc = sl_errf(err, sizeof err, -ENOMEM, "out of memory for a trainer's environment");
            if (rc == 0)
                rc = spawn_start(c, path, argv, envp, l->devnull, err, sizeof err);
            shared_gpu_env_free(envp);
            if (rc) {
                char cause[1200];
                snprintf(cause, sizeof cause, "rank %d: %s", r, err);
                launch_stop(l, LAUNCH_FAILED, cause);
                return;
            }
            l->nchildren++;
        }
}

static void report_end(const struct launch *l, int nchildren)
{
    double secs = sl_now() - l->t_start;
    switch (l->outcome) {
    case LAUNCH_OK:
        fprintf(stderr, "gnnlaunch: run %s finished: %d stage processes exited cleanly in %.1f s\n", l->run_id,
                nchildren, secs);
        break;
    case LAUNCH_FAILED:
        fprintf(stderr, "gnnlaunch: run %s failed after %.1f s: %s\n", l->run_id, secs, l->cause);
        break;
    case LAUNCH_STOPPED_EARLY:
        fprintf(stderr, "gnnlaunch: run %s stopped early after %.1f s: %s\n", l->run_id, secs, l->cause);
        break;
    case LAUNCH_INTERRUPTED:
    case LAUNCH_STOP_REQUESTED:
        fprintf(stderr, "gnnlaunch: run %s %s after %.1f s; every stage stopped and its shared memory removed\n",
                l->run_id, l->cause, secs);
        break;
    }
}

/* --metrics and --trace alike: a failed write was warned about when it
 * happened and training went on; at the end it is said once more, and with
 * --strict-outputs a run that otherwise succeeded exits 3. */
static int outputs_verdict(const struct launch *l, int code, bool trace_failed)
{
    char failed[96] = "";
    const struct {
        bool bad;
        const char *flag;
    } outs[] = {{l->prog.metrics.failed, "--metrics"}, {l->prog.csv_failed, "--metrics-csv"},
                {l->prog.tboard_failed, "--tensorboard"}, {trace_failed, "--trace"}};
    for (size_t i = 0; i < SL_ARRAY_LEN(outs); i++)
        if (outs[i].bad)
            snprintf(failed + strlen(failed), sizeof failed - strlen(failed), "%s%s", failed[0] ? ", " : "",
                     outs[i].flag);
    if (!failed[0])
        return code;
    fprintf(stderr, "gnnlaunch: %s: %s could not be written in full (see the warnings above)%s\n",
            l->strict_outputs && code == 0 ? "error" : "warning", failed,
            code != 0                ? ""
            : l->strict_outputs ? "; exit 3 (--strict-outputs)"
                                : "; the training itself completed (--strict-outputs makes this an error)");
    return code == 0 && l->strict_outputs ? 3 : code;
}

int main(int argc, char **argv)
{
    struct opts o;
    int code = parse_args(argc, argv, &o);
    if (code >= 0) {
        free_opts(&o);
        return code;
    }
    struct launch *l = &g_run;
    l->sigfd = l->devnull = -1;
    ckptdir_init(&l->ckd);
    l->strict_outputs = o.strict_outputs;
    char err[4096], prefix[SHM_PREFIX_MAX];
    l->gpus = o.gpus > 0 ? (int)o.gpus : 0;
    l->ranks_per_gpu = o.ranks_per_gpu > 1 ? (int)o.ranks_per_gpu : 1;
    /* the shared-memory namespace first: a bad one is refused before
     * anything is touched (checkpoints moved aside, run directories) */
    int rc = shm_prefix(prefix, err, sizeof err);
    if (rc == 0 && l->gpus)
        rc = check_gpus(l, err, sizeof err);
    if (rc == 0)
        rc = check_input(l, &o, err, sizeof err);
    if (rc == 0)
        rc = cluster_check(&l->cl, &o.cluster, l->ranks, o.run_name, err, sizeof err);
    free_opts(&o);
    if (rc) {
        fprintf(stderr, "gnnlaunch: %s\n", err);
        return EXIT_USAGE;
    }
    if (l->link) { /* in this process: no run, no stages (link.h) */
        struct launch_link_out lo = {0};
        code = launch_link_run(&l->link_run, &lo);
        l->prog.metrics.failed = lo.metrics_failed;
        l->prog.tboard_failed = lo.tboard_failed;
        ckptdir_free(&l->ckd);
        return outputs_verdict(l, code, false);
    }
    if (l->gpus)
        report_gpus(l);
    if (l->cfg.pipeline.mode == PIPELINE_PARTITIONS && (rc = report_partitions(l, err, sizeof err)) != 0) {
        fprintf(stderr, "gnnlaunch: %s\n", err);
        ckptdir_free(&l->ckd);
        return EXIT_USAGE;
    }
    if (l->predict.exact) { /* layer-wise, in this process: no run, no stages */
        double t0 = sl_now();
        fprintf(stderr, "gnnlaunch: --predict --exact: layer-wise inference of all %" PRIu64 " nodes with %s\n",
                l->meta.nodes, l->predict.ckpt);
        int prc = launch_predict_exact(&l->predict, &l->cfg, &l->meta, (int)l->cfg.pipeline.trainer_threads, err,
                                       sizeof err);
        if (prc == 0)
            prc = launch_predict_finish(&l->predict, &l->cfg, &l->meta, true, sl_now() - t0, err, sizeof err);
        if (prc) {
            launch_predict_abandon(&l->predict);
            fprintf(stderr, "gnnlaunch: --predict --exact: %s; nothing was written to %s\n", err, l->predict.out);
            return 3;
        }
        return 0;
    }

    atexit(teardown);
    l->phase = LAUNCH_SETUP;
    l->t_start = sl_now();
    /* the NCCL root's helper forks before any thread exists; several
     * nodes then meet (cluster.h) before creating anything, and node 0's
     * NCCL id travels in the rendezvous */
    if ((rc = make_nccl_id(l, err, sizeof err)) != 0 || (rc = setup_signals(l, err, sizeof err)) != 0 ||
        (rc = cluster_join(&l->cl, &l->cfg, l->start_epoch, l->has_nccl_id ? l->nccl_id : NULL, l->sigfd, l->run_name,
                           sizeof l->run_name, err, sizeof err)) != 0 ||
        (rc = create_run(l, err, sizeof err)) != 0 || (rc = cluster_write(&l->cl, l->dir.path, err, sizeof err)) != 0) {
        fprintf(stderr, "gnnlaunch: cannot set up the run: %s\n", err);
        cluster_abort(&l->cl, err);
        teardown();
        return rc == -EINTR ? 130 : EXIT_USAGE;
    }
    if (l->gpus && cluster_joined(&l->cl) && l->cl.node != 0) {
        memcpy(l->nccl_id, cluster_blob(&l->cl), sizeof l->nccl_id); /* node 0's, from the rendezvous */
        l->has_nccl_id = true;
    }
    control_open(&l->ctl, l->dir.path);
    /* OpenBLAS starts its own threads when it loads; the trainer runs its
     * GEMMs on a pool of its own (ops/ops.c), so keep OpenBLAS to one. A
     * value the user set wins. */
    setenv("OPENBLAS_NUM_THREADS", "1", 0);
    start_stages(l);
    if (l->phase == LAUNCH_SETUP) {
        l->phase = LAUNCH_RUNNING;
        fprintf(stderr, "gnnlaunch: run %s: %d rank%s x %d stages started; run directory %s; control %s\n", l->run_id,
                l->ranks, l->ranks == 1 ? "" : "s", RUN_STAGES, l->dir.path, l->ctl.rep_endpoint);
    }
    code = supervise(l); /* several nodes: until the others finish too */
    if (l->predict.which != RUN_PREDICT_NONE) {
        char msg[2048];
        if (launch_predict_finish(&l->predict, &l->cfg, &l->meta, code == 0, sl_now() - l->t_start, msg,
                                  sizeof msg) != 0) {
            fprintf(stderr, "gnnlaunch: --predict: %s; nothing was written to %s\n", msg, l->predict.out);
            code = 3;
        }
    }
    int nchildren = l->nchildren;
    bool trace_failed = false;
    if (l->trace_file[0] && l->nchildren > 0) {
        char msg[1024];
        if (trace_write(l, msg, sizeof msg) != 0) {
            fprintf(stderr, "gnnlaunch: warning: %s\n", msg);
            trace_failed = true;
        }
    }
    /* Trainers run ahead of the epoch lines (up to the results window): a
     * run that stopped early removes the checkpoints of epochs past the
     * stop (never printed, never validated: not part of the run), so
     * --resume continues from the epoch the run reported. A run that
     * failed or was interrupted keeps them: --resume then loses no
     * trained epoch (docs/checkpoints.md). */
    if (l->prog.stop_early && l->phase != LAUNCH_SETUP && l->cfg.train.checkpoint_dir[0] &&
        (!l->cl.on || l->cl.node == 0) && !l->link && l->predict.which == RUN_PREDICT_NONE) {
        char msg[PATH_MAX + 256];
        uint64_t done = SL_MAX(l->prog.epochs_done, (uint64_t)l->start_epoch); /* never below where it resumed */
        int n = ckptdir_drop_after(l->cfg.train.checkpoint_dir, (uint32_t)done, msg, sizeof msg);
        if (n < 0)
            fprintf(stderr, "gnnlaunch: warning: %s\n", msg);
        else if (n > 0)
            fprintf(stderr,
                    "gnnlaunch: removed the %d checkpoint%s the trainers wrote past the early stop (after epoch %" PRIu64
                    ", the last one printed)\n",
                    n, n == 1 ? "" : "s", done);
    }
    teardown();
    report_end(l, nchildren);
    return outputs_verdict(l, code, trace_failed);
}
