"""How far Hugging Face transformers itself lands from the float64 fixtures
when it runs in bf16 on the GPU: the yardstick for cellm's bf16 tolerance.

Usage (GPU machine): python3 bench/tools/hf_bf16_error.py .testdata/hf_models
Prints, per fixture, the worst per-position relative error and the argmax
mismatches where the reference's top-2 margin exceeds 0.25.
"""
import pathlib
import sys

import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM


def main(root: str) -> None:
    for folder in sorted(pathlib.Path(root).iterdir()):
        if not (folder / "expected.safetensors").exists():
            continue
        expected = load_file(str(folder / "expected.safetensors"))
        model = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.bfloat16,
                                                     attn_implementation="eager").cuda().eval()
        worst, over, mismatched, total, count = 0.0, 0, 0, 0.0, 0
        i = 0
        while f"prompt_{i}" in expected:
            inputs = torch.cat([expected[f"prompt_{i}"], expected[f"greedy_{i}"][:-1]])
            ref = expected[f"logits_{i}"].double()
            with torch.no_grad():
                got = model(inputs[None].cuda()).logits[0].double().cpu()
            err = (got - ref).norm(dim=-1) / ref.norm(dim=-1)
            worst = max(worst, err.max().item())
            total += err.sum().item()
            count += err.numel()
            over += int((err > 3e-2).sum())
            top2 = ref.topk(2, dim=-1).values
            margin = top2[:, 0] - top2[:, 1]
            mismatched += int(((got.argmax(-1) != ref.argmax(-1)) & (margin > 0.25)).sum())
            i += 1
        print(f"{folder.name:12s} mean rel err {total / count:.4f}  worst {worst:.4f}  "
              f"positions > 3e-2: {over:4d}  "
              f"argmax mismatches (margin > 0.25): {mismatched}")


if __name__ == "__main__":
    main(sys.argv[1])
