#!/usr/bin/python3
"""kvlm's GGUF converter: a Hugging Face checkpoint directory to a GGUF
version 3 file, plus a GGUF reader for checking what was written.

Usage:
    write_gguf.py HF_DIR OUT.gguf [--type f32|f16|bf16|q8_0|q4_0] [--name NAME]
        Converts a GPT2LMHeadModel, LlamaForCausalLM, MistralForCausalLM,
        Qwen2ForCausalLM, Qwen3ForCausalLM or Phi3ForCausalLM directory (config.json and model.safetensors, or a
        sharded model.safetensors.index.json; F32, F16 or BF16 weights).
        --type sets the storage of the 2-D weight matrices (embeddings,
        projections, output head; default f16). Vectors (norm weights,
        biases, rope_freqs) always stay F32. For q8_0/q4_0, a matrix whose
        rows are not a multiple of 32 values is written as F16 instead (a
        warning says which). Tokenizer files in HF_DIR (tokenizer.json,
        vocab.json + merges.txt, encoder.json + vocab.bpe, or a SentencePiece
        tokenizer.model) become tokenizer.ggml.* metadata.
    write_gguf.py dump FILE.gguf
        Prints the metadata (arrays abridged) and the tensor table.
    write_gguf.py selftest
        Quantiser round trips on known values, writer/reader round trip,
        and the Q/K row permutation against tools/llama_reference.py.

What is written (see also docs/gguf.md and src/formats/gguf.h):
    general.architecture  "llama" (Llama and Mistral sources), "qwen2",
                          "qwen3", "phi3" or "gpt2", with the hyperparameters
                          under that prefix
                          (context_length, embedding_length, block_count,
                          feed_forward_length, attention.head_count,
                          attention.head_count_kv, attention.key_length,
                          attention.layer_norm_rms_epsilon or
                          layer_norm_epsilon, rope.freq_base,
                          rope.dimension_count, vocab_size, and
                          attention.sliding_window for Phi-3 (0 without one,
                          as llama.cpp writes it) and for a Mistral source
                          with a window; Phi-3 also
                          rope.scaling.original_context_length), general.alignment
                          (32), general.file_type, general.quantization_version.
    tensor names          llama.cpp's: token_embd, blk.N.attn_norm, attn_q,
                          attn_k, attn_v, attn_output, ffn_norm, ffn_gate,
                          ffn_up, ffn_down, output_norm, output (absent when
                          the head is tied); qwen3 adds attn_q_norm and
                          attn_k_norm; phi3 has attn_qkv (Hugging Face's
                          qkv_proj, rows [q; k; v]) and ffn_up holding
                          gate_up_proj (rows [gate; up]) with no ffn_gate; gpt2: token_embd, position_embd,
                          blk.N.attn_norm(.bias), attn_qkv, attn_output,
                          ffn_norm, ffn_up, ffn_down (+ .bias), output_norm.
    layout                matrices [out, in] as GGUF ne = [in, out]; GPT-2's
                          Conv1D [in, out] weights are transposed. For
                          architecture "llama" the rows of attn_q/attn_k (and
                          their biases) are permuted per head so that rotary
                          pairs are (2i, 2i+1) (what llama.cpp expects);
                          "qwen2", "qwen3" and "phi3" keep Hugging Face's order
                          (pairs (i, i+d/2), llama.cpp's neox rope).
                          Llama 3 rope_scaling becomes rope_freqs.weight
                          [head_dim/2] F32: frequency i is divided by it.
    quantisation          Q8_0: per 32 values d = max|x| / 127 (stored f16),
                          q = round(x / d). Q4_0: m = the value of largest
                          magnitude, d = m / -8 (f16), code = clamp(floor(x/d
                          + 8.5), 0, 15); byte j holds value j (low nibble)
                          and value j + 16 (high nibble). Identical bytes to
                          kvlm's C quantiser (src/kernels/quant_scalar.c).

Needs NumPy (Debian python3-numpy); the selftest also PyTorch. Reads the
safetensors files through memory mappings, one tensor at a time, so a large
model converts in little more memory than its largest matrix.

Importable: convert(hf_dir, out, qtype), read_gguf(path), quantize(x, qtype),
dequantize(raw, qtype, n), GGUFWriter, llama_permute(w, n_heads). The
tokenizer files are read by tools/gguf_vocab.py.
"""
import json, math, mmap, os, struct, sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gguf_vocab import tokenizer_metadata  # noqa: E402

