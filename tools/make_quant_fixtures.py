#!/usr/bin/python3
"""Writes tests/fixtures/quant: random blocks of every GGUF block type kvlm
reads, and the float32 values gguf-py's independent dequantiser
(gguf.quants.dequantize) gives for them.

Usage: PYTHONPATH=/path/to/llama.cpp/gguf-py /usr/bin/python3 \
           tools/make_quant_fixtures.py tests/fixtures/quant

For each type T (lower-case kvlm name) it writes T.blocks (the raw blocks,
as they sit in a GGUF file) and T.f32 (the dequantised values, little-endian
float32, one per value). Every block is valid: its f16 scales are finite
(random sign, exponents 2^-14 .. 2^3, a few zero or subnormal), every MXFP4
scale byte is a valid E8M0 exponent (0x00 .. 0xFE: here 100 .. 139, scales
near 1, except the first three blocks': 0 and 1, whose scales are subnormal,
and 252, the largest for which no value overflows) and every code byte is
random. Deterministic (fixed seed): running it again gives
byte-identical files.
"""
import os
import sys

import numpy as np
from gguf import GGMLQuantizationType as Q
from gguf.quants import dequantize

# kvlm name -> (gguf type, block bytes, values per block, byte offsets of f16 fields, blocks written)
TYPES = {
    "q8_0": (Q.Q8_0, 34, 32, [0], 16),
    "q4_0": (Q.Q4_0, 18, 32, [0], 16),
    "q4_1": (Q.Q4_1, 20, 32, [0, 2], 16),
    "q5_0": (Q.Q5_0, 22, 32, [0], 16),
    "q5_1": (Q.Q5_1, 24, 32, [0, 2], 16),
    "iq4_nl": (Q.IQ4_NL, 18, 32, [0], 16),
    "q2_k": (Q.Q2_K, 84, 256, [80, 82], 6),
    "q3_k": (Q.Q3_K, 110, 256, [108], 6),
    "q4_k": (Q.Q4_K, 144, 256, [0, 2], 6),
    "q5_k": (Q.Q5_K, 176, 256, [0, 2], 6),
    "q6_k": (Q.Q6_K, 210, 256, [208], 6),
    # appended after the others, so their files (drawn first from the seed) stay as they were
    "mxfp4": (Q.MXFP4, 17, 32, [], 16),
    "iq4_xs": (Q.IQ4_XS, 136, 256, [0], 6),
}


def random_f16(rng, n):
    """Finite f16 bit patterns: mostly normal numbers near 1, a few zero or subnormal."""
    sign = rng.integers(0, 2, n, dtype=np.uint16) << 15
    exp = rng.integers(1, 19, n, dtype=np.uint16)  # 2^-14 .. 2^3
    man = rng.integers(0, 1024, n, dtype=np.uint16)
    h = sign | (exp << 10) | man
    special = rng.integers(0, 16, n)
    h = np.where(special == 0, sign, h)  # signed zero
    h = np.where(special == 1, sign | man, h)  # subnormal
    return h.astype(np.uint16)


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "tests/fixtures/quant"
    os.makedirs(out, exist_ok=True)
    rng = np.random.default_rng(20261201)
    for name, (qt, bb, bl, f16_at, nblocks) in TYPES.items():
        raw = rng.integers(0, 256, (nblocks, bb), dtype=np.uint8)
        for off in f16_at:
            raw[:, off:off + 2] = random_f16(rng, nblocks).view(np.uint8).reshape(nblocks, 2)
        if qt == Q.MXFP4:
            raw[:, 0] = rng.integers(100, 140, nblocks, dtype=np.uint8)  # scales near 1
            raw[:3, 0] = [0, 1, 252]
        vals = dequantize(raw.reshape(1, -1), qt).astype("<f4").reshape(-1)
        assert vals.size == nblocks * bl and np.all(np.isfinite(vals))
        raw.tofile(os.path.join(out, name + ".blocks"))
        vals.tofile(os.path.join(out, name + ".f32"))
        print(f"{name}: {nblocks} blocks, {raw.size} bytes, {vals.size} values")


if __name__ == "__main__":
    main()
