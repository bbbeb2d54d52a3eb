/* Packing Q4_0 rows into the tiles of q4_0_packed.h (plain C: run once
 * per matrix at load, on any CPU). */
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
