#!/usr/bin/python3
"""A Gemma-3-1B-shaped GGUF with random weights, for speed and memory
figures against llama.cpp (docs/performance.md, interleaved attention).

Usage:
    make_gemma3_1b.py OUTDIR --llama-cpp DIR

Writes, reproducibly (numpy seed 1):
    OUTDIR/gemma3-1b-f16.gguf     F16, in llama.cpp's converter layout
                                  (gguf-py's writer)
    OUTDIR/gemma3-1b-Q4_K_M.gguf  llama-quantize ... Q4_K_M
    OUTDIR/gemma3-1b-Q8_0.gguf    llama-quantize ... Q8_0
    OUTDIR/gemma3-1b-*.gguf.log   llama-quantize's log

The shape is Gemma 3 1B's: 26 layers, hidden 1152, 4 query heads and 1 KV
head of 256, MLP 6912 (GeGLU), vocabulary 262144 (tied embeddings), window
512 on five layers of every six (llama.cpp's pattern for gemma3; the last
of each six is global), rotary base 1e6 (global) and 1e4 (local), no rotary
scaling, context 32768. Matrices are N(0, 0.02); norm weights are stored
as the converter stores them (1 + w, w = 0). The vocabulary is
placeholder strings (tokenizer model gpt2, one merge): the benchmarks
drive the file with token ids.
"""
import os
import subprocess
import sys

import numpy as np

LAYERS, HIDDEN, HEADS, KV_HEADS, HEAD_DIM, FFN, VOCAB = 26, 1152, 4, 1, 256, 6912, 262144
WINDOW, CTX = 512, 32768
TYPES = ["Q4_K_M", "Q8_0"]


def main(argv):
    if len(argv) != 4 or argv[2] != "--llama-cpp":
        sys.exit(__doc__)
    out, llama = argv[1], argv[3]
    sys.path.insert(0, os.path.join(llama, "gguf-py"))
    import gguf  # noqa: E402
    os.makedirs(out, exist_ok=True)
    rng = np.random.default_rng(1)

    def mat(rows, cols):  # [out, in] as the converter keeps it (ne = [in, out])
        return (rng.standard_normal((rows, cols), dtype=np.float32) * 0.02).astype(np.float16)

    def ones(n):
        return np.ones(n, dtype=np.float32)

    f16 = os.path.join(out, "gemma3-1b-f16.gguf")
    gw = gguf.GGUFWriter(f16, "gemma3")
    gw.add_type(gguf.GGUFType.MODEL)
    gw.add_name("kvlm gemma3-1b shape")
    gw.add_context_length(CTX)
    gw.add_embedding_length(HIDDEN)
    gw.add_block_count(LAYERS)
    gw.add_feed_forward_length(FFN)
    gw.add_head_count(HEADS)
    gw.add_head_count_kv(KV_HEADS)
    gw.add_key_length(HEAD_DIM)
    gw.add_value_length(HEAD_DIM)
    gw.add_layer_norm_rms_eps(1e-6)
    gw.add_rope_freq_base(1e6)
    gw.add_rope_freq_base_swa(1e4)
    gw.add_sliding_window(WINDOW)
    gw.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    gw.add_quantization_version(gguf.GGML_QUANT_VERSION)
    gw.add_tokenizer_model("gpt2")
    gw.add_tokenizer_pre("default")
    toks = ["<%02x>" % i if i < 3 else "t%d" % i for i in range(VOCAB)]
    toks[-1] = toks[3] + toks[4]
    gw.add_token_list(toks)
    gw.add_token_types([3 if i < 3 else 1 for i in range(VOCAB)])
    gw.add_token_merges([toks[3] + " " + toks[4]])
    gw.add_bos_token_id(2)
    gw.add_eos_token_id(1)
    gw.add_add_bos_token(False)
    gw.add_tensor("token_embd.weight", mat(VOCAB, HIDDEN))
    gw.add_tensor("output_norm.weight", ones(HIDDEN))
    for l in range(LAYERS):
        p = "blk.%d." % l
        gw.add_tensor(p + "attn_norm.weight", ones(HIDDEN))
        gw.add_tensor(p + "attn_q.weight", mat(HEADS * HEAD_DIM, HIDDEN))
        gw.add_tensor(p + "attn_k.weight", mat(KV_HEADS * HEAD_DIM, HIDDEN))
        gw.add_tensor(p + "attn_v.weight", mat(KV_HEADS * HEAD_DIM, HIDDEN))
        gw.add_tensor(p + "attn_q_norm.weight", ones(HEAD_DIM))
        gw.add_tensor(p + "attn_k_norm.weight", ones(HEAD_DIM))
        gw.add_tensor(p + "attn_output.weight", mat(HIDDEN, HEADS * HEAD_DIM))
        gw.add_tensor(p + "post_attention_norm.weight", ones(HIDDEN))
        gw.add_tensor(p + "ffn_norm.weight", ones(HIDDEN))
        gw.add_tensor(p + "ffn_gate.weight", mat(FFN, HIDDEN))
        gw.add_tensor(p + "ffn_up.weight", mat(FFN, HIDDEN))
        gw.add_tensor(p + "ffn_down.weight", mat(HIDDEN, FFN))
        gw.add_tensor(p + "post_ffw_norm.weight", ones(HIDDEN))
    gw.write_header_to_file()
    gw.write_kv_data_to_file()
    gw.write_tensors_to_file()
    gw.close()
    quantize = os.path.join(llama, "build", "bin", "llama-quantize")
    for t in TYPES:
        q = os.path.join(out, "gemma3-1b-%s.gguf" % t)
        with open(q + ".log", "w") as log:
            subprocess.run([quantize, f16, q, t, "2"], check=True, stdout=log, stderr=subprocess.STDOUT)
        print(q, os.path.getsize(q))


if __name__ == "__main__":
    main(sys.argv)
