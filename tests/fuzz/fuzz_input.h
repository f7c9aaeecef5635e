/* fuzz_input.h - hands a fuzz input to readers that take a path: the bytes
 * go into an anonymous memory file reached as /proc/self/fd/N. */
#ifndef SLUICE_FUZZ_INPUT_H
#define SLUICE_FUZZ_INPUT_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

/* Writes data to a fresh memfd; fills path; returns the fd (caller closes). */
static inline int fuzz_file(const uint8_t *data, size_t size, char *path, size_t len)
{
    int fd = memfd_create("fuzz", 0);
    if (fd < 0)
        abort();
    size_t off = 0;
    while (off < size) {
        ssize_t w = write(fd, data + off, size - off);
        if (w <= 0)
            abort();
        off += (size_t)w;
    }
    snprintf(path, len, "/proc/self/fd/%d", fd);
    return fd;
}

#endif
