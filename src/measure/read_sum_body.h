/*
 * The vector read loops of read_sum.h, written once for the AVX2 and
 * AVX-512 files: the includer defines RS_NAME (the read_sum_ops variable),
 * RS_VEC (register type), RS_LANES (uint64_t per register), RS_ZERO(),
 * RS_LOAD(p), RS_ADD(a, b) and RS_STORE(p, v) (unaligned store of lanes).
 * A line is 64 bytes: one AVX-512 load or two AVX2 loads. Four
 * accumulators so the additions do not serialise the loads.
 */
#define RS_PER_LINE (READ_LINE_WORDS / RS_LANES)

static uint64_t rs_reduce(RS_VEC a, RS_VEC b, RS_VEC c, RS_VEC d) {
    uint64_t lanes[RS_LANES], t = 0;
    RS_STORE(lanes, RS_ADD(RS_ADD(a, b), RS_ADD(c, d)));
    for (int i = 0; i < RS_LANES; i++) t += lanes[i];
    return t;
}

static uint64_t rs_sequential(const uint64_t *p, size_t words) {
    RS_VEC a = RS_ZERO(), b = RS_ZERO(), c = RS_ZERO(), d = RS_ZERO();
    size_t i = 0;
    for (; i + 4 * RS_LANES <= words; i += 4 * RS_LANES) {
        a = RS_ADD(a, RS_LOAD(p + i));
        b = RS_ADD(b, RS_LOAD(p + i + RS_LANES));
        c = RS_ADD(c, RS_LOAD(p + i + 2 * RS_LANES));
        d = RS_ADD(d, RS_LOAD(p + i + 3 * RS_LANES));
    }
    for (; i < words; i += RS_LANES) a = RS_ADD(a, RS_LOAD(p + i));
    return rs_reduce(a, b, c, d);
}

static uint64_t rs_tiled(const uint64_t *p, size_t words) {
    const size_t tile = (size_t)READ_TILE_ROWS * READ_ROW_WORDS;
    RS_VEC acc[4] = {RS_ZERO(), RS_ZERO(), RS_ZERO(), RS_ZERO()};
    for (size_t t = 0; t + tile <= words; t += tile) {
        const int pf = t + 2 * tile <= words;
        for (size_t k = 0; k < READ_ROW_WORDS; k += READ_LINE_WORDS)
            for (int j = 0; j < READ_TILE_ROWS; j++) {
                const uint64_t *r = p + t + (size_t)j * READ_ROW_WORDS + k;
                if (pf) __builtin_prefetch(r + tile, 0, 3);
                for (int v = 0; v < RS_PER_LINE; v++) acc[j & 3] = RS_ADD(acc[j & 3], RS_LOAD(r + v * RS_LANES));
            }
    }
    return rs_reduce(acc[0], acc[1], acc[2], acc[3]);
}

const read_sum_ops RS_NAME = {rs_sequential, rs_tiled};