GGUF_VERSION = 3
ALIGNMENT = 32
QK = 32

# metadata value types
U8, I8, U16, I16, U32, I32, F32V, BOOL, STRING, ARRAY, U64, I64, F64V = range(13)
_SCALAR_FMT = {U8: "<B", I8: "<b", U16: "<H", I16: "<h", U32: "<I", I32: "<i", F32V: "<f", BOOL: "<?",
               U64: "<Q", I64: "<q", F64V: "<d"}

# tensor types (ggml numbering) and their storage
T_F32, T_F16, T_Q4_0, T_Q8_0, T_BF16 = 0, 1, 2, 8, 30
TYPE_OF = {"f32": T_F32, "f16": T_F16, "bf16": T_BF16, "q8_0": T_Q8_0, "q4_0": T_Q4_0}
TYPE_NAME = {v: k for k, v in TYPE_OF.items()}
BLOCK = {T_F32: (1, 4), T_F16: (1, 2), T_BF16: (1, 2), T_Q8_0: (QK, 34), T_Q4_0: (QK, 18)}
# llama.cpp's general.file_type for files whose matrices are all of one type
FILE_TYPE = {T_F32: 0, T_F16: 1, T_Q4_0: 2, T_Q8_0: 7, T_BF16: 32}



def warn(msg):
    print("write_gguf: " + msg, file=sys.stderr)


# ---------------------------------------------------------------- quantisation

def _f16_saturated(d):
    """f32 scales rounded to f16 (nearest even), saturating at the largest finite f16."""
    return np.clip(d, np.float32(-65504), np.float32(65504)).astype(np.float16)


def _blocks(x):
    x = np.ascontiguousarray(x, dtype=np.float32)
    if x.size % QK:
        raise ValueError("%d values are not a whole number of %d-value blocks" % (x.size, QK))
    return x.reshape(-1, QK)


def _divide(b, dd):
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(dd[:, None] != 0, b / dd[:, None], np.float32(0)).astype(np.float32)


def quantize_q8_0(x):
    b = _blocks(x)
    d16 = _f16_saturated((np.abs(b).max(axis=1) / np.float32(127)).astype(np.float32))
    v = _divide(b, d16.astype(np.float32))
    q = np.clip(np.sign(v) * np.floor(np.abs(v) + np.float32(0.5)), -127, 127).astype(np.int8)
    out = np.empty(len(b), dtype=[("d", "<f2"), ("q", "i1", (QK,))])
    out["d"], out["q"] = d16, q
    return out.tobytes()


