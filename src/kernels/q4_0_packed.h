/*
 * The packed layout of Q4_0 weight matrices that the AVX512-VNNI decode
 * kernel reads (quant_int8_q4_0_packed_avx512.c), made once at load from
 * the file's row-major blocks (kern_matrix .packed).
 *
 * Rows are taken 4 at a time (a tile; the last tile of a matrix whose rows
 * are not a multiple of 4 has zero rows after the real ones) and blocks 4
 * at a time (a group; a last group of fewer than 4 blocks has zero blocks
 * after the real ones). One tile group is 288 bytes: four 64-byte vectors
 * whose 16 32-bit lanes are the (row r, block b) pairs, lane 4 r + b,
 * vector j holding code bytes 4 j .. 4 j + 3 of that block (its values
 * 4 j .. 4 j + 3 in the low nibbles, 16 + 4 j .. 19 + 4 j in the high
 * ones), then the 16 f16 block scales in the same lane order. Tiles follow
 * each other in row order, each tile's groups in column order. A zero
 * block (codes 0, scale 0) adds nothing to any dot product.
 *
 * Size of a rows x cols matrix: ceil(rows / 4) * ceil(cols / 128) * 288
 * bytes, the file's rows * cols / 32 * 18 when rows is a multiple of 4 and
 * cols of 128.
 */
#ifndef KVLM_KERNELS_Q4_0_PACKED_H
#define KVLM_KERNELS_Q4_0_PACKED_H

#include <stddef.h>

#define Q4P_GROUP_BYTES 288 /* one tile group: 4 x 64 code bytes + 16 f16 scales */

/* Bytes of the packed form of a rows x cols Q4_0 matrix (0 when cols is
 * not a positive multiple of 32 or rows < 1). */
size_t q4_0_packed_size(int rows, int cols);
/* Writes tiles [t0, t1) of the packed form of the rows x cols Q4_0 matrix
 * w (the file's layout) into out (q4_0_packed_size bytes); tiles may be
 * written by several threads at once. */
void q4_0_pack(const void *w, int rows, int cols, int t0, int t1, void *out);
/* The inverse: rows [r0, r1) of the packed form of a rows x cols Q4_0
 * matrix, written to out as the file's row-major blocks ((r1 - r0) rows of
 * cols / 32 blocks). The kernels that read the file's layout run on these
 * when the packed form is all the model keeps resident. */
void q4_0_unpack(const void *packed, int cols, int r0, int r1, void *out);

#endif
