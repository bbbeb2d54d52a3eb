#!/usr/bin/python3
"""A tiny random-weight gpt-oss GGUF file in llama.cpp's converter layout,
experts in MXFP4, and the float64 reference of its dequantised weights.

Usage:
    make_gptoss_gguf.py OUTDIR [--llama-cpp DIR]
    make_gptoss_gguf.py --fuzz-seed FILE      a tiny model of the same layout
                                              (hidden 32, 2 layers, vocabulary
                                              16, no tokenizer) for the GGUF
                                              fuzz target's corpus

Writes OUTDIR/gpt-oss-mxfp4.gguf and OUTDIR/gpt-oss-mxfp4.expected.json.
With --llama-cpp (a built llama.cpp tree: gguf-py/ and, optionally,
build/bin/ with tools/llamacpp_logits built against it), gguf-py is taken
from there.

The weights are drawn in Hugging Face's GptOssForCausalLM layout (experts
fused: gate_up_proj [E, C, 2F] with gate and up interleaved, down_proj
[E, F, C], both [in, out]), then written as llama.cpp's
conversion/gpt_oss.py writes a checkpoint (GptOssModel): the experts
transposed to [out, in], gate_up split into ffn_gate_exps / ffn_up_exps
(even / odd columns) with their biases, down_proj to ffn_down_exps,
self_attn.sinks to attn_sinks.weight, the FFN norm as post_attention_norm;
metadata: gpt-oss.* hyper-parameters, sliding_window, expert counts and
expert_feed_forward_length, rope.scaling.type yarn with factor,
original_context_length, yarn_beta_fast / yarn_beta_slow. Expert matrices
are quantised to MXFP4 by gguf-py's quantiser (the converter repacks the
checkpoint's own MXFP4 blocks; both are llama.cpp's MXFP4 blocks), the
router, vectors and norms F32, the other matrices F16.

The vocabulary is tools/llamacpp_models.py's byte-level BPE (merges
learned with Qwen2's pre-tokenizer) plus the harmony format's special
tokens, declared with gpt-oss's pre-tokenizer "gpt-4o"; llama.cpp's ids for
TEXT are recorded (llama_cpp_text_ids) to check kvlm's split.

The reference: every tensor dequantised by gguf-py, mapped back to
Hugging Face's names and layout, run by tools/moe_reference.py's
gptoss_forward with llama.cpp's YaRN (the correction range rounded to
whole dimensions) and clamp 7: logits at positions CHECK of the prompt,
then N_GEN greedy ids with the logits each was chosen from.
With a built llama.cpp, its greedy ids and largest logit difference at
the checked positions are recorded too (llama_cpp_*; its MXFP4 products
round the activations to 8 bits, so about 0.1 apart, the ids equal).
Deterministic.
"""
import json
import os
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import moe_reference as moe  # noqa: E402

H, L, NH, NKV, HD, E, K, FE = 64, 2, 4, 2, 16, 8, 3, 64
CTX, WIN, ORIG, FACTOR = 256, 128, 64, 4.0
N_PROMPT, N_GEN = 136, 8
CHECK = [0, 1, 126, 127, 128, 129, 130, 135]  # around the window's edge, and the last
SPECIALS = ["<|endoftext|>", "<|start|>", "<|end|>", "<|message|>", "<|channel|>", "<|constrain|>", "<|return|>",
            "<|call|>"]
SEED = 20261208
TEXT = ("ROMEO: But soft, what light through yonder window breaks?\nI'LL say it's 12345 o'clock, they'RE here;  "
        "CamelCaseWords and HTTPServer2go\r\n\tcafé naïve Übermaß 3.14159 /path/to\n\n")


def config(vocab):
    return {"model_type": "gpt_oss", "hidden_size": H, "num_hidden_layers": L, "num_attention_heads": NH,
            "num_key_value_heads": NKV, "head_dim": HD, "max_position_embeddings": CTX, "vocab_size": vocab,
            "rms_norm_eps": 1e-5, "rope_theta": 150000.0, "num_local_experts": E, "num_experts_per_tok": K,
            "intermediate_size": FE, "sliding_window": WIN, "swiglu_limit": 7.0,
            "layer_types": ["sliding_attention" if l % 2 == 0 else "full_attention" for l in range(L)],
            "rope_scaling": {"rope_type": "yarn", "factor": FACTOR, "beta_fast": 32.0, "beta_slow": 1.0,
                             "original_max_position_embeddings": ORIG, "truncate": True}}


