/*
 * Read-only memory mapping of a whole file. Loaders parse headers straight
 * from the mapping and hand out tensor views into it, so a checkpoint's
 * weights are paged in by the kernel on first use and never copied.
 * mapped_file_read is the same handle over a private copy of the file
 * (kvlm_model_params.use_mmap 0): anonymous memory filled by read(2), so
 * nothing refers to the file once it returns.
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
/* Reads path into anonymous memory; returns 0 or a kvlm_status with err
 * naming the file (KVLM_ERR_NOMEM when the memory cannot be had). */
int mapped_file_read(mapped_file *f, const char *path, kvlm_error *err);
void mapped_file_close(mapped_file *f);

#endif
