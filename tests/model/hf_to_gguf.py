#!/usr/bin/env python3
"""Writes a Hugging Face test fixture (tests' hf_models/<arch>) as a GGUF file
the way llama.cpp's convert_hf_to_gguf.py lays one out for that architecture:
its metadata keys, its tensor names (taken from the gguf package's own
name map), its Q/K row interleaving for llama-family models only, and its
rule that 1-D tensors stay f32. Used by tests/model/gguf_arch_test.cpp.

usage: hf_to_gguf.py FIXTURE_DIR OUT.gguf --type f32|f16|q8_0|q4_0|q4_1|q5_0 [--arch llama|mistral]
                     [--vocab TOKENIZER_DIR]

--vocab adds a byte-level BPE vocabulary and chat template the way the
converter's _set_vocab_gpt2 does for Qwen (tokenizer.ggml.model "gpt2", pre
"qwen2", token types from added_tokens, merges, special ids and the template
through gguf.SpecialVocab) from a folder holding tokenizer.json(.gz) and
tokenizer_config.json. Unlike the converter it keeps the tokenizer's full
vocabulary even where the tiny fixture model has fewer embedding rows.
"""
import argparse
import gzip
import json
import tempfile
import struct
import sys
from pathlib import Path

import numpy as np

try:
    import gguf
except ImportError:
    sys.exit("the gguf package is missing: run scripts/setup (scripts/requirements-test.txt)")

ARCHES = {
    "Qwen2ForCausalLM": gguf.MODEL_ARCH.QWEN2,
    "Qwen3ForCausalLM": gguf.MODEL_ARCH.QWEN3,
    "MistralForCausalLM": gguf.MODEL_ARCH.LLAMA,  # llama.cpp writes Mistral as llama
    "LlamaForCausalLM": gguf.MODEL_ARCH.LLAMA,
    "Phi3ForCausalLM": gguf.MODEL_ARCH.PHI3,
}


