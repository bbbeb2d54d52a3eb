#!/usr/bin/python3
"""GGUF files of the per-layer attention fixtures (tests/fixtures/layers),
written with llama.cpp's gguf-py in the layout its converter
(convert_hf_to_gguf.py and conversion/*.py) gives these architectures, then
quantised to Q8_0 by llama.cpp's llama-quantize.

Usage:
    make_layers_gguf.py OUTDIR --llama-cpp DIR [--commit FIXDIR]

For V in gemma2 gemma3 smollm3 granite phi3_longrope (Qwen2's windows from
max_window_layers on have no GGUF form: llama.cpp's converter drops them):
    OUTDIR/V-f32.gguf           F32, from tests/fixtures/layers/V
    OUTDIR/V-f32.expected.json  the float64 reference of the F32 file's weights
                                (the fixture's prompt and decode ids)
    OUTDIR/V-q8_0.gguf          llama-quantize V-f32.gguf Q8_0
    OUTDIR/V-q8_0.expected.json the float64 reference (tools/layers_reference.py)
                                on the weights gguf-py dequantises from the
                                Q8_0 file: prefill logits, and greedy decoding
                                of 8 tokens with the logits of each step
                                (the .expected.json format, "decode" = the
                                greedy ids); with llama.cpp's own greedy ids
                                and prefill logits (tools/llamacpp_logits.c,
                                F16 KV) under "llamacpp".
Gemma's files keep no query_pre_attn_scalar: their reference scales by
1/sqrt(key_length), as llama.cpp and kvlm read them.

--commit copies every V-q8_0.gguf and V-q8_0.expected.json into FIXDIR
(tests/fixtures/layers_gguf) and writes there the malformed files of BAD
(a missing soft-cap, a window pattern of the wrong length, a window longer
than the context, LongRoPE factors of the wrong length). The F32 files stay in OUTDIR; on them
llama.cpp's prefill logits (F32 weights, F16 KV) are within 0.013 of the
reference (printed), which checks the reference's reading of each
architecture against llama.cpp's.

The converter's layout: matrices [out, in] as ne = [in, out]; q/k rows of
smollm3 and granite permuted per head into rotary pairs (2i, 2i+1); Gemma's
norm weights (every *norm.weight, q/k norms too) stored + 1; Phi-3's fused
attn_qkv and ffn_up = [gate; up]; LongRoPE as rope_factors_long /
rope_factors_short (F32) with rope.scaling.attn_factor and
rope.scaling.original_context_length; tied heads have no output.weight. A
byte vocabulary of 256 tokens (tokenizer.ggml.model gpt2, no merges) lets
llama.cpp load the files; kvlm's tests use token ids.
"""
import json, math, os, subprocess, sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import layers_reference as R  # noqa: E402
import llama_reference as L  # noqa: E402

FIX = os.path.join(ROOT, "tests", "fixtures", "layers")
ARCH = {"gemma2": "gemma2", "gemma3": "gemma3", "smollm3": "smollm3", "granite": "granite", "phi3_longrope": "phi3"}
N_GEN = 8


def permute(w, n_head):
    """Rows i and i + d/2 of each head become 2i and 2i + 1 (llama.cpp's permute)."""
    return L.hf_to_interleaved_rows(w, n_head)


def tensors(v, c, W):
    """(GGUF name, float32 array) in the converter's layout."""
    arch = ARCH[v]
    gemma = arch.startswith("gemma")
    nh, nkv = c["num_attention_heads"], c["num_key_value_heads"]
    out = [("token_embd.weight", W[R.EMBED])]
    if R.HEAD in W and not c.get("tie_word_embeddings"):
        out.append(("output.weight", W[R.HEAD]))
    out.append(("output_norm.weight", W[R.NORM] + (1 if gemma else 0)))
    names = {"input_layernorm": "attn_norm", "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k",
             "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output", "self_attn.qkv_proj": "attn_qkv",
             "self_attn.q_norm": "attn_q_norm", "self_attn.k_norm": "attn_k_norm",
             "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down",
             "mlp.gate_up_proj": "ffn_up"}
    if gemma:
        names.update({"post_attention_layernorm": "post_attention_norm", "pre_feedforward_layernorm": "ffn_norm",
                      "post_feedforward_layernorm": "post_ffw_norm"})
    else:
        names["post_attention_layernorm"] = "ffn_norm"
    for l in range(c["num_hidden_layers"]):
        p = R.LAYER % l
        for hf, gg in names.items():
            if p + hf + ".weight" not in W:
                continue
            t = W[p + hf + ".weight"]
            if arch in ("smollm3", "granite") and hf in ("self_attn.q_proj", "self_attn.k_proj"):
                t = permute(t, nh if hf.endswith("q_proj") else nkv)
            if gemma and hf.endswith("norm"):
                t = t + 1
            out.append(("blk.%d.%s.weight" % (l, gg), t))
    if arch == "phi3":
        sc = c["rope_scaling"]
        out.append(("rope_factors_long.weight", torch.tensor(sc["long_factor"])))
        out.append(("rope_factors_short.weight", torch.tensor(sc["short_factor"])))
    return [(n, t.to(torch.float32).numpy()) for n, t in out]


