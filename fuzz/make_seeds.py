#!/usr/bin/python3
"""Writes the seed corpora of the fuzz targets (fuzz/corpus/<target>/).

Standard library only; deterministic. Every seed is either made here by
hand (small valid files of each format, written by the tiny GGUF and
safetensors writers below) or cut from this repository's own test fixtures
(tests/fixtures, models/), so no third-party file enters the corpus.
Run from the repository root: fuzz/make_seeds.py
"""
import json
import os
import struct

OUT = "fuzz/corpus"
SEP = b"\n#####\n"


def put(target, name, data):
    d = os.path.join(OUT, target)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


# ----------------------------------------------------------------- GGUF
T_U8, T_I8, T_U16, T_I16, T_U32, T_I32, T_F32, T_BOOL, T_STR, T_ARR, T_U64, T_I64, T_F64 = range(13)


def gstr(s):
    b = s.encode()
    return struct.pack("<Q", len(b)) + b


def gval(t, v):
    if t == T_STR:
        return gstr(v)
    if t == T_ARR:
        et, items = v
        return struct.pack("<IQ", et, len(items)) + b"".join(gval(et, x) for x in items)
    fmt = {T_U8: "B", T_I8: "b", T_U16: "H", T_I16: "h", T_U32: "I", T_I32: "i", T_F32: "f", T_BOOL: "?",
           T_U64: "Q", T_I64: "q", T_F64: "d"}[t]
    return struct.pack("<" + fmt, v)


def gguf(kvs, tensors, align=32):
    """kvs: [(key, type, value)]; tensors: [(name, shape, ggml_type, data bytes)]."""
    out = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kvs))
    for k, t, v in kvs:
        out += gstr(k) + struct.pack("<I", t) + gval(t, v)
    off = 0
    infos, blobs = b"", b""
    for name, shape, gt, data in tensors:
        infos += gstr(name) + struct.pack("<I", len(shape)) + b"".join(struct.pack("<Q", s) for s in shape)
        infos += struct.pack("<IQ", gt, off)
        pad = (-len(data)) % align
        blobs += data + b"\0" * pad
        off += len(data) + pad
    out += infos
    out += b"\0" * ((-len(out)) % align)
    return out + blobs


def f32s(n, scale=0.01):
    return b"".join(struct.pack("<f", ((i * 37) % 17 - 8) * scale) for i in range(n))


