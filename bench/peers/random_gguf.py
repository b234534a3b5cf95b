#!/usr/bin/env python3
"""Random-weight GGUF files in the real shapes of Llama-3.2-1B and Llama-3.1-8B.

cellm and llama.cpp are measured side by side on the same quantized file. The
real checkpoints cannot travel to the GPU machine (no internet, and the
licence), and the speed of a forward does not depend on the weights' values,
so this writes the same tensors, types and metadata a llama.cpp quantization
of the real model has, with random quantized blocks whose scales are chosen
so that the dequantized weights are sane: std 0.02 for the matrices, std 1
for the embedding (and an untied output head: cellm's random models use the
same scales, so logits have a real spread), norms 1, never NaN or Inf.

    random_gguf.py SHAPE MIX OUT.gguf [--seed N]   write one file
    random_gguf.py --check FILE.gguf                dequantize some rows of
        every tensor with gguf-py's reference code and print std / finiteness
    random_gguf.py SHAPE MIX --bytes                print the tensor data's size

SHAPE: llama-3.2-1b | llama-3.1-8b.  MIX: Q8_0 | Q4_K_M.

Mixes, as llama.cpp's llama-quantize lays them out (src/llama-quant.cpp,
llama_tensor_get_type_impl, in the llama-cpp-python 0.3.36 tree):
  Q8_0    every 2-D weight Q8_0 (the output / tied embedding stays Q8_0
          because the rule only raises non-Q8_0 heads to Q6_K); norms F32.
  Q4_K_M  Q4_K by default; attn_v and ffn_down Q6_K on the layers where
          use_more_bits(i, n) holds (i < n/8, i >= 7n/8, or (i - n/8) % 3 == 2:
          8 of 16 layers for 1B, 16 of 32 for 8B); output.weight Q6_K; the
          token embedding Q4_K when the model has its own output.weight (8B)
          but Q6_K when it is tied (1B), since llama.cpp then quantizes the
          embedding as the output tensor. Norms F32.
Left out on purpose: rope_freqs.weight (Llama 3.1's per-dimension RoPE
factors), which cellm does not read from GGUF; it is 64 floats and does not
change the cost of a step.

The tokenizer is a byte-level SentencePiece ("llama") vocabulary: <unk>, <s>,
</s>, the 256 <0xXX> byte tokens, the printable ASCII characters, then
<unused_N> padding up to 128,256 tokens. Both cellm and llama.cpp load it.

Fast and small in memory: tensors are generated and written in chunks of
about 32 MB straight into the file (an 8B Q8_0 file is 8.5 GB).

The gguf package (pip name gguf; scripts/requirements-test.txt) is imported
normally; where it is not installed, a wheel named by $GGUF_WHEEL or found in
the repository's .deps/wheels/ (scripts/gpu-deps puts gguf 0.19.0 there) or
.whl/ folder is put on sys.path (a pure-Python wheel imports from the zip).
Only numpy must be installed.
"""

import argparse
import glob
import os
import sys
import time
import types

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def import_gguf():
    try:
        import gguf  # noqa: F401
    except ImportError:
        wheels = [os.environ["GGUF_WHEEL"]] if os.environ.get("GGUF_WHEEL") else []
        for folder in (".deps/wheels", ".whl"):  # scripts/gpu-deps fills .deps/wheels
            wheels += sorted(glob.glob(os.path.join(ROOT, folder, "gguf-*.whl")))
        if not wheels:
            sys.exit("random_gguf.py: the gguf package is missing: pip install gguf, or put "
                     "its wheel in .whl/ (pip download gguf==0.19.0 --no-deps -d .whl)")
        sys.path.insert(0, wheels[-1])
    try:
        import yaml  # noqa: F401
    except ImportError:
        # gguf/metadata.py imports yaml at the top but uses it only to read
        # model cards, which this script never does; a stand-in lets a bare
        # machine (numpy only) import the wheel.
        sys.modules["yaml"] = types.ModuleType("yaml")
    import gguf
    return gguf


gguf = import_gguf()
Q = gguf.GGMLQuantizationType