def write_f32(gguf, v, c, W, path, toks=None):
    """toks: the vocabulary's token strings (default: 256 tokens that no
    text maps to, for files driven by token ids)."""
    arch = ARCH[v]
    gw = gguf.GGUFWriter(path, arch)
    gw.add_type(gguf.GGUFType.MODEL)
    gw.add_name("kvlm layers fixture")  # llama.cpp special-cases some names ("phi3")
    hd = c["head_dim"]
    gw.add_context_length(c["max_position_embeddings"])
    gw.add_embedding_length(c["hidden_size"])
    gw.add_block_count(c["num_hidden_layers"])
    gw.add_feed_forward_length(c["intermediate_size"])
    gw.add_head_count(c["num_attention_heads"])
    gw.add_head_count_kv(c["num_key_value_heads"])
    gw.add_layer_norm_rms_eps(c["rms_norm_eps"])
    gw.add_rope_freq_base(c["rope_theta"])
    gw.add_file_type(gguf.LlamaFileType.ALL_F32)
    if arch.startswith("gemma"):
        gw.add_key_length(hd)
        gw.add_value_length(hd)
        gw.add_sliding_window(c["sliding_window"])
    if arch == "gemma2":
        gw.add_attn_logit_softcapping(c["attn_logit_softcapping"])
        gw.add_final_logit_softcapping(c["final_logit_softcapping"])
    if arch == "gemma3":
        gw.add_rope_freq_base_swa(c["rope_local_base_freq"])
        gw.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
        gw.add_rope_scaling_factor(c["rope_scaling"]["factor"])
    if arch in ("smollm3", "granite"):
        gw.add_vocab_size(c["vocab_size"])
        gw.add_rope_dimension_count(hd)
    if arch == "granite":
        gw.add_attention_scale(c["attention_multiplier"])
        gw.add_embedding_scale(c["embedding_multiplier"])
        gw.add_residual_scale(c["residual_multiplier"])
        gw.add_logit_scale(c["logits_scaling"])
    if arch == "phi3":
        n_embd, nh = c["hidden_size"], c["num_attention_heads"]
        orig = c["original_max_position_embeddings"]
        gw.add_rope_scaling_orig_ctx_len(orig)
        gw.add_rope_dimension_count(int(c["partial_rotary_factor"] * n_embd) // nh)
        gw.add_sliding_window(c.get("sliding_window") or 0)
        s = c["max_position_embeddings"] / orig
        gw.add_rope_scaling_attn_factors(math.sqrt(1 + math.log(s) / math.log(orig)) if s > 1 else 1.0)
    gw.add_quantization_version(gguf.GGML_QUANT_VERSION)
    gw.add_tokenizer_model("gpt2")
    gw.add_tokenizer_pre("default")
    if toks is None:
        toks = ["<%02x>" % i if i < 3 else chr(0x100 + i) for i in range(c["vocab_size"])]
        toks[-1] = toks[3] + toks[4]  # llama.cpp wants at least one merge
    gw.add_token_list(toks)
    gw.add_token_types([3 if i < 3 else 1 for i in range(c["vocab_size"])])
    gw.add_token_merges([toks[3] + " " + toks[4]])
    gw.add_bos_token_id(1)
    gw.add_eos_token_id(2)
    gw.add_add_bos_token(False)
    for name, arr in tensors(v, c, W):
        gw.add_tensor(name, arr)
    gw.write_header_to_file()
    gw.write_kv_data_to_file()
    gw.write_tensors_to_file()
    gw.close()


def back_to_hf(gguf, v, c, path):
    """The weights of a GGUF file as the Hugging Face fixture's names (float64)."""
    arch = ARCH[v]
    gemma = arch.startswith("gemma")
    nh, nkv = c["num_attention_heads"], c["num_key_value_heads"]
    r = gguf.GGUFReader(path)
    g = {}
    for t in r.tensors:
        a = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float64)
        shape = [int(x) for x in reversed(t.shape.tolist())]
        g[t.name] = torch.from_numpy(a.reshape(shape).copy())
    W = {R.EMBED: g["token_embd.weight"], R.NORM: g["output_norm.weight"] - (1 if gemma else 0)}
    if "output.weight" in g:
        W[R.HEAD] = g["output.weight"]
    inv = {}
    base = {"attn_norm": "input_layernorm", "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj",
            "attn_v": "self_attn.v_proj", "attn_output": "self_attn.o_proj", "attn_qkv": "self_attn.qkv_proj",
            "attn_q_norm": "self_attn.q_norm", "attn_k_norm": "self_attn.k_norm", "ffn_gate": "mlp.gate_proj",
            "ffn_up": "mlp.gate_up_proj" if arch == "phi3" else "mlp.up_proj", "ffn_down": "mlp.down_proj"}
    if gemma:
        base.update({"post_attention_norm": "post_attention_layernorm", "ffn_norm": "pre_feedforward_layernorm",
                     "post_ffw_norm": "post_feedforward_layernorm"})
    else:
        base["ffn_norm"] = "post_attention_layernorm"
    for name, t in g.items():
        if not name.startswith("blk."):
            continue
        _, l, gg, _ = name.split(".")
        hf = base[gg]
        if arch in ("smollm3", "granite") and gg in ("attn_q", "attn_k"):
            t = L.interleaved_to_hf_rows(t, nh if gg == "attn_q" else nkv)
        if gemma and gg.endswith("norm"):
            t = t - 1
        W[R.LAYER % int(l) + hf + ".weight"] = t
    return R.split_phi3(W, c)


