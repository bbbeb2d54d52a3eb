/*
 * Read-only memory mapping of a whole file. Loaders parse headers straight
 * from the mapping and hand out tensor views into it, so a checkpoint's
 * weights are paged in by the kernel on first use and never copied.
 */
#ifndef KVLM_MAPPED_FILE_H
#define KVLM_MAPPED_FILE_H

#include <stddef.h>

#include "kvlm.h"

typedef struct mapped_file {
    char *path;
    const unsigned char *data;
    size_t size;
} mapped_file;

/* Maps path; returns 0 or a kvlm_status with err naming the file. */
int mapped_file_open(mapped_file *f, const char *path, kvlm_error *err);
void mapped_file_close(mapped_file *f);

#endif
