"""Plots `cellm bench step` JSON lines: decode ms/step against batch size, one
line per context, with the roofline (weight + KV bytes over the measured copy
bandwidth) dashed; and prefill tokens/s against prompt length.

Usage: python3 bench/plot.py RESULTS.jsonl [OUT_PREFIX]
Writes OUT_PREFIX-<model>-decode.png and OUT_PREFIX-<model>-prefill.png.
"""
import collections
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main(path: str, prefix: str) -> None:
    rows = [json.loads(line) for line in open(path) if line.strip()]
    rows = [r for r in rows if r.get("bench") == "step" and "skipped" not in r]
    by_model = collections.defaultdict(list)
    for r in rows:
        by_model[r["model"]].append(r)
    for model, points in by_model.items():
        gpu = points[0]["gpu"]
        decode = [p for p in points if p["kind"] == "decode"]
        if decode:
            fig, ax = plt.subplots(figsize=(7, 4.5))
            for ctx in sorted({p["context"] for p in decode}):
                pts = sorted((p for p in decode if p["context"] == ctx), key=lambda p: p["batch"])
                line, = ax.plot([p["batch"] for p in pts], [p["ms_per_step"] for p in pts],
                                marker="o", label=f"context {ctx}")
                ax.plot([p["batch"] for p in pts], [p["roofline_ms"] for p in pts],
                        linestyle="--", color=line.get_color(), alpha=0.6)
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_xlabel("batch (sessions decoding)")
            ax.set_ylabel("ms per step")
            ax.set_title(f"{model} decode on {gpu} (dashed: roofline)")
            ax.legend()
            ax.grid(True, which="both", alpha=0.3)
            fig.tight_layout()
            fig.savefig(f"{prefix}-{model}-decode.png", dpi=120)
        prefill = sorted((p for p in points if p["kind"] == "prefill"), key=lambda p: p["prompt"])
        if prefill:
            fig, ax = plt.subplots(figsize=(7, 4.5))
            ax.plot([p["prompt"] for p in prefill], [p["tokens_per_s"] for p in prefill], marker="o",
                    label="measured")
            ax.plot([p["prompt"] for p in prefill],
                    [p["prompt"] * 1000.0 / p["roofline_ms"] for p in prefill], linestyle="--",
                    label="roofline (GEMM rate)")
            ax.set_xscale("log", base=2)
            ax.set_xlabel("prompt tokens")
            ax.set_ylabel("prefill tokens/s")
            ax.set_title(f"{model} prefill on {gpu}")
            ax.legend()
            ax.grid(True, which="both", alpha=0.3)
            fig.tight_layout()
            fig.savefig(f"{prefix}-{model}-prefill.png", dpi=120)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "bench/results/plot")