def hf_weights(vocab, seed):
    g = torch.Generator().manual_seed(seed)
    rnd = lambda s, *shape: s * torch.randn(*shape, generator=g, dtype=torch.float64)
    w = {"model.embed_tokens.weight": rnd(0.5, vocab, H), "model.norm.weight": 1 + rnd(0.1, H),
         "lm_head.weight": rnd(0.3, vocab, H)}
    for i in range(L):
        p = "model.layers.%d." % i
        w[p + "input_layernorm.weight"] = 1 + rnd(0.1, H)
        w[p + "post_attention_layernorm.weight"] = 1 + rnd(0.1, H)
        for n, rows in (("q", NH), ("k", NKV), ("v", NKV)):
            w[p + "self_attn.%s_proj.weight" % n] = rnd(0.15, rows * HD, H)
            w[p + "self_attn.%s_proj.bias" % n] = rnd(0.2, rows * HD)
        w[p + "self_attn.o_proj.weight"] = rnd(0.15, H, NH * HD)
        w[p + "self_attn.o_proj.bias"] = rnd(0.1, H)
        w[p + "self_attn.sinks"] = rnd(1.0, NH)
        w[p + "mlp.router.weight"] = rnd(0.4, E, H)
        w[p + "mlp.router.bias"] = rnd(0.3, E)
        w[p + "mlp.experts.gate_up_proj"] = rnd(0.2, E, H, 2 * FE)
        b = rnd(0.2, E, 2 * FE)
        b[:, 0:6] = torch.tensor([9.0, -9.0, 9.5, 9.0, -9.5, 8.5], dtype=torch.float64)  # the clamp at 7 acts
        w[p + "mlp.experts.gate_up_proj_bias"] = b
        w[p + "mlp.experts.down_proj"] = rnd(0.1, E, FE, H)
        w[p + "mlp.experts.down_proj_bias"] = rnd(0.1, E, H)
    return w


def to_gguf(w):
    """{GGUF name: float32 array} in the converter's layout (gpt_oss.py)."""
    t = {"token_embd.weight": w["model.embed_tokens.weight"]}
    for i in range(L):
        p, b = "model.layers.%d." % i, "blk.%d." % i
        t[b + "attn_norm.weight"] = w[p + "input_layernorm.weight"]
        for n, gn in (("q", "attn_q"), ("k", "attn_k"), ("v", "attn_v"), ("o", "attn_output")):
            t[b + gn + ".weight"] = w[p + "self_attn.%s_proj.weight" % n]
            t[b + gn + ".bias"] = w[p + "self_attn.%s_proj.bias" % n]
        t[b + "attn_sinks.weight"] = w[p + "self_attn.sinks"]
        t[b + "post_attention_norm.weight"] = w[p + "post_attention_layernorm.weight"]
        t[b + "ffn_gate_inp.weight"] = w[p + "mlp.router.weight"]
        t[b + "ffn_gate_inp.bias"] = w[p + "mlp.router.bias"]
        gu = w[p + "mlp.experts.gate_up_proj"].transpose(-1, -2)  # [E, 2F, C]
        t[b + "ffn_gate_exps.weight"], t[b + "ffn_up_exps.weight"] = gu[:, 0::2, :], gu[:, 1::2, :]
        gub = w[p + "mlp.experts.gate_up_proj_bias"]
        t[b + "ffn_gate_exps.bias"], t[b + "ffn_up_exps.bias"] = gub[:, 0::2], gub[:, 1::2]
        t[b + "ffn_down_exps.weight"] = w[p + "mlp.experts.down_proj"].transpose(-1, -2)  # [E, C, F]
        t[b + "ffn_down_exps.bias"] = w[p + "mlp.experts.down_proj_bias"]
    t["output_norm.weight"] = w["model.norm.weight"]
    t["output.weight"] = w["lm_head.weight"]
    return {k: np.ascontiguousarray(v.numpy().astype(np.float32)) for k, v in t.items()}


def from_gguf(t):
    """The inverse of to_gguf (float64 torch tensors, Hugging Face names)."""
    T = {k: torch.from_numpy(np.asarray(v, dtype=np.float64)) for k, v in t.items()}
    w = {"model.embed_tokens.weight": T["token_embd.weight"], "model.norm.weight": T["output_norm.weight"],
         "lm_head.weight": T["output.weight"]}
    for i in range(L):
        p, b = "model.layers.%d." % i, "blk.%d." % i
        w[p + "input_layernorm.weight"] = T[b + "attn_norm.weight"]
        for n, gn in (("q", "attn_q"), ("k", "attn_k"), ("v", "attn_v"), ("o", "attn_output")):
            w[p + "self_attn.%s_proj.weight" % n] = T[b + gn + ".weight"]
            w[p + "self_attn.%s_proj.bias" % n] = T[b + gn + ".bias"]
        w[p + "self_attn.sinks"] = T[b + "attn_sinks.weight"]
        w[p + "post_attention_layernorm.weight"] = T[b + "post_attention_norm.weight"]
        w[p + "mlp.router.weight"], w[p + "mlp.router.bias"] = T[b + "ffn_gate_inp.weight"], T[b + "ffn_gate_inp.bias"]
        gu = torch.empty(E, 2 * FE, H, dtype=torch.float64)
        gu[:, 0::2], gu[:, 1::2] = T[b + "ffn_gate_exps.weight"], T[b + "ffn_up_exps.weight"]
        w[p + "mlp.experts.gate_up_proj"] = gu.transpose(-1, -2)
        gub = torch.empty(E, 2 * FE, dtype=torch.float64)
        gub[:, 0::2], gub[:, 1::2] = T[b + "ffn_gate_exps.bias"], T[b + "ffn_up_exps.bias"]
        w[p + "mlp.experts.gate_up_proj_bias"] = gub
        w[p + "mlp.experts.down_proj"] = T[b + "ffn_down_exps.weight"].transpose(-1, -2)
        w[p + "mlp.experts.down_proj_bias"] = T[b + "ffn_down_exps.bias"]
    return w