def read_safetensors(path):
    raw = Path(path).read_bytes()
    (header_len,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + header_len])
    base = 8 + header_len
    out = {}
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        begin, end = meta["data_offsets"]
        buf = raw[base + begin:base + end]
        if meta["dtype"] == "F32":
            arr = np.frombuffer(buf, dtype="<f4")
        elif meta["dtype"] == "BF16":
            arr = (np.frombuffer(buf, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
        else:
            sys.exit(f"{path}: tensor {name} has dtype {meta['dtype']}, expected F32 or BF16")
        out[name] = arr.reshape(meta["shape"]).astype(np.float32)
    return out


def interleave_rotary(w, heads):
    """llama.cpp's LlamaModel.permute: each head's two halves become pairs."""
    rows = w.shape[0]
    return w.reshape(heads, 2, rows // heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def add_gpt2_vocab(w, folder):
    folder = Path(folder)
    tok_path = folder / "tokenizer.json"
    raw = tok_path.read_bytes() if tok_path.exists() else gzip.decompress(
        (folder / "tokenizer.json.gz").read_bytes())
    tok = json.loads(raw)
    by_id = {i: t for t, i in tok["model"]["vocab"].items()}
    added = {a["id"]: a for a in tok.get("added_tokens", [])}
    for i, a in added.items():
        by_id[i] = a["content"]
    tokens, types = [], []
    for i in range(max(by_id) + 1):
        if i not in by_id:
            tokens.append(f"[PAD{i}]")
            types.append(gguf.TokenType.UNUSED)
        elif i in added:
            tokens.append(by_id[i])
            types.append(gguf.TokenType.CONTROL if added[i].get("special")
                         else gguf.TokenType.USER_DEFINED)
        else:
            tokens.append(by_id[i])
            types.append(gguf.TokenType.NORMAL)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("qwen2")
    w.add_token_list(tokens)
    w.add_token_types(types)
    # SpecialVocab reads merges, special ids and the chat template from files.
    with tempfile.TemporaryDirectory() as tmp:
        Path(tmp, "tokenizer.json").write_bytes(raw)
        Path(tmp, "tokenizer_config.json").write_bytes((folder / "tokenizer_config.json").read_bytes())
        gguf.SpecialVocab(tmp, load_merges=True, n_vocab=len(tokens)).add_to_gguf(w)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("fixture")
    ap.add_argument("out")
    ap.add_argument("--type", choices=["f32", "f16", "q8_0", "q4_0", "q4_1", "q5_0"], required=True)
    ap.add_argument("--arch", choices=["llama", "mistral"],
                    help="override general.architecture of a llama-family model")
    ap.add_argument("--vocab", help="folder with tokenizer.json(.gz) and tokenizer_config.json")
    args = ap.parse_args()

    fixture = Path(args.fixture)
    cfg = json.loads((fixture / "config_legacy.json").read_text())
    hf_arch = cfg["architectures"][0]
    if hf_arch not in ARCHES:
        sys.exit(f"{fixture}: {hf_arch} has no GGUF mapping here")
    arch = ARCHES[hf_arch]
    arch_name = args.arch or gguf.MODEL_ARCH_NAMES[arch]
    tensors = read_safetensors(fixture / "model.safetensors")
    layers = cfg["num_hidden_layers"]
    heads = cfg["num_attention_heads"]
    kv_heads = cfg.get("num_key_value_heads", heads)
    hidden = cfg["hidden_size"]

    w = gguf.GGUFWriter(args.out, arch_name)
    w.add_name(fixture.name)
    w.add_block_count(layers)
    w.add_context_length(cfg["max_position_embeddings"])
    w.add_embedding_length(hidden)
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_head_count(heads)
    w.add_head_count_kv(kv_heads)
    w.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
    w.add_rope_freq_base(cfg["rope_theta"])
    if "head_dim" in cfg and arch != gguf.MODEL_ARCH.PHI3:
        w.add_key_length(cfg["head_dim"])
        w.add_value_length(cfg["head_dim"])
    if arch == gguf.MODEL_ARCH.LLAMA:
        w.add_vocab_size(cfg["vocab_size"])
        head_dim = cfg.get("head_dim", hidden // heads)
        w.add_rope_dimension_count(head_dim)
        if args.arch == "mistral" and cfg.get("sliding_window"):
            w.add_sliding_window(cfg["sliding_window"])
    if arch == gguf.MODEL_ARCH.PHI3:
        w.add_rope_scaling_orig_ctx_len(cfg["original_max_position_embeddings"])
        w.add_rope_dimension_count(int(cfg.get("partial_rotary_factor", 1.0) * hidden) // heads)
        w.add_sliding_window(cfg.get("sliding_window") or 0)
    ftype = {"f32": gguf.LlamaFileType.ALL_F32, "f16": gguf.LlamaFileType.MOSTLY_F16,
             "q8_0": gguf.LlamaFileType.MOSTLY_Q8_0, "q4_0": gguf.LlamaFileType.MOSTLY_Q4_0,
             "q4_1": gguf.LlamaFileType.MOSTLY_Q4_1, "q5_0": gguf.LlamaFileType.MOSTLY_Q5_0}[args.type]
    w.add_file_type(ftype)
    if args.vocab:
        add_gpt2_vocab(w, args.vocab)
    else:
        w.add_bos_token_id(cfg["bos_token_id"])
        w.add_eos_token_id(cfg["eos_token_id"])

    names = gguf.get_tensor_name_map(arch, layers)
    permute = arch == gguf.MODEL_ARCH.LLAMA
    for hf_name, data in tensors.items():
        if permute and hf_name.endswith("q_proj.weight"):
            data = interleave_rotary(data, heads)
        elif permute and hf_name.endswith("k_proj.weight"):
            data = interleave_rotary(data, kv_heads)
        name = names.get_name(hf_name, try_suffixes=(".weight", ".bias"))
        if name is None:
            sys.exit(f"{fixture}: no GGUF name for {hf_name}")
        if data.ndim == 1 or args.type == "f32":
            w.add_tensor(name, data.astype(np.float32))
        elif args.type == "f16":
            w.add_tensor(name, data.astype(np.float16))
        else:
            qtype = {"q8_0": gguf.GGMLQuantizationType.Q8_0,
                     "q4_0": gguf.GGMLQuantizationType.Q4_0,
                     "q4_1": gguf.GGMLQuantizationType.Q4_1,
                     "q5_0": gguf.GGMLQuantizationType.Q5_0}[args.type]
            q = gguf.quants.quantize(data, qtype)
            w.add_tensor(name, q, raw_shape=q.shape, raw_dtype=qtype)

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":
    main()