def greedy(W, c, prompt, n):
    pre = R.forward(W, c, prompt)
    ids, logits, ctx = [], [], list(prompt)
    last = pre[-1]
    for _ in range(n):
        t = int(torch.argmax(last))
        ids.append(t)
        ctx.append(t)
        last = R.forward(W, c, ctx)[-1]
        logits.append(last)
    return pre, ids, torch.stack(logits)


# Malformed files for the loader's refusals: metadata and a token
# embedding only (the refusal comes before any other tensor is looked at).
BAD = {
    "bad-gemma2-no-softcap": ("gemma2", 4, {"attention.sliding_window": 5, "final_logit_softcapping": 30.0}, {}),
    "bad-gemma3-pattern": ("gemma3", 6, {"attention.sliding_window": 5,
                                         "attention.sliding_window_pattern": [True] * 5}, {}),
    "bad-gemma3-window": ("gemma3", 6, {"attention.sliding_window": 100}, {}),
    "bad-phi3-factors": ("phi3", 2, {"rope.dimension_count": 12, "rope.scaling.original_context_length": 32},
                         {"rope_factors_long.weight": 5, "rope_factors_short.weight": 6}),
}


def write_bad(gguf, name, arch, layers, keys, factors, path):
    gw = gguf.GGUFWriter(path, arch)
    gw.add_block_count(layers)
    gw.add_context_length(64)
    gw.add_embedding_length(32)
    gw.add_feed_forward_length(64)
    gw.add_head_count(2)
    gw.add_head_count_kv(1)
    gw.add_key_length(16)
    gw.add_value_length(16)
    gw.add_layer_norm_rms_eps(1e-6)
    gw.add_rope_freq_base(10000.0)
    for k, v in keys.items():
        full = "%s.%s" % (arch, k)
        if isinstance(v, list):
            gw.add_array(full, v)
        elif isinstance(v, float):
            gw.add_float32(full, v)
        else:
            gw.add_uint32(full, v)
    gw.add_tensor("token_embd.weight", np.zeros((8, 32), dtype=np.float32))
    for t, n in factors.items():
        gw.add_tensor(t, np.ones(n, dtype=np.float32))
    gw.write_header_to_file()
    gw.write_kv_data_to_file()
    gw.write_tensors_to_file()
    gw.close()


