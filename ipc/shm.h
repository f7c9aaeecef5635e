/* shm.h - named POSIX shared-memory segments for one Sluice run.
 *
 * Naming. Every segment of a run is called `/sluice.<run-id>.<object>` and
 * lives in /dev/shm as `sluice.<run-id>.<object>`. A run id is made of
 * [A-Za-z0-9_-] (no dots, so the first dot after "sluice." ends it); an
 * object name is made of [A-Za-z0-9_.-]. shm_run_id_new() makes ids of the
 * form `<pid>-<unix-seconds, hex>-<32 random bits, hex>`, e.g.
 * `41873-6650f1c2-9e03b7aa`: the launcher's pid keeps ids of live runs
 * apart, the time and the random part keep them apart across pid reuse.
 *
 * Namespaces. With SLUICE_SHM_NAMESPACE=<ns> in the environment (1 to
 * SHM_NAMESPACE_MAX characters of [A-Za-z0-9_]) every name becomes
 * `/sluice-<ns>.<run-id>.<object>`, and the run-wide operations below
 * (unlink, reclaim) see only the segments of that namespace; unset or
 * empty, the namespace is the default one, `sluice.`. Processes of a run
 * inherit it from the launcher's environment. It keeps independent sets of
 * runs of one user apart: each ctest test has its own (tests/
 * CMakeLists.txt), so one test's launcher never reclaims the segments of a
 * dead run another test is still looking at. A namespace of other
 * characters is refused (-EINVAL, naming the variable) by every call that
 * builds or scans names.
 *
 * Layout. A segment is a header page followed by the payload:
 *
 *     offset 0               struct shm_header (magic, version, kind, sizes,
 *                            creator pid and start time, run id, object)
 *     offset SHM_DATA_OFFSET payload (page aligned, data_size bytes)
 *
 * Protocol. The creator (the launcher, DESIGN.md section 3) makes the file
 * with O_CREAT|O_EXCL and mode 0600, sizes it, maps it, fills the header and
 * stores the magic last with release order; shm_seg_attach() loads the magic
 * with acquire order, so an attacher either sees a complete header or
 * reports the segment as still being created (-EAGAIN). The header is never
 * written again. The payload belongs to whichever module formatted it (ring,
 * arena, metrics page); this file never touches it. Mappings are private to
 * each process and released with shm_seg_detach(); the name is removed with
 * shm_seg_unlink() / shm_run_unlink() by the launcher on every exit path.
 * Memory already mapped stays valid after unlink until it is unmapped.
 * A segment of at least SHM_HUGE_BYTES is mapped at an address that is a
 * multiple of it in every process, so that huge pages of the file
 * (shm_huge) are mapped as such everywhere.
 *
 * Stale runs. shm_run_reclaim() removes the segments whose creator is gone:
 * its pid does not exist, or exists with another start time (pid reuse). A
 * file without a readable header (its creator died between creating and
 * sizing it) is judged by the pid at the start of its run id. Only files
 * owned by the calling user are considered.
 *
 * Errors: 0 or -errno, and a message in `err` (may be NULL) that names the
 * segment and says what to do. */
#ifndef SLUICE_IPC_SHM_H
#define SLUICE_IPC_SHM_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define SHM_DIR "/dev/shm"            /* where glibc's shm_open() keeps segments */
#define SHM_PREFIX "sluice."          /* the default namespace's file names start so */
#define SHM_NAMESPACE_ENV "SLUICE_SHM_NAMESPACE"
#define SHM_NAMESPACE_MAX 24          /* characters of a namespace */
#define SHM_PREFIX_MAX 40             /* bytes of a prefix "sluice-<ns>.", NUL included */
#define SHM_MAGIC 0x31474553434c53ull /* "SLCSEG1\0" little endian */
#define SHM_VERSION 1u
#define SHM_DATA_OFFSET 4096u /* payload offset: page aligned for O_DIRECT */
#define SHM_HUGE_BYTES ((size_t)2 << 20) /* a huge page (x86-64, arm64 with 4 KiB pages) */
#define SHM_RUN_ID_MAX 48     /* bytes, NUL included */
#define SHM_OBJECT_MAX 64     /* bytes, NUL included */
#define SHM_NAME_MAX 128      /* "/sluice.<run>.<object>", NUL included */

/* What a segment holds; checked on attach unless SHM_KIND_ANY is asked. */
enum shm_kind {
    SHM_KIND_ANY = 0, /* only as an argument to shm_seg_attach() */
    SHM_KIND_RAW = 1, /* payload with no Sluice structure (tests, buffers) */
    SHM_KIND_RING = 2,
    SHM_KIND_METRICS = 3,
    SHM_KIND_ARENA = 4,
    SHM_KIND_ALLREDUCE = 5,
    SHM_KIND_FEATBUF = 6,
    SHM_KIND_RESULTS = 7,
    SHM_KIND_STAGING = 8,
    SHM_KIND_MAX_,
};

/* Flags for shm_seg_attach(). */
enum shm_attach_flags {
    SHM_RDONLY = 1u << 0, /* map read-only (gnnstat); writes would fault */
};

/* The header at offset 0 of every segment. Written once by the creator. */
struct shm_header {
    _Atomic uint64_t magic; /* SHM_MAGIC; stored last (release) */
    uint32_t version;       /* SHM_VERSION */
    uint32_t kind;          /* enum shm_kind */
    uint64_t total_size;    /* bytes of the file, header page included */
    uint64_t data_offset;   /* SHM_DATA_OFFSET */
    uint64_t data_size;     /* payload bytes asked for at creation */
    int32_t creator_pid;    /* process that created the segment */
    uint32_t reserved0;
    uint64_t creator_start;   /* its start time in clock ticks after boot (/proc/PID/stat field 22) */
    uint64_t created_unix_ns; /* CLOCK_REALTIME at creation, for humans */
    char run_id[SHM_RUN_ID_MAX];
    char object[SHM_OBJECT_MAX];
};

