#!/usr/bin/env python3
"""Reference dequantization through the `gguf` package, for dequant tests.

  gguf_dequant_ref.py real  FILE.gguf ROWS OUT_DIR TENSOR...
      the first ROWS rows of each TENSOR in a GGUF file, to OUT_DIR/TENSOR.*
  gguf_dequant_ref.py synth TYPE BLOCKS.bin OUT_PREFIX
      raw blocks of GGML type TYPE (e.g. Q5_K) read from a file

Writes OUT_PREFIX.f32 (little-endian float32) and OUT_PREFIX.bf16 (uint16,
float32 rounded to nearest even, NaN kept quiet) and prints the element count.
"""
import sys

import numpy as np
from gguf import GGMLQuantizationType, GGUFReader
from gguf.quants import dequantize


def to_bf16(values: np.ndarray) -> np.ndarray:
    bits = values.astype(np.float32).view(np.uint32).astype(np.uint64)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
    nan = np.isnan(values)
    rounded[nan] = ((bits[nan] >> 16) | 0x40).astype(np.uint16)
    return rounded


def write(prefix: str, values: np.ndarray) -> None:
    flat = np.ascontiguousarray(values, dtype=np.float32).reshape(-1)
    flat.astype("<f4").tofile(prefix + ".f32")
    to_bf16(flat).astype("<u2").tofile(prefix + ".bf16")
    print(flat.size)


def main(argv: list[str]) -> int:
    if len(argv) >= 6 and argv[1] == "real":
        reader = GGUFReader(argv[2])
        rows = int(argv[3])
        by_name = {t.name: t for t in reader.tensors}
        for name in argv[5:]:
            t = by_name.get(name)
            if t is None:
                print(f"no tensor {name} in {argv[2]}", file=sys.stderr)
                return 2
            data = np.asarray(t.data)
            data = data.reshape(-1, data.shape[-1]) if data.ndim > 1 else data.reshape(1, -1)
            write(f"{argv[4]}/{name}", dequantize(data[:rows], t.tensor_type))
        return 0
    if len(argv) == 5 and argv[1] == "synth":
        qtype = GGMLQuantizationType[argv[2]]
        raw = np.fromfile(argv[3], dtype=np.uint8)
        write(argv[4], dequantize(raw, qtype))
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