def stored(gguf, name, arr):
    """(array to write, raw dtype or None) as the converter stores it."""
    if "_exps.weight" in name:
        return gguf.quants.quantize(arr, gguf.GGMLQuantizationType.MXFP4), gguf.GGMLQuantizationType.MXFP4
    if arr.ndim <= 1 or name.endswith("_norm.weight") or name.startswith("blk.") and name.endswith(".bias") or \
            "ffn_gate_inp" in name:
        return arr.astype(np.float32), None
    return arr.astype(np.float16), None


def write(path, gguf, voc, t):
    gw = gguf.GGUFWriter(path, "gpt-oss")
    gw.add_type(gguf.GGUFType.MODEL)
    gw.add_name("kvlm tiny gpt-oss")
    gw.add_block_count(L)
    gw.add_context_length(CTX)
    gw.add_embedding_length(H)
    gw.add_feed_forward_length(FE)
    gw.add_head_count(NH)
    gw.add_head_count_kv(NKV)
    gw.add_rope_freq_base(150000.0)
    gw.add_layer_norm_rms_eps(1e-5)
    gw.add_expert_count(E)
    gw.add_expert_used_count(K)
    gw.add_key_length(HD)
    gw.add_value_length(HD)
    gw.add_rope_scaling_type(gguf.RopeScalingType.YARN)
    gw.add_rope_scaling_factor(FACTOR)
    gw.add_rope_scaling_orig_ctx_len(ORIG)
    gw.add_rope_scaling_yarn_beta_fast(32.0)
    gw.add_rope_scaling_yarn_beta_slow(1.0)
    gw.add_file_type(gguf.LlamaFileType.MOSTLY_MXFP4_MOE)
    gw.add_sliding_window(WIN)
    gw.add_expert_feed_forward_length(FE)
    gw.add_quantization_version(gguf.GGML_QUANT_VERSION)
    gw.add_tokenizer_model("gpt2")
    gw.add_tokenizer_pre("gpt-4o")
    gw.add_token_list(voc.tokens)
    gw.add_token_types(voc.types)
    gw.add_token_merges(voc.merges)
    gw.add_bos_token_id(voc.id["<|startoftext|>"] if "<|startoftext|>" in voc.id else voc.id["<|endoftext|>"])
    gw.add_eos_token_id(voc.id["<|return|>"])
    gw.add_pad_token_id(voc.id["<|endoftext|>"])
    gw.add_add_bos_token(False)
    for name, arr in t.items():
        data, raw = stored(gguf, name, arr)
        if raw is None:
            gw.add_tensor(name, data)
        else:
            gw.add_tensor(name, data, raw_dtype=raw)
    gw.write_header_to_file()
    gw.write_kv_data_to_file()
    gw.write_tensors_to_file()
    gw.close()


def dequantised(gguf, path):
    r = gguf.GGUFReader(path)
    out = {}
    for t in r.tensors:
        a = gguf.quants.dequantize(t.data, t.tensor_type)
        out[t.name] = np.asarray(a, dtype=np.float64).reshape([int(x) for x in reversed(t.shape)])
    return out


def prompt_ids(vocab, n):
    x, out = 777, []
    for _ in range(n):
        x = (x * 1103515245 + 12345) % (1 << 31)
        out.append((x >> 8) % (vocab - len(SPECIALS)))
    return out


def margin(w, cfg, ids):
    m = [1e9]
    orig = moe.gptoss_routing

    def spy(h, W, p, c):
        wt, e, lg = orig(h, W, p, c)
        top = torch.topk(lg, K + 1, dim=-1).values
        m[0] = min(m[0], (top[..., K - 1] - top[..., K]).min().item())
        return wt, e, lg
    moe.gptoss_routing = spy
    try:
        lg = moe.gptoss_forward(w, cfg, ids)
    finally:
        moe.gptoss_routing = orig
    return m[0], lg