/* A mapping of one segment in this process. Zero it (or let create/attach
 * fill it) before use; shm_seg_detach() accepts a zeroed one. */
struct shm_seg {
    char name[SHM_NAME_MAX]; /* "/sluice.<run>.<object>" */
    struct shm_header *hdr;  /* mapping base; NULL when not mapped */
    size_t size;             /* bytes mapped (the whole file) */
    void *data;              /* payload, SHM_DATA_OFFSET into the mapping */
    size_t data_size;        /* payload bytes */
    bool readonly;
};

/* Makes a new run id (format above) into out; -ENAMETOOLONG if len is
 * below SHM_RUN_ID_MAX. Never blocks for long (getrandom, non-blocking
 * fallback to the clock). */
int shm_run_id_new(char *out, size_t len);

/* Checks a run id / object name; 0 or -EINVAL with a message. */
int shm_run_id_check(const char *run_id, char *err, size_t errlen);
int shm_object_check(const char *object, char *err, size_t errlen);

/* The file-name prefix of this process's namespace (SLUICE_SHM_NAMESPACE,
 * above) into out (SHM_PREFIX_MAX bytes): "sluice." or "sluice-<ns>.";
 * 0, or -EINVAL with a message (and "sluice." in out) when the variable
 * holds something else. */
int shm_prefix(char out[SHM_PREFIX_MAX], char *err, size_t errlen);

/* Builds "/<prefix><run>.<object>" (prefix: shm_prefix) into out after
 * checking the parts. */
int shm_name(char *out, size_t len, const char *run_id, const char *object, char *err, size_t errlen);

/* Creates and maps a new segment of data_size payload bytes (zero-filled)
 * and fills its header. Fails with -EEXIST if the name is taken (nothing is
 * touched then), -EINVAL on bad names or sizes, or the errno of
 * shm_open/ftruncate/mmap; on failure nothing is left in /dev/shm. */
int shm_seg_create(struct shm_seg *seg, const char *run_id, const char *object, enum shm_kind kind, size_t data_size,
                   char *err, size_t errlen);

/* Maps an existing segment by full name ("/sluice.<run>.<object>") and
 * checks its header: -ENOENT (no such segment), -EAGAIN (still being
 * created), -EPERM (the file belongs to another user), -EINVAL (not a
 * Sluice segment, another version, size or kind mismatch, header naming
 * another segment). flags: enum shm_attach_flags. */
int shm_seg_attach(struct shm_seg *seg, const char *name, enum shm_kind kind, unsigned flags, char *err, size_t errlen);

/* Unmaps (the name stays). Accepts NULL and zeroed or already detached
 * segments; leaves seg zeroed. */
void shm_seg_detach(struct shm_seg *seg);

/* Asks the kernel to back the whole huge pages inside [addr, addr + len)
 * of a writable mapping with huge pages (MADV_COLLAPSE, Linux 6.1; it
 * works on shared memory even where /sys/kernel/mm/transparent_hugepage/
 * shmem_enabled is "never", unless it is "deny"), so that reading rows at
 * random costs one TLB entry per 2 MiB instead of one per 4 KiB. Contents
 * are kept, whoever else maps or writes them meanwhile (the kernel copies
 * under the pages' locks, as its khugepaged does at any time); bytes
 * never written read as zero. A hint: 0 and *huge_bytes (may be NULL) =
 * the bytes of those huge pages when every one was made, else -errno and
 * *huge_bytes = 0 (some may have been made): -EINVAL (no such advice, or
 * huge pages denied), -ENOMEM (none free), -EAGAIN or -EBUSY (a page was
 * in use: worth trying again elsewhere). Costs one call into the kernel
 * per range (each drains every CPU's page lists first) and about as
 * long as zeroing it (copying, for the pages written already); much more
 * where a virtual machine's host first backs that memory. */
int shm_huge(void *addr, size_t len, size_t *huge_bytes);

/* Removes a segment's name: 0, -ENOENT if there was none, or -errno. */
int shm_seg_unlink(const char *name);

/* Removes every segment of one run (launcher teardown, test cleanup).
 * Returns the number removed, or -errno if /dev/shm cannot be read or the
 * namespace is not valid. */
int shm_run_unlink(const char *run_id);

/* Called by shm_run_reclaim() for each segment it removes. */
typedef void (*shm_reclaim_fn)(const char *name, pid_t creator, void *arg);

/* Removes the segments of stale runs (creator gone, see above) of this
 * process's namespace; run_id limits the scan to one run, NULL scans all.
 * Returns the number removed or -errno (message in err) if /dev/shm cannot
 * be read or the namespace is not valid. Segments of live processes, of
 * other users, of other namespaces and files it cannot judge are left
 * alone. */
int shm_run_reclaim(const char *run_id, shm_reclaim_fn fn, void *arg, char *err, size_t errlen);

/* True when process pid exists, is not a zombie and, if start is nonzero,
 * started at that time (clock ticks after boot); used by reclaim and by
 * supervisors. When /proc cannot be read it errs on the side of alive. */
bool shm_pid_alive(pid_t pid, uint64_t start);

/* Start time of pid in clock ticks after boot (/proc/PID/stat field 22);
 * 0 or -errno. */
int shm_pid_start_time(pid_t pid, uint64_t *out);

#endif
