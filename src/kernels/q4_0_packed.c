/* Packing Q4_0 rows into the tiles of q4_0_packed.h (plain C: run once
 * per matrix at load, on any CPU), and unpacking row ranges back into the
 * file's layout (per matmul call, for the kernels that read that layout). */
#include "kernels/q4_0_packed.h"

#include <string.h>

#include "tensor.h"

size_t q4_0_packed_size(int rows, int cols) {
    if (rows < 1 || cols < QK || cols % QK != 0) return 0;
    return (size_t)((rows + 3) / 4) * (size_t)((cols / QK + 3) / 4) * Q4P_GROUP_BYTES;
}

void q4_0_pack(const void *w, int rows, int cols, int t0, int t1, void *out) {
    const int nb = cols / QK, ng = (nb + 3) / 4;
    const size_t rb = (size_t)nb * sizeof(blk_q4_0);
    for (int t = t0; t < t1; t++)
        for (int g = 0; g < ng; g++) {
            unsigned char *o = (unsigned char *)out + ((size_t)t * ng + g) * Q4P_GROUP_BYTES;
            memset(o, 0, Q4P_GROUP_BYTES);
            for (int r = 0; r < 4 && 4 * t + r < rows; r++)
                for (int b = 0; b < 4 && 4 * g + b < nb; b++) {
                    const blk_q4_0 *blk = (const blk_q4_0 *)((const unsigned char *)w + (size_t)(4 * t + r) * rb) +
                                          4 * g + b;
                    const int lane = 4 * r + b;
                    for (int j = 0; j < 4; j++) memcpy(o + 64 * j + 4 * lane, blk->q + 4 * j, 4);
                    memcpy(o + 256 + 2 * lane, &blk->d, 2);
                }
        }
}

void q4_0_unpack(const void *packed, int cols, int r0, int r1, void *out) {
    const int nb = cols / QK, ng = (nb + 3) / 4;
    const unsigned char *p = packed;
    for (int n = r0; n < r1; n++) {
        const unsigned char *tile = p + (size_t)(n / 4) * ng * Q4P_GROUP_BYTES;
        unsigned char *row = (unsigned char *)out + (size_t)(n - r0) * nb * sizeof(blk_q4_0);
        for (int b = 0; b < nb; b++) {
            const unsigned char *o = tile + (size_t)(b / 4) * Q4P_GROUP_BYTES;
            const int lane = 4 * (n % 4) + b % 4;
            unsigned char *blk = row + (size_t)b * sizeof(blk_q4_0);
            memcpy(blk, o + 256 + 2 * lane, 2);
            for (int j = 0; j < 4; j++) memcpy(blk + 2 + 4 * j, o + 64 * j + 4 * lane, 4);
        }
    }
}