def llamacpp(lc, out, path, ids):
    """llama.cpp's logits and greedy ids (tools/llamacpp_logits.c built
    against lc/build/bin), or None when that tree has no build."""
    import subprocess
    lib = os.path.join(lc, "build", "bin")
    if not os.path.exists(os.path.join(lib, "libllama.so")):
        return None
    exe = os.path.join(out, "llamacpp_logits")
    subprocess.run(["cc", "-O2", "-std=c11", "-Wall", "-I" + os.path.join(lc, "include"),
                    "-I" + os.path.join(lc, "ggml", "include"), "-o", exe, os.path.join(HERE, "llamacpp_logits.c"),
                    "-L" + lib, "-lllama", "-Wl,-rpath," + lib], check=True)
    tf = os.path.join(out, "gpt-oss-text.txt")
    with open(tf, "w", encoding="utf-8") as f:
        f.write(TEXT)
    r = subprocess.run([exe, path, str(CTX), str(N_GEN), tf] + [str(i) for i in ids], capture_output=True,
                       text=True, check=True)
    os.unlink(tf)
    return json.loads(r.stdout)


class _TinyVocab:
    tokens = ["t%d" % i for i in range(16 - len(SPECIALS))] + SPECIALS
    types = [1] * (16 - len(SPECIALS)) + [3] * len(SPECIALS)
    merges = []
    id = {t: i for i, t in enumerate(tokens)}


def fuzz_seed(path, lc):
    global H, L, HD, FE
    sys.path.insert(0, os.path.join(lc, "gguf-py"))
    import gguf
    H, L, HD, FE = 32, 2, 8, 32
    write(path, gguf, _TinyVocab, to_gguf(hf_weights(16, SEED)))


def main(argv):
    if len(argv) == 3 and argv[1] == "--fuzz-seed":
        fuzz_seed(argv[2], "/tmp/peer/llama.cpp")
        return 0
    if len(argv) not in (2, 4) or (len(argv) == 4 and argv[2] != "--llama-cpp"):
        print(__doc__, file=sys.stderr)
        return 2
    out = argv[1]
    lc = argv[3] if len(argv) == 4 else "/tmp/peer/llama.cpp"
    sys.path.insert(0, os.path.join(lc, "gguf-py"))
    import gguf
    import llamacpp_models as lm
    lm.ARCHS["gpt-oss"] = dict(pre="qwen2", specials=SPECIALS)
    voc = lm.Vocab("gpt-oss")
    V = len(voc.tokens)
    cfg = config(V)
    os.makedirs(out, exist_ok=True)
    path = os.path.join(out, "gpt-oss-mxfp4.gguf")
    ids = prompt_ids(V, N_PROMPT)
    for t in range(50):
        write(path, gguf, voc, to_gguf(hf_weights(V, SEED + t)))
        w = from_gguf(dequantised(gguf, path))
        mg, lg = margin(w, cfg, ids)
        if mg > 1e-3:
            break
    else:
        raise SystemExit("no seed routes with a margin")
    ctx, gen, glog = list(ids), [], []
    for _ in range(N_GEN):
        last = moe.gptoss_forward(w, cfg, ctx)[-1]
        top2 = torch.topk(last, 2).values
        assert top2[0] - top2[1] > 1e-3, "greedy tie"
        gen.append(int(last.argmax()))
        glog.append(last)
        ctx.append(gen[-1])
    ex = {"gguf": os.path.basename(path), "seed": SEED + t, "routing_margin": mg, "vocab": V, "prompt": ids,
          "check_positions": CHECK, "check_logits": [[float("%.9g" % x) for x in lg[p].tolist()] for p in CHECK],
          "greedy_ids": gen, "greedy_logits": [[float("%.9g" % x) for x in r.tolist()] for r in glog]}
    lc_out = llamacpp(lc, out, path, ids)
    if lc_out:
        ex["llama_cpp_greedy_ids"] = lc_out["greedy_ids"]
        ex["text"] = TEXT
        ex["llama_cpp_text_ids"] = lc_out["text_ids"]
        ex["llama_cpp_max_logit_diff"] = max(
            max(abs(a - b) for a, b in zip(lc_out["prefill_logits"][p], ex["check_logits"][k])) for k, p in enumerate(CHECK))
        print("llama.cpp: greedy %s, largest logit difference at the checked positions %.3f" %
              (lc_out["greedy_ids"], ex["llama_cpp_max_logit_diff"]))
    with open(os.path.join(out, "gpt-oss-mxfp4.expected.json"), "w") as f:
        json.dump(ex, f, separators=(",", ":"))
        f.write("\n")
    print("gpt-oss-mxfp4.gguf: %d bytes, vocab %d, seed +%d, routing margin %.2e, logit std %.3f, greedy %s" %
          (os.path.getsize(path), V, t, mg, lg.std().item(), gen))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
