#!/usr/bin/env python3
"""Writes tests/app/data/smollm2_reference.json: what Hugging Face transformers
computes for SmolLM2-135M-Instruct from the Q4_1 GGUF that scripts/fetch-model
puts in models/. Run once, on the CPU, in a scratch venv:

    python3 -m venv /tmp/ref-venv
    /tmp/ref-venv/bin/pip install torch transformers gguf accelerate
    /tmp/ref-venv/bin/python tests/app/make_smollm2_reference.py

transformers dequantizes the GGUF to float32 (through the gguf package) and
undoes llama.cpp's Q/K row permutation; the forward then runs in float64
with eager attention, so the reference is the dequantized model's exact
output as far as float64 goes. Kept small on purpose (a few KB): per position
of a fixed 13-token prompt, the 16 largest logits with their ids, the argmax
and the margin to the runner-up; plus the float32 forward's largest deviation
from float64 at those ids, as a yardstick for what float32 rounding alone does.
"""
import argparse
import importlib.metadata
import json
import os
import platform

import torch
import transformers
from transformers import AutoModelForCausalLM, AutoTokenizer

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TEXT = "The capital of France is Paris, and the capital of Italy is"
TOP = 16


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--out", default=os.path.join(ROOT, "tests", "app", "data", "smollm2_reference.json"))
    args = ap.parse_args()
    folder, name = os.path.split(args.model)

    tok = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    ids = tok(TEXT, add_special_tokens=False)["input_ids"]
    model = AutoModelForCausalLM.from_pretrained(
        folder, gguf_file=name, dtype=torch.float32, attn_implementation="eager")
    model.eval()
    x = torch.tensor([ids])
    with torch.no_grad():
        f32 = model(x).logits[0]
        f64 = model.to(torch.float64)(x).logits[0]

    positions = []
    f32_dev = 0.0
    for p in range(len(ids)):
        row = f64[p]
        top = torch.topk(row, TOP)
        top_ids = top.indices.tolist()
        f32_dev = max(f32_dev, (f32[p, top_ids].double() - row[top_ids]).abs().max().item())
        positions.append({
            "top_ids": top_ids,
            "top_logits": [round(v, 5) for v in top.values.tolist()],
            "argmax": top_ids[0],
            "margin": round(top.values[0].item() - top.values[1].item(), 5),
        })

    out = {
        "made_by": "tests/app/make_smollm2_reference.py",
        "model": name,
        "versions": {
            "transformers": transformers.__version__,
            "torch": torch.__version__,
            "gguf": importlib.metadata.version("gguf"),
            "python": platform.python_version(),
        },
        "forward": "float64 on the CPU, eager attention, weights dequantized to float32 by transformers",
        "text": TEXT,
        "prompt": ids,
        "float32_max_abs_deviation": round(f32_dev, 6),
        "positions": positions,
    }
    with open(args.out, "w") as f:
        json.dump(out, f, separators=(",", ":"))
        f.write("\n")
    print(f"wrote {args.out}: {len(ids)} positions, float32 deviation {f32_dev:.3g}")


if __name__ == "__main__":
    main()