def main(argv):
    if len(argv) not in (4, 6) or argv[2] != "--llama-cpp" or (len(argv) == 6 and argv[4] != "--commit"):
        sys.exit(__doc__)
    out, llama = argv[1], argv[3]
    commit = argv[5] if len(argv) == 6 else None
    sys.path.insert(0, os.path.join(llama, "gguf-py"))
    import gguf  # noqa: E402
    os.makedirs(out, exist_ok=True)
    exe = os.path.join(out, "llamacpp_logits")
    lib = os.path.join(llama, "build", "bin")
    subprocess.run(["cc", "-O2", "-std=c11", "-I" + os.path.join(llama, "include"),
                    "-I" + os.path.join(llama, "ggml", "include"), "-o", exe, os.path.join(HERE, "llamacpp_logits.c"),
                    "-L" + lib, "-lllama", "-Wl,-rpath," + lib], check=True)
    for v in ARCH:
        with open(os.path.join(FIX, v, "config.json")) as f:
            c = json.load(f)
        # What the file says: Gemma's GGUF keeps no query_pre_attn_scalar;
        # llama.cpp (and kvlm) scale by 1/sqrt(key_length) (the 27B shapes
        # aside), so the files' reference does too.
        cg = dict(c, query_pre_attn_scalar=c["head_dim"]) if ARCH[v].startswith("gemma") else c
        W = {k: t for k, (_, t) in L.read_safetensors(os.path.join(FIX, v, "model.safetensors")).items()}
        f32 = os.path.join(out, v + "-f32.gguf")
        q8 = os.path.join(out, v + "-q8_0.gguf")
        write_f32(gguf, v, c, W, f32)
        subprocess.run([os.path.join(lib, "llama-quantize"), f32, q8, "Q8_0"], check=True, capture_output=True)
        # the F32 file must give back the fixture's weights exactly
        back = back_to_hf(gguf, v, c, f32)
        ref = R.split_phi3({k: t.to(torch.float64) for k, t in W.items()}, c)
        worst = max(float((back[k] - ref[k]).abs().max()) for k in ref)
        assert worst < 1e-6, (v, worst)
        pre, dec = R.reference(back, cg, R.PROMPT, R.DECODE)
        L.write_expected(os.path.join(out, v + "-f32.expected.json"), v + "-f32", "f32", pre, dec, R.PROMPT, R.DECODE)
        Wq = back_to_hf(gguf, v, c, q8)
        pre, ids, dec = greedy(Wq, cg, R.PROMPT, N_GEN)
        r = subprocess.run([exe, q8, "64", str(N_GEN), "-"] + [str(i) for i in R.PROMPT], check=True,
                           capture_output=True, text=True)
        lc = json.loads(r.stdout)
        path = os.path.join(out, v + "-q8_0.expected.json")
        L.write_expected(path, v + "-q8_0", "q8_0", pre, dec, R.PROMPT, ids)
        with open(path) as f:
            ex = json.load(f)
        ex["llamacpp"] = {"greedy_ids": lc["greedy_ids"], "prefill_logits": lc["prefill_logits"],
                          "command": "tools/llamacpp_logits.c, llama.cpp de3ff81, F16 KV, 2 threads"}
        with open(path, "w") as f:
            json.dump(ex, f, separators=(",", ":"))
            f.write("\n")
        d = float((torch.tensor(lc["prefill_logits"], dtype=torch.float64) - pre).abs().max())
        r = subprocess.run([exe, f32, "64", "1", "-"] + [str(i) for i in R.PROMPT], check=True,
                           capture_output=True, text=True)
        with open(os.path.join(out, v + "-f32.expected.json")) as f:
            pf = torch.tensor(json.load(f)["prefill_logits"], dtype=torch.float64)
        d32 = float((torch.tensor(json.loads(r.stdout)["prefill_logits"], dtype=torch.float64) - pf).abs().max())
        print("%-14s q8_0 %6d B  greedy %s  llama.cpp %s  |llama.cpp - ref| prefill: q8_0 %.3g, f32 %.3g" %
              (v, os.path.getsize(q8), ids, lc["greedy_ids"], d, d32))
        if commit:
            os.makedirs(commit, exist_ok=True)
            for name, (arch, layers, keys, factors) in BAD.items():
                write_bad(gguf, name, arch, layers, keys, factors, os.path.join(commit, name + ".gguf"))
            for fn in (v + "-q8_0.gguf", v + "-q8_0.expected.json"):
                with open(os.path.join(out, fn), "rb") as a, open(os.path.join(commit, fn), "wb") as b:
                    b.write(a.read())


if __name__ == "__main__":
    main(sys.argv)