SHAPES = {
    # hidden, layers, heads, kv heads, intermediate, tied embeddings
    "llama-3.2-1b": dict(hidden=2048, layers=16, heads=32, kv_heads=8, ff=8192, tied=True,
                         name="Llama-3.2-1B random"),
    "llama-3.1-8b": dict(hidden=4096, layers=32, heads=32, kv_heads=8, ff=14336, tied=False,
                         name="Llama-3.1-8B random"),
}
VOCAB = 128256
ROPE_THETA = 500000.0
CONTEXT = 131072
RMS_EPS = 1e-5
MIXES = {"Q8_0": gguf.LlamaFileType.MOSTLY_Q8_0, "Q4_K_M": gguf.LlamaFileType.MOSTLY_Q4_K_M}
WEIGHT_STD = 0.02
EMBED_STD = 1.0
CHUNK_BYTES = 32 << 20


def use_more_bits(i, n):
    """llama.cpp's choice of the Q4_K_M layers that get Q6_K attn_v / ffn_down."""
    return i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2


def tensor_plan(shape, mix):
    """(name, rows, cols, ggml type, std) in file order; rows x cols is the
    PyTorch [out, in] shape, i.e. GGUF ne = [cols, rows]."""
    s = SHAPES[shape]
    d, ff, n = s["hidden"], s["ff"], s["layers"]
    kvd = s["kv_heads"] * (d // s["heads"])
    q8 = mix == "Q8_0"
    base = Q.Q8_0 if q8 else Q.Q4_K
    head = Q.Q8_0 if q8 else Q.Q6_K
    plan = [("token_embd.weight", VOCAB, d, head if s["tied"] else base, EMBED_STD)]
    for i in range(n):
        more = Q.Q6_K if (not q8 and use_more_bits(i, n)) else base
        p = f"blk.{i}."
        plan += [
            (p + "attn_norm.weight", 1, d, Q.F32, None),
            (p + "attn_q.weight", d, d, base, WEIGHT_STD),
            (p + "attn_k.weight", kvd, d, base, WEIGHT_STD),
            (p + "attn_v.weight", kvd, d, more, WEIGHT_STD),
            (p + "attn_output.weight", d, d, base, WEIGHT_STD),
            (p + "ffn_norm.weight", 1, d, Q.F32, None),
            (p + "ffn_gate.weight", ff, d, base, WEIGHT_STD),
            (p + "ffn_up.weight", ff, d, base, WEIGHT_STD),
            (p + "ffn_down.weight", d, ff, more, WEIGHT_STD),
        ]
    plan.append(("output_norm.weight", 1, d, Q.F32, None))
    if not s["tied"]:
        plan.append(("output.weight", VOCAB, d, head, EMBED_STD))
    return plan


def f16_bytes(x):
    return x.astype("<f2").view(np.uint8).reshape(-1, 2)


# Random blocks. Every block starts as random bytes (the quants); the scale
# fields are then overwritten with values derived from the block's own random
# bytes, so no second random draw is needed. Variances of the quants:
#   Q8_0 int8 uniform in [-128, 127]: (256^2 - 1) / 12
#   Q4_K nibble uniform in [0, 15]:   (16^2 - 1) / 12, centred by dmin * m
#   Q6_K 6-bit uniform in [-32, 31]:  (64^2 - 1) / 12
SUB_SCALES = np.arange(32, 64, dtype=np.float64)  # 6-bit sub-block scales used
SUB_RMS = float(np.sqrt(np.mean(SUB_SCALES**2)))
JITTER_RMS = float(np.sqrt(np.mean((0.75 + np.arange(256) / 512.0) ** 2)))


def q8_0_blocks(raw, std):
    """raw: (n, 34) random bytes -> Q8_0 blocks (f16 d, 32 x int8)."""
    jitter = 0.75 + raw[:, 2].astype(np.float32) / 512.0  # d varies by +-25%
    d = jitter * (std / (np.sqrt((256**2 - 1) / 12) * JITTER_RMS))
    raw[:, 0:2] = f16_bytes(d)
    return raw


def q4_k_blocks(raw, std):
    """raw: (n, 144) random bytes -> Q4_K super-blocks: f16 d, f16 dmin,
    12 bytes of packed 6-bit (scale, min) for 8 sub-blocks, 128 bytes of
    nibbles. Weight = d*sc*q - dmin*m; with m = sc and dmin = 7.5 d it is
    d*sc*(q - 7.5): zero mean in every sub-block."""
    sc = 32 + (raw[:, 4:12] & 31)  # (n, 8) in [32, 63]
    d = np.full(raw.shape[0], std / (np.sqrt((16**2 - 1) / 12) * SUB_RMS), np.float32)
    raw[:, 0:2] = f16_bytes(d)
    raw[:, 2:4] = f16_bytes(d * 7.5)
    lo, hi = sc[:, :4], sc[:, 4:]
    packed = np.empty((raw.shape[0], 12), np.uint8)
    packed[:, 0:4] = lo | ((hi >> 4) << 6)  # scale j, top bits of scale j+4
    packed[:, 4:8] = lo | ((hi >> 4) << 6)  # min j (= scale), top bits of min j+4
    packed[:, 8:12] = (hi & 15) | ((hi & 15) << 4)  # low nibbles of scale / min j+4
    raw[:, 4:16] = packed
    return raw


def q6_k_blocks(raw, std):
    """raw: (n, 210) random bytes -> Q6_K super-blocks: 128 bytes low
    nibbles, 64 bytes high bit pairs, 16 int8 sub-block scales, f16 d."""
    raw[:, 192:208] = 32 + (raw[:, 192:208] & 31)  # positive int8 in [32, 63]
    d = np.full(raw.shape[0], std / (np.sqrt((64**2 - 1) / 12) * SUB_RMS), np.float32)
    raw[:, 208:210] = f16_bytes(d)
    return raw


BLOCKS = {Q.Q8_0: q8_0_blocks, Q.Q4_K: q4_k_blocks, Q.Q6_K: q6_k_blocks}


def row_bytes(qtype, cols):
    block, size = gguf.GGML_QUANT_SIZES[qtype]
    assert cols % block == 0, (qtype, cols)
    return cols // block * size


def write_tensor(fout, bitgen, rows, cols, qtype, std):
    if qtype == Q.F32:
        np.ones(rows * cols, "<f4").tofile(fout)
        return
    block, size = gguf.GGML_QUANT_SIZES[qtype]
    per_row = cols // block
    step = max(1, CHUNK_BYTES // (per_row * size))
    for r0 in range(0, rows, step):
        n = min(step, rows - r0) * per_row
        words = (n * size + 7) // 8
        raw = bitgen.random_raw(words).view(np.uint8)[: n * size].reshape(n, size)
        BLOCKS[qtype](raw, std).tofile(fout)


def vocabulary():
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    kinds = [gguf.TokenType.UNKNOWN, gguf.TokenType.CONTROL, gguf.TokenType.CONTROL]
    kinds += [gguf.TokenType.BYTE] * 256
    printable = ["\u2581"] + [chr(c) for c in range(33, 127)]  # \u2581 stands for a space
    tokens += printable
    kinds += [gguf.TokenType.NORMAL] * len(printable)
    pad = VOCAB - len(tokens)
    tokens += [f"<unused_{i}>" for i in range(pad)]
    kinds += [gguf.TokenType.UNUSED] * pad
    return tokens, [0.0] * VOCAB, [int(k) for k in kinds]


def data_bytes(shape, mix):
    """Bytes of tensor data (the file adds about 4 MB of metadata)."""
    return sum(rows * cols * 4 if qtype == Q.F32 else rows * row_bytes(qtype, cols)
               for _, rows, cols, qtype, _ in tensor_plan(shape, mix))


def write_file(shape, mix, out, seed):
    s = SHAPES[shape]
    head_dim = s["hidden"] // s["heads"]
    w = gguf.GGUFWriter(out, "llama")
    w.add_name(s["name"] + " " + mix)
    w.add_block_count(s["layers"])
    w.add_context_length(CONTEXT)
    w.add_embedding_length(s["hidden"])
    w.add_feed_forward_length(s["ff"])
    w.add_head_count(s["heads"])
    w.add_head_count_kv(s["kv_heads"])
    w.add_rope_freq_base(ROPE_THETA)
    w.add_layer_norm_rms_eps(RMS_EPS)
    w.add_key_length(head_dim)
    w.add_value_length(head_dim)
    w.add_rope_dimension_count(head_dim)
    w.add_vocab_size(VOCAB)
    w.add_file_type(int(MIXES[mix]))
    w.add_quantization_version(gguf.GGML_QUANT_VERSION)
    tokens, scores, kinds = vocabulary()
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(kinds)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)
    plan = tensor_plan(shape, mix)
    for name, rows, cols, qtype, _ in plan:
        if qtype == Q.F32:
            w.add_tensor_info(name, (cols,), np.dtype(np.float32), cols * 4)
        else:
            nbytes = rows * row_bytes(qtype, cols)
            w.add_tensor_info(name, (rows, row_bytes(qtype, cols)), np.dtype(np.uint8), nbytes,
                              raw_dtype=qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    # The data, streamed: the writer's own path wants whole tensors in memory.
    fout = w.fout[0]
    bitgen = np.random.SFC64(seed)
    for name, rows, cols, qtype, std in plan:
        w.write_padding(fout, fout.tell())
        start = fout.tell()
        write_tensor(fout, bitgen, rows, cols, qtype, std)
        written = fout.tell() - start
        expected = rows * cols * 4 if qtype == Q.F32 else rows * row_bytes(qtype, cols)
        assert written == expected, (name, written, expected)
    w.close()


def check_file(path, rows=64):
    """Dequantizes the first rows of every tensor with gguf-py's reference code."""
    r = gguf.GGUFReader(path)
    arch = r.fields["general.architecture"]
    print(f"{path}: {len(r.tensors)} tensors, architecture "
          f"{bytes(arch.parts[arch.data[0]]).decode()}")
    bad = 0
    by_type = {}
    for t in r.tensors:
        data = np.asarray(t.data)
        sample = data[:rows] if data.ndim > 1 else data
        x = gguf.quants.dequantize(sample, t.tensor_type).astype(np.float64)
        finite = bool(np.isfinite(x).all())
        bad += not finite
        by_type.setdefault((t.tensor_type.name, t.name.split(".")[-2]), []).append(
            (float(x.std()), float(x.mean()), float(np.abs(x).max()), finite))
    for (qt, role), vals in sorted(by_type.items()):
        std = np.mean([v[0] for v in vals])
        mean = np.mean([v[1] for v in vals])
        amax = max(v[2] for v in vals)
        fin = all(v[3] for v in vals)
        print(f"  {role:12s} {qt:5s} x{len(vals):3d}  std {std:.4f}  mean {mean:+.5f}  "
              f"max|w| {amax:.4f}  finite {fin}")
    return 1 if bad else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("shape", nargs="?", choices=sorted(SHAPES))
    ap.add_argument("mix", nargs="?", choices=sorted(MIXES))
    ap.add_argument("out", nargs="?")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--check", metavar="FILE", help="verify FILE instead of writing one")
    ap.add_argument("--bytes", action="store_true", help="print the data size, write nothing")
    a = ap.parse_args()
    if a.check:
        return check_file(a.check)
    if a.bytes and a.shape and a.mix:
        print(data_bytes(a.shape, a.mix))
        return 0
    if not (a.shape and a.mix and a.out):
        ap.error("give SHAPE MIX OUT.gguf (or --check FILE, or SHAPE MIX --bytes)")
    t0 = time.time()
    write_file(a.shape, a.mix, a.out, a.seed)
    size = os.path.getsize(a.out)
    dt = time.time() - t0
    print(f"wrote {a.out}: {a.shape} {a.mix}, {size / 1e9:.3f} GB in {dt:.1f} s "
          f"({size / 1e6 / dt:.0f} MB/s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