def q8_0(n):
    return b"".join(struct.pack("<e", 0.01) + bytes((i * 7) % 256 for i in range(32)) for _ in range(n // 32))


def mxfp4(n, bad_block=None):
    """n values of MXFP4 (17-byte blocks: E8M0 scale byte, 16 code bytes); bad_block gets scale 0xFF (NaN)."""
    return b"".join(bytes([0xFF if b == bad_block else 120 + b % 8]) + bytes((b * 31 + i * 7) % 256 for i in range(16))
                    for b in range(n // 32))


def iq4_xs(n):
    """n values of IQ4_XS (136-byte super-blocks: f16 d, u16 scales_h, 4 bytes scales_l, 128 code bytes)."""
    return b"".join(struct.pack("<eH", 0.01, 0xA5A5) + bytes([0x12, 0x34, 0x56, 0x78]) +
                    bytes((b * 13 + i * 5) % 256 for i in range(128)) for b in range(n // 256))


def model_gguf(arch, vocab=16, embd=32, ff=64, head=4, kv=2, extra=(), extra_tensors=()):
    kvs = [("general.architecture", T_STR, arch), ("general.name", T_STR, "tiny"),
           (arch + ".block_count", T_U32, 1), (arch + ".embedding_length", T_U32, embd),
           (arch + ".feed_forward_length", T_U32, ff), (arch + ".context_length", T_U32, 64),
           (arch + ".attention.head_count", T_U32, head), (arch + ".attention.head_count_kv", T_U32, kv),
           (arch + ".attention.layer_norm_rms_epsilon", T_F32, 1e-5), (arch + ".rope.freq_base", T_F32, 10000.0),
           ("tokenizer.ggml.eos_token_id", T_U32, 2), ("general.alignment", T_U32, 32)]
    hd = embd // head
    ts = [("token_embd.weight", [embd, vocab], 0, f32s(embd * vocab)),
          ("output_norm.weight", [embd], 0, f32s(embd)),
          ("blk.0.attn_q.weight", [embd, embd], 8, q8_0(embd * embd)),
          ("blk.0.attn_k.weight", [embd, kv * hd], 1, struct.pack("<%de" % (embd * kv * hd), *([0.5] * (embd * kv * hd))))]
    return gguf(kvs + list(extra), ts + list(extra_tensors))


# the per-layer keys of the families that attend differently per layer
LAYER_KEYS = {
    "gemma2": [("gemma2.attention.sliding_window", T_U32, 4), ("gemma2.attn_logit_softcapping", T_F32, 50.0),
               ("gemma2.final_logit_softcapping", T_F32, 30.0),
               ("gemma2.attention.sliding_window_pattern", T_ARR, (T_BOOL, [True]))],
    "gemma3": [("gemma3.attention.sliding_window", T_U32, 4), ("gemma3.rope.freq_base_swa", T_F32, 10000.0),
               ("gemma3.rope.scaling.type", T_STR, "linear"), ("gemma3.rope.scaling.factor", T_F32, 8.0),
               ("gemma3.attention.sliding_window_pattern", T_U32, 1)],
    "smollm3": [("smollm3.rope.dimension_count", T_U32, 8)],
    "granite": [("granite.logit_scale", T_F32, 8.0), ("granite.embedding_scale", T_F32, 12.0),
                ("granite.residual_scale", T_F32, 0.22), ("granite.attention.scale", T_F32, 0.0078125)],
    "phi3": [("phi3.rope.dimension_count", T_U32, 6), ("phi3.rope.scaling.original_context_length", T_U32, 32),
             ("phi3.rope.scaling.attn_factor", T_F32, 1.1)],
}
LAYER_TENSORS = {"phi3": [("rope_factors_long.weight", [3], 0, struct.pack("<3f", 1.0, 2.0, 4.0)),
                          ("rope_factors_short.weight", [3], 0, struct.pack("<3f", 1.0, 1.5, 2.0))]}


def moe_gguf(arch="qwen3moe", vocab=16, embd=32, head=4, kv=2, experts=4, used=2, ff=32):
    """A whole one-layer mixture of experts (every tensor the loader binds),
    so that a mutation reaches the expert keys and 3-D expert tensors."""
    hd = embd // head
    kvs = [("general.architecture", T_STR, arch), ("general.name", T_STR, "tiny moe"),
           (arch + ".block_count", T_U32, 1), (arch + ".embedding_length", T_U32, embd),
           (arch + ".feed_forward_length", T_U32, 2 * ff), (arch + ".context_length", T_U32, 64),
           (arch + ".attention.head_count", T_U32, head), (arch + ".attention.head_count_kv", T_U32, kv),
           (arch + ".attention.key_length", T_U32, hd),
           (arch + ".attention.layer_norm_rms_epsilon", T_F32, 1e-6), (arch + ".rope.freq_base", T_F32, 10000.0),
           (arch + ".expert_count", T_U32, experts), (arch + ".expert_used_count", T_U32, used),
           (arch + ".expert_feed_forward_length", T_U32, ff),
           ("tokenizer.ggml.eos_token_id", T_U32, 2), ("general.alignment", T_U32, 32)]
    ts = [("token_embd.weight", [embd, vocab], 0, f32s(embd * vocab)), ("output_norm.weight", [embd], 0, f32s(embd)),
          ("blk.0.attn_norm.weight", [embd], 0, f32s(embd)),
          ("blk.0.attn_q.weight", [embd, head * hd], 8, q8_0(embd * head * hd)),
          ("blk.0.attn_k.weight", [embd, kv * hd], 8, q8_0(embd * kv * hd)),
          ("blk.0.attn_v.weight", [embd, kv * hd], 8, q8_0(embd * kv * hd)),
          ("blk.0.attn_output.weight", [head * hd, embd], 8, q8_0(embd * head * hd)),
          ("blk.0.attn_q_norm.weight", [hd], 0, f32s(hd)), ("blk.0.attn_k_norm.weight", [hd], 0, f32s(hd)),
          ("blk.0.ffn_norm.weight", [embd], 0, f32s(embd)),
          ("blk.0.ffn_gate_inp.weight", [embd, experts], 0, f32s(embd * experts)),
          ("blk.0.ffn_gate_exps.weight", [embd, ff, experts], 8, q8_0(embd * ff * experts)),
          ("blk.0.ffn_up_exps.weight", [embd, ff, experts], 8, q8_0(embd * ff * experts)),
          ("blk.0.ffn_down_exps.weight", [ff, embd, experts], 8, q8_0(embd * ff * experts))]
    return gguf(kvs, ts)


def tok_gguf(spec):
    kvs = [("general.architecture", T_STR, "llama"), ("tokenizer.ggml.model", T_STR, spec["model"]),
           ("tokenizer.ggml.tokens", T_ARR, (T_STR, spec["tokens"]))]
    if spec.get("scores"):
        kvs.append(("tokenizer.ggml.scores", T_ARR, (T_F32, spec["scores"])))
    if spec.get("token_type"):
        kvs.append(("tokenizer.ggml.token_type", T_ARR, (T_I32, spec["token_type"])))
    if spec.get("merges"):
        kvs.append(("tokenizer.ggml.merges", T_ARR, (T_STR, spec["merges"])))
    kvs += [("tokenizer.ggml.bos_token_id", T_U32, spec["bos"]), ("tokenizer.ggml.eos_token_id", T_U32, spec["eos"]),
            ("tokenizer.ggml.add_bos_token", T_BOOL, bool(spec["add_bos"]))]
    if spec.get("pre"):
        kvs.append(("tokenizer.ggml.pre", T_STR, spec["pre"]))
    return gguf(kvs, [])


# ---------------------------------------------------------- safetensors
def safetensors(tensors, meta=None):
    hdr, data = {}, b""
    if meta is not None:
        hdr["__metadata__"] = meta
    for name, dtype, shape, blob in tensors:
        hdr[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(blob)]}
        data += blob
    h = json.dumps(hdr).encode()
    h += b" " * ((-len(h)) % 8)
    return struct.pack("<Q", len(h)) + h + data


def main():
    # seeds are (re)written in place; regression inputs (regress-*, found by
    # fuzzing) live beside them and are kept
    # gguf: tiny models of each architecture family
    for arch in ("llama", "qwen3", "gpt2", "phi3"):
        put("gguf", arch + ".gguf", model_gguf(arch))
    for arch, kvs in LAYER_KEYS.items():
        put("gguf", arch + "_layers.gguf", model_gguf(arch, extra=kvs, extra_tensors=LAYER_TENSORS.get(arch, ())))
    put("gguf", "empty_v3.gguf", gguf([], []))
    # the byte-aligned MXFP4 (at an odd offset: alignment 1) and IQ4_XS, and an MXFP4 scale byte of 0xFF
    put("gguf", "mxfp4_iq4_xs.gguf", gguf([("general.alignment", T_U32, 1)],
                                           [("blk.0.ffn_up.weight", [96, 3], 39, mxfp4(288)),
                                            ("blk.0.ffn_down.weight", [256, 2], 23, iq4_xs(512))], align=1))
    put("gguf", "mxfp4_nan_scale.gguf", gguf([], [("blk.0.ffn_up.weight", [64, 2], 39, mxfp4(128, bad_block=3))]))
    put("gguf", "qwen3moe.gguf", moe_gguf())
    # tok_gguf: the repository's GGUF-style vocabularies written as GGUF
    for name in ("gguf_llama", "gguf_gpt2"):
        spec = json.load(open("tests/fixtures/tokenizer/%s.json" % name))
        put("tok_gguf", name + ".gguf", tok_gguf(spec))
    put("tok_gguf", "tiny_bpe.gguf", tok_gguf({"model": "gpt2", "tokens": ["a", "b", "ab", "<|endoftext|>"],
                                                "token_type": [1, 1, 1, 3], "merges": ["a b"], "bos": 3,
                                                "eos": 3, "add_bos": 0, "pre": "gpt-2"}))
    # safetensors
    put("safetensors", "f32.safetensors", safetensors([("w", "F32", [2, 3], f32s(6))], {"format": "pt"}))
    put("safetensors", "mixed.safetensors",
        safetensors([("a", "F16", [4], struct.pack("<4e", 1, 2, 3, 4)), ("b", "BF16", [2, 2], b"\x80\x3f" * 4),
                     ("c", "I32", [1], struct.pack("<i", 7))]))
    put("safetensors", "empty.safetensors", safetensors([]))
    # kv_block_file: KV tier block files (checksum 0: the target stamps it),
    # 2 tokens of one 16-byte slice, 2 slices, and a header alone
    def kvb(bs, ns, slice_bytes, version=1):
        head = b"KVLMBLK\0" + struct.pack("<II", version, 80) + bytes(range(16))
        head += struct.pack("<QQIIQQQ", 0x1234, 0, bs, ns, slice_bytes, ns * slice_bytes, 0)
        return head + struct.pack("<%di" % bs, *range(7, 7 + bs)) + bytes(ns * slice_bytes)
    put("kv_block_file", "one_slice.kvb", kvb(2, 1, 16))
    put("kv_block_file", "two_slices.kvb", kvb(4, 2, 32))
    put("kv_block_file", "version2.kvb", kvb(2, 1, 16, 2))
    put("kv_block_file", "header_only.kvb", kvb(2, 1, 16)[:80])
    # kv_pin_file: pin records (checksum 0: the target stamps it), of the
    # fingerprint 0..15: none, two pins, another version
    def pins(lists, version=1):
        body = b"".join(struct.pack("<I%di" % len(p), len(p), *p) for p in lists)
        return b"KVLMPINS" + struct.pack("<II", version, len(lists)) + bytes(range(16)) + \
            struct.pack("<QQ", len(body), 0) + body
    put("kv_pin_file", "none.pins", pins([]))
    put("kv_pin_file", "two.pins", pins([list(range(16)), list(range(100, 132))]))
    put("kv_pin_file", "version2.pins", pins([[5, 6]], 2))
    # llmc: the headers of the repository's llm.c checkpoints, plus a few data bytes
    for name in ("llmc_f32", "llmc_bf16"):
        put("llmc", name + ".bin", open("tests/fixtures/gpt2/%s.bin" % name, "rb").read()[:1024 + 64])
    # hf_config: the repository's config.json files
    for d in ("gpt2/hf_f32", "llama/gqa", "llama/qwen3", "llama/phi3", "llama/mistral_swa", "llama/llama3_rope",
              "llama/qwen2"):
        put("hf_config", d.replace("/", "_") + ".json", open("tests/fixtures/%s/config.json" % d, "rb").read())
    for d in ("gemma2", "gemma3", "smollm3", "granite", "qwen2_swa", "phi3_longrope"):
        put("hf_config", "layers_" + d + ".json", open("tests/fixtures/layers/%s/config.json" % d, "rb").read())
    # tok_json: the repository's tokenizer.json fixtures and a hand-made one
    for d in ("llama2", "qwen2", "llama3"):
        p = "tests/fixtures/tokenizer/%s/tokenizer.json" % d
        if os.path.exists(p):
            put("tok_json", d + ".json", open(p, "rb").read())
    put("tok_json", "tiny.json", json.dumps({
        "added_tokens": [{"id": 4, "content": "<|end|>", "special": True}],
        "normalizer": None, "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False},
        "decoder": {"type": "ByteLevel"},
        "model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2, "\u0120": 3, "<|end|>": 4},
                  "merges": ["a b"]}}))
    # tok_bpe: first byte picks vocab.json+merges.txt (even) or encoder.json+vocab.bpe (odd)
    vocab = json.dumps({"a": 0, "b": 1, "ab": 2, "\u0120a": 3, "\u0120": 4, "<|endoftext|>": 5}).encode()
    merges = b"#version: 0.2\na b\n\xc4\xa0 a\n"
    put("tok_bpe", "hf_pair", b"\0" + vocab + SEP + merges)
    put("tok_bpe", "openai_pair", b"\1" + vocab + SEP + merges)
    put("tok_bpe", "with_config", b"\0" + vocab + SEP + merges + SEP +
        json.dumps({"bos_token": "<|endoftext|>", "eos_token": {"content": "<|endoftext|>"},
                    "add_bos_token": True}).encode())
    # template: the repository's smaller templates with a conversation, and hand-made ones
    conv = json.dumps([{"role": "system", "content": "S"}, {"role": "user", "content": "Hi"},
                       {"role": "assistant", "content": "Yo"}, {"role": "user", "content": "More"}]).encode()
    tdir = "tests/fixtures/templates"
    for f in sorted(os.listdir(tdir)):
        if f.endswith(".jinja") and os.path.getsize(os.path.join(tdir, f)) <= 8192:
            put("template", f[:-6], open(os.path.join(tdir, f), "rb").read() + SEP + conv)
    put("template", "hand_loops", "{% for m in messages %}{{ loop.index }}:{{ m.role|upper }}={{ m.content|trim }}"
        "{% if not loop.last %}, {% endif %}{% endfor %}{{ messages|length }}{{ (messages|selectattr('role', "
        "'equalto', 'user')|list)[0].content }}")
    put("template", "hand_macro", "{% macro f(x, y=2) %}{{ x ~ y }}{% endmacro %}{% set ns = namespace(a=0) %}"
        "{% for i in range(3) %}{% set ns.a = ns.a + i %}{% endfor %}{{ f(ns.a) }}{{ {'k': [1, 2.5, none, true]}|"
        "tojson }}{{ 'abc'[1:] }}{{ raise_exception('no') if false else strftime_now('%Y') }}")
    # openai_request: first byte 0 completions, 1 chat, 2 tokenize, 3 detokenize
    reqs = [
        (0, {"prompt": "Hello", "max_tokens": 5, "temperature": 0.5, "stop": ["\n", "x"], "logprobs": 2}),
        (0, {"prompt": [[1, 2, 3], [4, 5]], "n": 2, "seed": 7, "logit_bias": {"50256": -100}, "top_k": 10}),
        (0, {"model": "m", "prompt": ["a", "b"], "stream": True, "stream_options": {"include_usage": True},
             "max_tokens": 10.0, "user": "u", "best_of": 1, "echo": False, "suffix": ""}),
        (1, {"messages": [{"role": "system", "content": "S"}, {"role": "user", "content": "Hi"}],
             "max_completion_tokens": 4, "logprobs": True, "top_logprobs": 2, "response_format": {"type": "text"},
             "tools": [], "tool_choice": "none", "parallel_tool_calls": False, "reasoning_effort": "low",
             "service_tier": "auto", "store": False, "metadata": {"k": "v"}}),
        (1, {"messages": [{"role": "user", "content": [{"type": "text", "text": "a"}]},
                          {"role": "assistant", "content": None, "tool_calls": [
                              {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{\"x\":1}"}}]},
                          {"role": "tool", "content": "2", "tool_call_id": "c"}],
             "tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}]}),
        (2, {"prompt": "Hello <|endoftext|>", "add_special_tokens": False}),
        (2, {"messages": [{"role": "user", "content": "Hi"}], "add_generation_prompt": False}),
        (3, {"tokens": [15496, 11, 995]}),
        (1, {"messages": [{"role": "user", "content": "Weather?"}], "tool_choice": {"type": "function",
             "function": {"name": "get_weather"}}, "tools": [{"type": "function", "function": {
                 "name": "get_weather", "description": "d", "strict": True, "parameters": {
                     "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]}),
        (0, {"prompt": "a", "response_format": {"type": "json_schema", "json_schema": {
            "name": "p", "strict": True, "schema": {"type": "object", "properties": {"n": {"type": "integer"}}}}}}),
        (1, {"messages": [{"role": "user", "content": "a"}], "grammar": "root ::= \"yes\" | \"no\""}),
        (0, {"prompt": "a", "regex": "[0-9]{3}"}),
    ]
    for i, (kind, body) in enumerate(reqs):
        put("openai_request", "req%d" % i, bytes([kind]) + json.dumps(body).encode())
    put("openai_request", "nul", b"\0{\"prompt\": \"a\\u0000b\"}")
    put("openai_request", "bad_json", b"\1{\"messages\": [}")
    # anthropic_request: first byte even /v1/messages, odd /v1/messages/count_tokens
    weather = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    anth = [
        (0, {"model": "m", "max_tokens": 8, "system": "Be brief.", "messages": [{"role": "user", "content": "Hi"}],
             "temperature": 0.5, "top_p": 0.9, "top_k": 5, "stop_sequences": ["END"], "stream": True,
             "metadata": {"user_id": "u"}}),
        (0, {"max_tokens": 40, "system": [{"type": "text", "text": "S", "cache_control": {"type": "ephemeral"}}],
             "messages": [{"role": "user", "content": [{"type": "text", "text": "Weather?"}]},
                          {"role": "assistant", "content": [{"type": "thinking", "thinking": "t", "signature": "s"},
                                                            {"type": "tool_use", "id": "toolu_1", "name": "w",
                                                             "input": {"city": "Paris"}}]},
                          {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1",
                                                        "content": [{"type": "text", "text": "21 C"}],
                                                        "is_error": False}]}],
             "tools": [{"name": "w", "description": "d", "input_schema": weather}],
             "tool_choice": {"type": "tool", "name": "w"}, "thinking": {"type": "enabled", "budget_tokens": 1024}}),
        (0, {"max_tokens": 4, "messages": [{"role": "user", "content": "x"}],
             "tools": [{"name": "w", "input_schema": weather}], "tool_choice": {"type": "any"}}),
        (1, {"model": "m", "messages": [{"role": "user", "content": "Hi"}], "tools": [{"name": "w",
             "input_schema": weather}], "tool_choice": {"type": "none"}}),
    ]
    for i, (kind, body) in enumerate(anth):
        put("anthropic_request", "req%d" % i, bytes([kind]) + json.dumps(body).encode())
    put("anthropic_request", "bad_json", b"\0{\"messages\": [}")
    # infill_request: first byte even POST /infill, odd /v1/completions (suffix)
    fim = [
        (0, {"input_prefix": "def f(x):\n    return", "input_suffix": "\nprint(f(2))\n", "n_predict": 4,
             "temperature": 0, "stream": True}),
        (0, {"model": "m", "input_prefix": "the", "input_suffix": "inter", "prompt": "<|fim_pad|>x",
             "input_extra": [{"filename": "a.py", "text": "three"}, {"text": "ii"}], "cache_prompt": True,
             "max_tokens": 8}),
        (0, {"input_prefix": "a" * 80, "input_suffix": "b" * 40, "input_extra": [{"text": "c" * 30}],
             "n_predict": -1}),
        (1, {"prompt": "def g():", "suffix": "\n    pass\n", "max_tokens": 3, "stop": ["\n"]}),
    ]
    for i, (kind, body) in enumerate(fim):
        put("infill_request", "req%d" % i, bytes([kind]) + json.dumps(body).encode())
    put("infill_request", "bad_extra", b"\0{\"input_prefix\": \"a\", \"input_suffix\": \"b\", \"input_extra\": [{}]}")
    # embed_request: the body
    emb = [
        {"model": "m", "input": "the fox", "encoding_format": "float"},
        {"input": ["a", "bc", "def"], "encoding_format": "base64", "dimensions": 8, "user": "u"},
        {"input": [1, 2, 3]},
        {"input": [[1, 2], [3], [4, 5, 6]], "dimensions": 16},
    ]
    for i, body in enumerate(emb):
        put("embed_request", "req%d" % i, json.dumps(body).encode())
    put("embed_request", "bad_mixed", b"{\"input\": [\"a\", [1], 2, []]}")
    # responses_request: the body; previous_response_id "resp_a" is found
    resp = [
        {"model": "m", "input": "Hi", "instructions": "Be brief.", "max_output_tokens": 8, "temperature": 0.7,
         "top_p": 0.9, "store": False, "metadata": {"k": "v"}, "stream": True, "truncation": "disabled"},
        {"previous_response_id": "resp_a", "input": [{"type": "function_call_output", "call_id": "call_1",
                                                      "output": "21 C"}], "tools": [{"type": "function",
                                                      "name": "f", "parameters": weather, "strict": True}]},
        {"input": [{"role": "developer", "content": [{"type": "input_text", "text": "S"}]},
                   {"type": "message", "role": "user", "content": "Weather?"},
                   {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"},
                   {"type": "function_call_output", "call_id": "c", "output": "1"},
                   {"type": "reasoning", "id": "rs", "summary": []}],
         "tools": [{"type": "function", "name": "f", "parameters": weather}],
         "tool_choice": {"type": "function", "name": "f"}, "parallel_tool_calls": False},
        {"input": "Name", "text": {"format": {"type": "json_schema", "name": "k", "schema": weather,
                                              "strict": True}}, "include": [], "reasoning": {}},
    ]
    for i, body in enumerate(resp):
        put("responses_request", "req%d" % i, json.dumps(body).encode())
    put("responses_request", "bad_json", b"{\"input\": [}")
    # stream: stop strings (one a line), the separator, then bytes / token ids
    put("stream", "one_stop", b"END" + SEP + b"some text then END and more")
    put("stream", "overlap", b"aab\nab\n\xc3\xa9" + SEP + b"xxaaab\xc3\xa9\xff\xfe\x00\x01 tokens")
    put("stream", "no_stop", SEP + "plain text, no stops \u20ac".encode())
    # tool_calls: the family (0 generic, 1 hermes, 2 llama3, 3 mistral), a seed byte, the model's output
    call = '{"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}'
    put("tool_calls", "hermes", b"\1\7" + ("Sure.\n<tool_call>\n" + call + "\n</tool_call>\n<tool_call>{\"name\": "
                                        "\"b\", \"arguments\": {\"s\": \"}\\\"\"}}</tool_call> done").encode())
    put("tool_calls", "llama3", b"\2\3" + b'{"name": "a", "parameters": {"n": 1}}; <|python_tag|>'
        b'{"name": "b", "parameters": {}}')
    put("tool_calls", "mistral", b"\3\1" + ("[TOOL_CALLS][" + call + "]x[TOOL_CALLS]f[CALL_ID]abc123456[ARGS]"
                                           "{\"y\": [1, {\"z\": null}]}").encode())
    put("tool_calls", "generic", b"\0\5" + ("not a call <tool_ and {\"answer\": 1} " + call).encode())

    # grammar: first byte 0 GBNF, 1 JSON Schema, 2 regex, 3 wrapped GBNF; then source, SEP, text
    put("grammar", "gbnf_expr", b"\0root ::= e\ne ::= t (\"+\" t)*\nt ::= \"(\" e \")\" | [0-9]+ # sum\n" + SEP + b"(1+22)+3")
    put("grammar", "gbnf_utf8", b"\0root ::= [^a-c\\n]{2,3} \"\\u00e9\" .? x?\nx ::= \"\" | [\\U0001F600-\\U0001F64F]+" + SEP +
        "\u20acz\u00e9\U0001F600".encode())
    put("grammar", "schema", b"\1" + json.dumps({
        "type": "object", "properties": {
            "name": {"type": "string", "maxLength": 3}, "n": {"type": "integer", "minimum": -5, "maximum": 120},
            "x": {"type": "number", "exclusiveMinimum": 0.5, "maximum": 3}, "d": {"type": "string", "format": "date"},
            "t": {"anyOf": [{"$ref": "#/$defs/t"}, {"type": "null"}]}, "e": {"enum": ["a", 1, None, [True]]},
            "p": {"type": "string", "pattern": "^[a-c]+x$"}},
        "required": ["n"], "$defs": {"t": {"type": "array", "items": {"$ref": "#/$defs/t"}, "maxItems": 2}}}).encode() +
        SEP + b'{"name":"\xc3\xa9ab", "n": 7, "t": [[], [[]]], "d": "2024-02-28"}')
    put("grammar", "regex", b"\2^(\\d{3}-)?[A-Z][a-z]*(?: [a-z]+)+|\\w+@\\w+\\.com$" + SEP + b"555-Ab cd")
    put("grammar", "wrapped", b"\3root ::= \"{\" [a-z]* \"}\"" + SEP + b"<w>{ab}</w>")


if __name__ == "__main__":
    main()