def quantize_q4_0(x):
    b = _blocks(x)
    m = b[np.arange(len(b)), np.abs(b).argmax(axis=1)]
    with np.errstate(invalid="ignore"):
        d = np.where(m != 0, m / np.float32(-8), np.float32(0)).astype(np.float32)
    d16 = _f16_saturated(d)
    v = _divide(b, d16.astype(np.float32))
    code = np.clip(np.floor(v + np.float32(8.5)), 0, 15).astype(np.uint8)
    out = np.empty(len(b), dtype=[("d", "<f2"), ("q", "u1", (QK // 2,))])
    out["d"], out["q"] = d16, code[:, :QK // 2] | (code[:, QK // 2:] << 4)
    return out.tobytes()


def to_bf16_bits(x):
    """f32 -> bf16 bit patterns, round to nearest even, NaN kept quiet."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    nan = (u & 0x7FFFFFFF) > 0x7F800000
    return np.where(nan, ((u >> 16) | 0x40).astype(np.uint16), r)


def quantize(x, qtype):
    """Raw little-endian bytes of x (float32, row-major, rows of the last dim) in qtype."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    if qtype == T_F32:
        return x.astype("<f4").tobytes()
    if qtype == T_F16:
        return x.astype("<f2").tobytes()
    if qtype == T_BF16:
        return to_bf16_bits(x).astype("<u2").tobytes()
    if qtype == T_Q8_0:
        return quantize_q8_0(x)
    if qtype == T_Q4_0:
        return quantize_q4_0(x)
    raise ValueError("tensor type %d is not written" % qtype)


def dequantize(raw, qtype, n):
    """n float32 values from raw bytes of qtype."""
    if qtype == T_F32:
        return np.frombuffer(raw, "<f4", n).astype(np.float32)
    if qtype == T_F16:
        return np.frombuffer(raw, "<f2", n).astype(np.float32)
    if qtype == T_BF16:
        return (np.frombuffer(raw, "<u2", n).astype(np.uint32) << 16).view(np.float32)
    if qtype == T_Q8_0:
        blk = np.frombuffer(raw, [("d", "<f2"), ("q", "i1", (QK,))], n // QK)
        return (blk["d"].astype(np.float32)[:, None] * blk["q"].astype(np.float32)).reshape(-1)
    if qtype == T_Q4_0:
        blk = np.frombuffer(raw, [("d", "<f2"), ("q", "u1", (QK // 2,))], n // QK)
        codes = np.concatenate([blk["q"] & 15, blk["q"] >> 4], axis=1).astype(np.float32) - 8
        return (blk["d"].astype(np.float32)[:, None] * codes).reshape(-1)
    raise ValueError("tensor type %d is not read" % qtype)


def nbytes(qtype, ne):
    per, size = BLOCK[qtype]
    if ne[0] % per:
        raise ValueError("row of %d values is not a whole number of %d-value blocks" % (ne[0], per))
    return math.prod(ne) // per * size


# ---------------------------------------------------------------- writer

def _pack_str(s):
    b = s.encode("utf-8") if isinstance(s, str) else bytes(s)
    return struct.pack("<Q", len(b)) + b


def _pack_value(vtype, value):
    if vtype == STRING:
        return _pack_str(value)
    if vtype == BOOL:
        return struct.pack("<B", 1 if value else 0)
    return struct.pack(_SCALAR_FMT[vtype], value)


class GGUFWriter:
    """Collects metadata and tensors, then writes header, infos, padding and
    the data (each tensor padded to the alignment) in one pass. A tensor's
    bytes come from a callable, called once while writing."""

    def __init__(self, alignment=ALIGNMENT):
        self.alignment = alignment
        self.kv, self.keys, self.tensors = [], set(), []

    def add(self, key, vtype, value, elem=None):
        if key in self.keys:
            raise ValueError("metadata key %s written twice" % key)
        self.keys.add(key)
        self.kv.append((key, vtype, value, elem))

    def add_array(self, key, elem, values):
        self.add(key, ARRAY, list(values), elem)

    def add_tensor(self, name, qtype, ne, produce):
        """ne: GGUF dims, ne[0] contiguous; produce() -> bytes."""
        if any(t[0] == name for t in self.tensors):
            raise ValueError("tensor %s written twice" % name)
        self.tensors.append((name, qtype, list(ne), produce, nbytes(qtype, ne)))

    def _kv_bytes(self):
        out = []
        for key, vtype, value, elem in self.kv:
            out.append(_pack_str(key) + struct.pack("<I", vtype))
            if vtype == ARRAY:
                out.append(struct.pack("<IQ", elem, len(value)))
                if elem == STRING:
                    out.extend(_pack_str(v) for v in value)
                elif elem == BOOL:
                    out.append(bytes(1 if v else 0 for v in value))
                else:
                    out.append(np.asarray(value, dtype=np.dtype(_SCALAR_FMT[elem])).tobytes())
            else:
                out.append(_pack_value(vtype, value))
        return b"".join(out)

    def write(self, path):
        a = self.alignment
        pad = lambda n: (a - n % a) % a
        head = [b"GGUF", struct.pack("<IQQ", GGUF_VERSION, len(self.tensors), len(self.kv)), self._kv_bytes()]
        off = 0
        for name, qtype, ne, _, size in self.tensors:
            head.append(_pack_str(name) + struct.pack("<I", len(ne)) + struct.pack("<%dQ" % len(ne), *ne) +
                        struct.pack("<IQ", qtype, off))
            off += size + pad(size)
        head = b"".join(head)
        tmp = path + ".tmp"
        with open(tmp, "wb") as f:
            f.write(head + bytes(pad(len(head))))
            for name, qtype, ne, produce, size in self.tensors:
                data = produce()
                if len(data) != size:
                    raise AssertionError("tensor %s: %d bytes produced, %d expected" % (name, len(data), size))
                f.write(data)
                f.write(bytes(pad(size)))
        os.replace(tmp, path)


# ---------------------------------------------------------------- reader

class _Cursor:
    def __init__(self, buf, path):
        self.b, self.o, self.path = buf, 0, path

    def take(self, n, what):
        if n > len(self.b) - self.o:
            raise ValueError("%s: %s: file ends at %d" % (self.path, what, len(self.b)))
        r = self.b[self.o:self.o + n]
        self.o += n
        return r

    def unpack(self, fmt, what):
        return struct.unpack(fmt, self.take(struct.calcsize(fmt), what))[0]

    def string(self, what):
        return bytes(self.take(self.unpack("<Q", what), what)).decode("utf-8", "surrogateescape")


def read_gguf(path, dequant=True):
    """(metadata {key: value}, tensors {name: (type, ne, float32 array in
    row-major view shape [ne[-1], ..., ne[0]])}); with dequant=False the
    tensor values are the raw bytes instead."""
    with open(path, "rb") as f:
        buf = f.read()
    c = _Cursor(memoryview(buf), path)
    if bytes(c.take(4, "magic")) != b"GGUF":
        raise ValueError(path + ": not a GGUF file")
    version, nt, nkv = c.unpack("<I", "version"), c.unpack("<Q", "tensor_count"), c.unpack("<Q", "kv_count")
    if version not in (2, 3):
        raise ValueError("%s: version %d" % (path, version))

    def value(t, what):
        if t == STRING:
            return c.string(what)
        if t == ARRAY:
            et, n = c.unpack("<I", what), c.unpack("<Q", what)
            return [value(et, what) for _ in range(n)]
        v = c.unpack(_SCALAR_FMT[t], what)
        return bool(v) if t == BOOL else v

    meta = {}
    for _ in range(nkv):
        k = c.string("key")
        meta[k] = value(c.unpack("<I", k), k)
    align = int(meta.get("general.alignment", ALIGNMENT))
    infos = []
    for _ in range(nt):
        name = c.string("tensor name")
        nd = c.unpack("<I", name)
        ne = [c.unpack("<Q", name) for _ in range(nd)]
        infos.append((name, ne, c.unpack("<I", name), c.unpack("<Q", name)))
    data = c.o + (align - c.o % align) % align
    tensors = {}
    for name, ne, t, off in infos:
        size = nbytes(t, ne)
        raw = buf[data + off:data + off + size]
        if len(raw) != size or off % align:
            raise ValueError("%s: tensor %s outside the file or misaligned" % (path, name))
        tensors[name] = (t, ne, dequantize(raw, t, math.prod(ne)).reshape(ne[::-1]) if dequant else raw)
    return meta, tensors


# ---------------------------------------------------------------- safetensors input

class SafeTensors:
    """One .safetensors file through a memory mapping; get() returns one
    tensor as float32 (F32, F16 and BF16 sources)."""

    SIZES = {"F32": 4, "F16": 2, "BF16": 2, "F64": 8}

    def __init__(self, path):
        self.path = path
        self.f = open(path, "rb")
        self.mm = mmap.mmap(self.f.fileno(), 0, access=mmap.ACCESS_READ)
        n = struct.unpack("<Q", self.mm[:8])[0]
        if n > len(self.mm) - 8:
            raise ValueError(path + ": header length beyond the file")
        self.header = json.loads(self.mm[8:8 + n])
        self.header.pop("__metadata__", None)
        self.base = 8 + n
        for name, e in self.header.items():
            b, en = e["data_offsets"]
            if e["dtype"] not in self.SIZES:
                raise ValueError("%s: tensor %s has dtype %s (F32, F16, BF16, F64 are read)" % (path, name, e["dtype"]))
            if not 0 <= b <= en <= len(self.mm) - self.base or en - b != math.prod(e["shape"]) * self.SIZES[e["dtype"]]:
                raise ValueError("%s: tensor %s: bad data_offsets" % (path, name))

    def get(self, name):
        e = self.header[name]
        b, en = e["data_offsets"]
        raw = self.mm[self.base + b:self.base + en]
        if e["dtype"] == "BF16":
            arr = (np.frombuffer(raw, "<u2").astype(np.uint32) << 16).view(np.float32)
        else:
            arr = np.frombuffer(raw, {"F32": "<f4", "F16": "<f2", "F64": "<f8"}[e["dtype"]]).astype(np.float32)
        return arr.reshape(e["shape"])


class Checkpoint:
    def __init__(self, d):
        self.dir = d
        with open(os.path.join(d, "config.json")) as f:
            self.config = json.load(f)
        index = os.path.join(d, "model.safetensors.index.json")
        if os.path.exists(index):
            with open(index) as f:
                wmap = json.load(f)["weight_map"]
            files = {fn: SafeTensors(os.path.join(d, fn)) for fn in sorted(set(wmap.values()))}
            self.where = {name: files[fn] for name, fn in wmap.items()}
        else:
            st = SafeTensors(os.path.join(d, "model.safetensors"))
            self.where = {name: st for name in st.header}

    def has(self, name):
        return name in self.where

    def get(self, name):
        if name not in self.where:
            raise KeyError("%s: tensor %s is missing" % (self.dir, name))
        return self.where[name].get(name)


# ---------------------------------------------------------------- architectures

def llama_permute(w, n_heads):
    """Rows (output features) of a q/k weight [n_heads * d, ...] or bias, per
    head: Hugging Face rows i and i + d/2 become rows 2i and 2i + 1, so that
    rotating adjacent pairs equals Hugging Face's rotate-half."""
    d = w.shape[0] // n_heads
    return np.ascontiguousarray(w.reshape(n_heads, 2, d // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape))


def llama3_rope_factors(config, head_dim):
    """rope_freqs: per frequency, the divisor Llama 3's rope_scaling applies."""
    sc = config.get("rope_scaling") or {}
    theta = float(config.get("rope_theta", 10000.0))
    factor, lo, hi = float(sc["factor"]), float(sc["low_freq_factor"]), float(sc["high_freq_factor"])
    orig = float(sc["original_max_position_embeddings"])
    out = []
    for i in range(0, head_dim, 2):
        inv = theta ** (-i / head_dim)
        wl = 2 * math.pi / inv
        if wl < orig / hi:
            out.append(1.0)
        elif wl > orig / lo:
            out.append(factor)
        else:
            s = (orig / wl - lo) / (hi - lo)
            out.append(1.0 / ((1 - s) / factor + s))
    return np.array(out, dtype=np.float32)


class Plan:
    """What to write: metadata and (gguf name, source callable -> float32 array in
    [out, in] layout) pairs."""

    def __init__(self, arch):
        self.arch, self.kv, self.tensors = arch, [], []

    def meta(self, key, vtype, value, elem=None):
        self.kv.append((key if key.startswith(("general.", "tokenizer.")) else self.arch + "." + key,
                        vtype, value, elem))

    def tensor(self, name, fn):
        self.tensors.append((name, fn))


def plan_llama(ck):
    c = ck.config
    mt = c.get("model_type", "llama")
    arch = mt if mt in ("qwen2", "qwen3", "phi3") else "llama"
    if c.get("partial_rotary_factor", 1.0) != 1.0:
        raise ValueError("partial_rotary_factor %r is not converted" % c["partial_rotary_factor"])
    nh, C = int(c["num_attention_heads"]), int(c["hidden_size"])
    nkv = int(c.get("num_key_value_heads") or nh)
    hd = int(c.get("head_dim") or C // nh)
    L = int(c["num_hidden_layers"])
    p = Plan(arch)
    p.meta("general.name", STRING, c.get("_name_or_path") or os.path.basename(os.path.normpath(ck.dir)))
    p.meta("context_length", U32, int(c.get("max_position_embeddings", 2048)))
    p.meta("embedding_length", U32, C)
    p.meta("block_count", U32, L)
    p.meta("feed_forward_length", U32, int(c["intermediate_size"]))
    p.meta("attention.head_count", U32, nh)
    p.meta("attention.head_count_kv", U32, nkv)
    p.meta("attention.key_length", U32, hd)
    p.meta("attention.value_length", U32, hd)
    p.meta("attention.layer_norm_rms_epsilon", F32V, float(c.get("rms_norm_eps", 1e-6)))
    p.meta("rope.freq_base", F32V, float(c.get("rope_theta", 10000.0)))
    p.meta("rope.dimension_count", U32, hd)
    p.meta("vocab_size", U32, int(c["vocab_size"]))
    sc = c.get("rope_scaling") or {}
    kind = sc.get("rope_type", sc.get("type"))
    if kind == "linear":
        p.meta("rope.scaling.type", STRING, "linear")
        p.meta("rope.scaling.factor", F32V, float(sc["factor"]))
    elif kind == "llama3":
        p.tensor("rope_freqs.weight", lambda: llama3_rope_factors(c, hd))
    elif kind not in (None, "default"):
        raise ValueError("rope_scaling type %r is not converted (llama3, linear)" % kind)
    if mt == "phi3":
        p.meta("attention.sliding_window", U32, int(c.get("sliding_window") or 0))
        if c.get("original_max_position_embeddings"):
            p.meta("rope.scaling.original_context_length", U32, int(c["original_max_position_embeddings"]))
    elif mt == "mistral" and c.get("sliding_window"):
        p.meta("attention.sliding_window", U32, int(c["sliding_window"]))
    elif mt in ("qwen2", "qwen3") and c.get("use_sliding_window") and c.get("sliding_window"):
        raise ValueError("use_sliding_window (Qwen's per-layer window) is not converted")
    g = ck.get
    perm = (lambda w, n: llama_permute(w, n)) if arch == "llama" else (lambda w, n: w)
    p.tensor("token_embd.weight", lambda: g("model.embed_tokens.weight"))
    for i in range(L):
        s, b = "model.layers.%d." % i, "blk.%d." % i
        p.tensor(b + "attn_norm.weight", lambda s=s: g(s + "input_layernorm.weight"))
        projs = (("q_proj", "attn_q", nh), ("k_proj", "attn_k", nkv), ("v_proj", "attn_v", 0),
                 ("o_proj", "attn_output", 0))
        if ck.has(s + "self_attn.qkv_proj.weight"):
            if arch == "llama":
                raise ValueError("a fused qkv_proj is converted for phi3 only")
            projs = (("qkv_proj", "attn_qkv", 0), ("o_proj", "attn_output", 0))
        for proj, name, n in projs:
            for kind_ in ("weight", "bias"):
                src = s + "self_attn.%s.%s" % (proj, kind_)
                if kind_ == "bias" and not ck.has(src):
                    continue
                p.tensor(b + "%s.%s" % (name, kind_),
                         (lambda src=src, n=n: perm(g(src), n)) if n else (lambda src=src: g(src)))
        if mt == "qwen3":
            p.tensor(b + "attn_q_norm.weight", lambda s=s: g(s + "self_attn.q_norm.weight"))
            p.tensor(b + "attn_k_norm.weight", lambda s=s: g(s + "self_attn.k_norm.weight"))
        p.tensor(b + "ffn_norm.weight", lambda s=s: g(s + "post_attention_layernorm.weight"))
        mlp = (("gate_proj", "ffn_gate"), ("up_proj", "ffn_up"), ("down_proj", "ffn_down"))
        if mt == "phi3":
            mlp = (("gate_up_proj", "ffn_up"), ("down_proj", "ffn_down"))
        for proj, name in mlp:
            p.tensor(b + name + ".weight", lambda s=s, proj=proj: g(s + "mlp.%s.weight" % proj))
            if ck.has(s + "mlp.%s.bias" % proj):
                p.tensor(b + name + ".bias", lambda s=s, proj=proj: g(s + "mlp.%s.bias" % proj))
    p.tensor("output_norm.weight", lambda: g("model.norm.weight"))
    tied = c.get("tie_word_embeddings", False)
    if ck.has("lm_head.weight") and not (tied and np.array_equal(g("lm_head.weight"), g("model.embed_tokens.weight"))):
        p.tensor("output.weight", lambda: g("lm_head.weight"))
    return p


def plan_gpt2(ck):
    c = ck.config
    pre = "transformer." if ck.has("transformer.wte.weight") else ""
    g = lambda n: ck.get(pre + n)
    C, L = int(c["n_embd"]), int(c["n_layer"])
    p = Plan("gpt2")
    p.meta("general.name", STRING, c.get("_name_or_path") or os.path.basename(os.path.normpath(ck.dir)))
    p.meta("context_length", U32, int(c.get("n_positions", c.get("n_ctx", 1024))))
    p.meta("embedding_length", U32, C)
    p.meta("block_count", U32, L)
    p.meta("feed_forward_length", U32, int(c.get("n_inner") or 4 * C))
    p.meta("attention.head_count", U32, int(c["n_head"]))
    p.meta("attention.layer_norm_epsilon", F32V, float(c.get("layer_norm_epsilon", 1e-5)))
    p.meta("vocab_size", U32, int(c["vocab_size"]))
    p.tensor("token_embd.weight", lambda: g("wte.weight"))
    p.tensor("position_embd.weight", lambda: g("wpe.weight"))
    conv = lambda n: np.ascontiguousarray(g(n).T)  # Conv1D [in, out] -> [out, in]
    for i in range(L):
        s, b = "h.%d." % i, "blk.%d." % i
        for src, dst, transpose in (("ln_1", "attn_norm", False), ("attn.c_attn", "attn_qkv", True),
                                    ("attn.c_proj", "attn_output", True), ("ln_2", "ffn_norm", False),
                                    ("mlp.c_fc", "ffn_up", True), ("mlp.c_proj", "ffn_down", True)):
            p.tensor(b + dst + ".weight", (lambda n=s + src + ".weight": conv(n)) if transpose
                     else (lambda n=s + src + ".weight": g(n)))
            p.tensor(b + dst + ".bias", lambda n=s + src + ".bias": g(n))
    p.tensor("output_norm.weight", lambda: g("ln_f.weight"))
    p.tensor("output_norm.bias", lambda: g("ln_f.bias"))
    if ck.has("lm_head.weight") and not np.array_equal(ck.get("lm_head.weight"), g("wte.weight")):
        p.tensor("output.weight", lambda: ck.get("lm_head.weight"))
    return p


def convert(hf_dir, out, qtype="f16", name=None, alignment=ALIGNMENT, quiet=False):
    """Writes hf_dir as a GGUF file at out; returns the list of (name, type, ne)."""
    qt = TYPE_OF[qtype]
    ck = Checkpoint(hf_dir)
    mt = ck.config.get("model_type")
    if mt == "gpt2":
        plan = plan_gpt2(ck)
    elif mt in ("llama", "mistral", "qwen2", "qwen3", "phi3"):
        plan = plan_llama(ck)
    else:
        raise ValueError("%s: model_type %r is not converted (gpt2, llama, mistral, qwen2, qwen3, phi3)" % (hf_dir, mt))
    w = GGUFWriter(alignment)
    w.add("general.architecture", STRING, plan.arch)
    for key, vtype, value, elem in plan.kv:
        if key == "general.name" and name:
            value = name
        w.add(key, vtype, value, elem)
    w.add("general.alignment", U32, alignment)
    w.add("general.file_type", U32, FILE_TYPE[qt])
    if qt in (T_Q8_0, T_Q4_0):
        w.add("general.quantization_version", U32, 2)
    for key, vtype, value, *elem in tokenizer_metadata(hf_dir, ck.config):
        w.add(key, vtype, value, elem[0] if elem else None)
    table = []
    for tname, fn in plan.tensors:
        arr = fn()  # read once here for the shape; the writer calls fn again for the bytes
        ne = list(arr.shape[::-1])
        t = qt if arr.ndim == 2 else T_F32
        if t in (T_Q8_0, T_Q4_0) and ne[0] % QK:
            warn("%s: rows of %d values are not whole %d-value blocks; written as F16" % (tname, ne[0], QK))
            t = T_F16
        w.add_tensor(tname, t, ne, lambda fn=fn, t=t: quantize(fn(), t))
        table.append((tname, t, ne))
        del arr
    w.write(out)
    if not quiet:
        print("%s: %d tensors, %d metadata entries, %s matrices, %d bytes" %
              (out, len(table), len(w.kv), qtype, os.path.getsize(out)))
    return table


# ---------------------------------------------------------------- command line

def dump(path):
    meta, tensors = read_gguf(path, dequant=False)
    for k, v in meta.items():
        if isinstance(v, list):
            print("%-45s array[%d] %s%s" % (k, len(v), ", ".join(repr(x) for x in v[:6]), ", ..." if len(v) > 6 else ""))
        else:
            print("%-45s %r" % (k, v))
    for name, (t, ne, raw) in tensors.items():
        print("%-32s %-5s ne=%s %d bytes" % (name, TYPE_NAME.get(t, t), ne, len(raw)))


def selftest():
    import tempfile
    # Q8_0 on exactly representable values: d = 0.5, codes -127, -119, ..., 121
    x = 0.5 * (-127 + 8 * np.arange(32, dtype=np.float32))
    raw = quantize_q8_0(x)
    assert len(raw) == 34 and raw[:2] == b"\x00\x38" and np.array_equal(dequantize(raw, T_Q8_0, 32), x)
    assert list(np.frombuffer(raw[2:], np.int8)) == list(range(-127, 128, 8))
    # rounded scale: x = i - 16, d = f16(16/127) = 0x3008
    raw = quantize_q8_0(np.arange(32, dtype=np.float32) - 16)
    q = np.frombuffer(raw[2:], np.int8)
    assert raw[:2] == b"\x08\x30" and (q[0], q[16], q[17], q[31]) == (-127, 0, 8, 119)
    # Q4_0: m = 8, d = -1, code c gives 8 - c; byte j = code j | code j+16 << 4
    x = (8 - np.arange(32) % 16).astype(np.float32)
    raw = quantize_q4_0(x)
    assert raw[:2] == b"\x00\xbc" and list(raw[2:]) == [0x11 * j for j in range(16)]
    assert np.array_equal(dequantize(raw, T_Q4_0, 32), x)
    assert quantize_q4_0(np.zeros(32, np.float32))[:2] == b"\x00\x00"
    # random rows: within the step of their block
    rng = np.random.default_rng(1)
    x = (rng.standard_normal(32 * 64) * np.repeat(np.arange(1, 65), 32)).astype(np.float32)
    for t, k in ((T_Q8_0, 0.5), (T_Q4_0, 1.0)):
        raw = quantize(x, t)
        y = dequantize(raw, t, x.size)
        d = np.abs(np.frombuffer(raw, [("d", "<f2"), ("q", "u1", (BLOCK[t][1] - 2,))])["d"].astype(np.float32))
        assert np.all(np.abs(x - y).reshape(-1, 32) <= k * d[:, None] * 1.0001), TYPE_NAME[t]
    # bf16 rounding agrees with PyTorch's
    import torch
    v = rng.standard_normal(4096).astype(np.float32)
    assert np.array_equal(to_bf16_bits(v), torch.from_numpy(v).to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16))
    # permutation agrees with the reference's
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import llama_reference as ref
    w = rng.standard_normal((64, 24)).astype(np.float32)
    assert np.array_equal(llama_permute(w, 4), ref.hf_to_interleaved_rows(torch.from_numpy(w), 4).numpy())
    b = rng.standard_normal(32).astype(np.float32)
    assert np.array_equal(llama_permute(b, 2), ref.hf_to_interleaved_rows(torch.from_numpy(b), 2).numpy())
    # writer / reader round trip with every value type and tensor type
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "t.gguf")
        wr = GGUFWriter(64)
        wr.add("general.architecture", STRING, "llama")
        wr.add("general.alignment", U32, 64)
        wr.add("a.u8", U8, 7), wr.add("a.i64", I64, -3), wr.add("a.f64", F64V, 0.25), wr.add("a.b", BOOL, True)
        wr.add_array("a.s", STRING, ["x", "", "\u00e9"]), wr.add_array("a.f", F32V, [1.5, -2])
        mats = {}
        for t in (T_F32, T_F16, T_BF16, T_Q8_0, T_Q4_0):
            mats[t] = rng.standard_normal((3, 64)).astype(np.float32)
            wr.add_tensor("m%d" % t, t, [64, 3], lambda t=t: quantize(mats[t], t))
        wr.write(path)
        meta, ts = read_gguf(path)
        assert meta["a.u8"] == 7 and meta["a.i64"] == -3 and meta["a.f64"] == 0.25 and meta["a.b"] is True
        assert meta["a.s"] == ["x", "", "\u00e9"] and meta["a.f"] == [1.5, -2.0]
        for t, m in mats.items():
            got = ts["m%d" % t][2]
            assert got.shape == (3, 64)
            assert np.array_equal(got, dequantize(quantize(m, t), t, m.size).reshape(3, 64))
        assert os.path.getsize(path) % 64 == 0
    print("write_gguf selftest: ok")


def main(argv):
    if argv[:1] == ["selftest"]:
        return selftest()
    if argv[:1] == ["dump"] and len(argv) == 2:
        return dump(argv[1])
    import argparse
    ap = argparse.ArgumentParser(description="Hugging Face checkpoint directory to GGUF v3")
    ap.add_argument("hf_dir")
    ap.add_argument("out")
    ap.add_argument("--type", default="f16", choices=sorted(TYPE_OF))
    ap.add_argument("--name")
    a = ap.parse_args(argv)
    convert(a.hf_dir, a.out, a.type, a.name)


if __name__ == "__main__":
    if sys.byteorder != "little":
        sys.exit("write_gguf: needs a little-endian host")
    main(sys.argv[1:])
