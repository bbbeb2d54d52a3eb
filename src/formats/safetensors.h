/*
 * safetensors reader: an 8-byte little-endian header length, a JSON header
 * mapping tensor names to dtype, shape and [begin, end) data offsets, then
 * the packed data. Also the sharded form, where model.safetensors.index.json
 * maps each tensor name to one of several shard files.
 *
 * Everything in the header is checked before use: header length against the
 * file size, dtype names, shapes (non-negative, at most 4 dims, no overflow),
 * offsets inside the data section, byte size == elements x dtype size,
 * alignment to the element size, and no two tensors overlapping.
 */
#ifndef KVLM_SAFETENSORS_H
#define KVLM_SAFETENSORS_H

#include "formats/tensor_set.h"

/* Maps path and adds all its tensors to ts. */
int safetensors_load(tensor_set *ts, const char *path, kvlm_error *err);
/* Reads an index file and loads every shard it names (relative to its dir). */
int safetensors_load_index(tensor_set *ts, const char *index_path, kvlm_error *err);

#endif
