/* npz.c - a zip member as a byte stream, through libarchive (see npz.h). */
#include "npz.h"

#include <archive.h>
#include <archive_entry.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/util.h"

struct npz {
    struct archive *a;
    int64_t size;
    char name[1024]; /* "PATH: MEMBER" for messages */
};

/* libarchive reports damaged input with its own codes (EILSEQ, -1); only
 * memory and device errors are failures of the machine. */
static int arc_rc(struct archive *a)
{
    int e = archive_errno(a);
    switch (e) {
    case ENOMEM:
        return -ENOMEM;
    case EIO:
    case ENOSPC:
    case EMFILE:
    case ENFILE:
        return -e;
    case ENOENT:
        return -ENOENT;
    default:
        return -EBADMSG;
    }
}

static const char *arc_msg(struct archive *a)
{
    const char *s = archive_error_string(a);
    return s ? s : "unknown libarchive error";
}

/* Appends a member name to a bounded, comma-separated list, ending it with
 * "..." once it is full. */
static void list_add(char *list, size_t len, const char *name)
{
    size_t have = strlen(list);
    if (have >= 3 && !strcmp(list + have - 3, "..."))
        return;
    size_t need = strlen(name) + (have ? 2 : 0);
    if (have + need + 6 > len) {
        snprintf(list + have, len - have, "%s...", have ? ", " : "");
        return;
    }
    snprintf(list + have, len - have, "%s%s", have ? ", " : "", name);
}

int npz_open(struct npz **out, const char *path, const char *member, bool optional, char *err, size_t errlen)
{
    *out = NULL;
    struct stat st;
    if (stat(path, &st) < 0)
        return sl_errf(err, errlen, -errno, "%s: cannot open: %s; check the path", path, strerror(errno));
    if (!S_ISREG(st.st_mode))
        return sl_errf(err, errlen, -EINVAL, "%s: not a regular file; expected a .npz (zip) archive", path);
    struct npz *z = calloc(1, sizeof *z);
    if (!z)
        return sl_errf(err, errlen, -ENOMEM, "%s: out of memory", path);
    snprintf(z->name, sizeof z->name, "%s: %s", path, member);
    int rc;
    z->a = archive_read_new();
    if (!z->a) {
        rc = sl_errf(err, errlen, -ENOMEM, "%s: out of memory for the archive reader", path);
        goto fail;
    }
    archive_read_support_format_zip(z->a);
    if (archive_read_open_filename(z->a, path, 1u << 16) != ARCHIVE_OK) {
        rc = arc_rc(z->a);
        sl_errf(err, errlen, rc, "%s: not a valid zip archive (%s); download or re-create it", path,
                arc_msg(z->a));
        goto fail;
    }
    char members[512] = "";
    for (;;) {
        struct archive_entry *e;
        int r = archive_read_next_header(z->a, &e);
        if (r == ARCHIVE_EOF)
            break;
        if (r < ARCHIVE_WARN) {
            rc = arc_rc(z->a);
            sl_errf(err, errlen, rc, "%s: not a valid zip archive (%s); download or re-create it", path,
                    arc_msg(z->a));
            goto fail;
        }
        const char *name = archive_entry_pathname(e);
        if (!name)
            continue;
        if (strcmp(name, member)) {
            list_add(members, sizeof members, name);
            continue;
        }
        if (archive_entry_filetype(e) != AE_IFREG) {
            rc = sl_errf(err, errlen, -EINVAL, "%s: member %s is not a regular file", path, member);
            goto fail;
        }
        z->size = archive_entry_size_is_set(e) ? archive_entry_size(e) : -1;
        *out = z;
        return 0;
    }
    if (optional) {
        npz_close(z);
        return 1;
    }
    rc = sl_errf(err, errlen, -ENOENT, "%s: has no member %s (members: %s); is this the right file?", path, member,
                 members[0] ? members : "none");
fail:
    npz_close(z);
    return rc;
}

int64_t npz_size(const struct npz *z)
{
    return z->size;
}

ssize_t npz_read(struct npz *z, void *buf, size_t n, char *err, size_t errlen)
{
    for (;;) {
        la_ssize_t r = archive_read_data(z->a, buf, n);
        if (r >= 0)
            return (ssize_t)r;
        if (r == ARCHIVE_RETRY)
            continue;
        int rc = arc_rc(z->a);
        return sl_errf(err, errlen, rc, "%s: cannot read the member: %s%s", z->name, arc_msg(z->a),
                       rc == -EBADMSG ? "; the archive is damaged, download or re-create it" : "");
    }
}

void npz_close(struct npz *z)
{
    if (!z)
        return;
    if (z->a)
        archive_read_free(z->a);
    free(z);
}
