/* Read-only whole-file memory mapping, or a private copy read into memory
 * (see mapped_file.h). */
#include "mapped_file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "error.h"

/* Opens path as a non-empty regular file; its descriptor or a negative status. */
static int open_regular(const char *path, size_t *size, kvlm_error *err) {
    int fd = open(path, O_RDONLY);
    if (fd < 0) return kvlm_error_set(err, KVLM_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return kvlm_error_set(err, KVLM_ERR_IO, "%s: not a regular file", path);
    }
    if (st.st_size == 0) {
        close(fd);
        return kvlm_error_set(err, KVLM_ERR_FORMAT, "%s: file is empty", path);
    }
    *size = (size_t)st.st_size;
    return fd;
}

static int finish(mapped_file *f, void *p, size_t size, const char *path) {
    f->data = p;
    f->size = size;
    f->path = strdup(path);
    return KVLM_OK;
}

int mapped_file_open(mapped_file *f, const char *path, kvlm_error *err) {
    memset(f, 0, sizeof *f);
    size_t size;
    int fd = open_regular(path, &size, err);
    if (fd < 0) return fd;
    void *p = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (p == MAP_FAILED) return kvlm_error_set(err, KVLM_ERR_IO, "%s: mmap failed: %s", path, strerror(errno));
    return finish(f, p, size, path);
}

int mapped_file_read(mapped_file *f, const char *path, kvlm_error *err) {
    memset(f, 0, sizeof *f);
    size_t size;
    int fd = open_regular(path, &size, err);
    if (fd < 0) return fd;
    unsigned char *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        close(fd);
        return kvlm_error_set(err, KVLM_ERR_NOMEM, "%s: out of memory for its %zu bytes", path, size);
    }
    for (size_t at = 0; at < size;) {
        ssize_t n = read(fd, p + at, size - at);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
            int rc = kvlm_error_set(err, KVLM_ERR_IO, "%s: read failed at byte %zu of %zu: %s", path, at, size,
                                    n < 0 ? strerror(errno) : "the file shrank");
            close(fd);
            munmap(p, size);
            return rc;
        }
        at += (size_t)n;
    }
    close(fd);
    mprotect(p, size, PROT_READ); /* the loaders' views are read-only, as over a mapping */
    return finish(f, p, size, path);
}

void mapped_file_close(mapped_file *f) {
    if (f->data) munmap((void *)f->data, f->size);
    free(f->path);
    memset(f, 0, sizeof *f);
}
