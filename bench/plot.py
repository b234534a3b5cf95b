"""Plots `cellm bench` JSON lines.

`bench step` rows: greedy decode ms/step against batch size, one line per context,
with the roofline (weight + KV bytes over the measured copy bandwidth) dashed;
and prefill tokens/s against prompt length.

`bench serve` rows: the latency percentiles (TTFT, TPOT, ITL, E2E at p50, p90,
p99) of each run; and, where a model has runs at several concurrencies (or
request rates), output tokens/s and p50/p99 latencies against that load.

Usage: python3 bench/plot.py RESULTS.jsonl [OUT_PREFIX]
Writes OUT_PREFIX-<model>-decode.png, OUT_PREFIX-<model>-prefill.png,
OUT_PREFIX-<model>-serve-latency.png and OUT_PREFIX-<model>-serve-load.png.
"""
import collections
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


SERVE_LATENCIES = [("ttft_ms", "TTFT"), ("tpot_ms", "TPOT"), ("itl_ms", "ITL"), ("e2e_ms", "E2E")]
PERCENTILES = ["p50", "p90", "p99"]


def safe(name: str) -> str:
    """A model path as a file-name component."""
    return name.strip("/").replace("/", "_")


def serve_label(r: dict) -> str:
    conc = r.get("max_concurrency") or "unlimited"
    return (f"{r['input_len']}/{r['output_len']} tok, rate {r['request_rate']}, "
            f"concurrency {conc}, {r['requests']} req")


def plot_serve_latency(model: str, runs: list, prefix: str) -> None:
    """Grouped bars: one group per latency, one bar per percentile, one panel per run."""
    fig, axes = plt.subplots(len(runs), 1, figsize=(8, 3.2 * len(runs)), squeeze=False)
    width = 0.8 / len(PERCENTILES)
    for ax, r in zip(axes[:, 0], runs):
        for k, pct in enumerate(PERCENTILES):
            xs = [i + (k - 1) * width for i in range(len(SERVE_LATENCIES))]
            ys = [r.get(f"{key}_{pct}", 0.0) for key, _ in SERVE_LATENCIES]
            bars = ax.bar(xs, ys, width=width, label=pct)
            ax.bar_label(bars, fmt="%.0f", fontsize=7)
        ax.set_xticks(range(len(SERVE_LATENCIES)))
        ax.set_xticklabels([name for _, name in SERVE_LATENCIES])
        ax.set_yscale("log")
        ax.set_ylabel("ms")
        ax.set_title(f"{serve_label(r)}: {r['output_tokens_per_s']:.0f} output tok/s", fontsize=9)
        ax.grid(True, axis="y", which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(f"{model} serving latency on {runs[0]['gpu']}")
    fig.tight_layout()
    fig.savefig(f"{prefix}-{safe(model)}-serve-latency.png", dpi=120)
    plt.close(fig)


def plot_serve_load(model: str, runs: list, prefix: str) -> None:
    """Throughput and latencies against concurrency (or request rate) when runs vary it."""
    def conc(r: dict) -> int:
        return r.get("max_concurrency") or r["requests"]  # 0 means no limit

    by_conc = {conc(r) for r in runs}
    by_rate = {r["request_rate"] for r in runs}
    if len(by_conc) > 1:
        xlabel = "max concurrency (no limit: the request count)"
        pts = sorted(runs, key=conc)
        xs = [conc(r) for r in pts]
    elif len(by_rate) > 1 and "inf" not in by_rate:
        key, xlabel = "request_rate", "request rate (req/s)"
        pts = sorted(runs, key=lambda r: float(r[key]))
        xs = [float(r[key]) for r in pts]
    else:
        return
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(7, 7), sharex=True)
    top.plot(xs, [r["output_tokens_per_s"] for r in pts], marker="o", label="output tok/s")
    top.plot(xs, [r["total_tokens_per_s"] for r in pts], marker="s", label="total tok/s")
    top.set_ylabel("tokens/s")
    top.legend()
    top.grid(True, alpha=0.3)
    for key_ms, name in [("ttft_ms", "TTFT"), ("itl_ms", "ITL")]:
        line, = bottom.plot(xs, [r.get(f"{key_ms}_p50", float("nan")) for r in pts], marker="o",
                            label=f"{name} p50")
        bottom.plot(xs, [r.get(f"{key_ms}_p99", float("nan")) for r in pts], marker="o",
                    linestyle="--", color=line.get_color(), label=f"{name} p99")
    bottom.set_yscale("log")
    bottom.set_ylabel("ms")
    bottom.set_xlabel(xlabel)
    bottom.legend()
    bottom.grid(True, which="both", alpha=0.3)
    if all(x > 0 for x in xs):
        bottom.set_xscale("log", base=2)
    bottom.set_xticks(xs)
    bottom.set_xticklabels([f"{x:g}" for x in xs])
    fig.suptitle(f"{model} serving on {pts[0]['gpu']}")
    fig.tight_layout()
    fig.savefig(f"{prefix}-{safe(model)}-serve-load.png", dpi=120)
    plt.close(fig)


def plot_serve(rows: list, prefix: str) -> None:
    by_model = collections.defaultdict(list)
    for r in rows:
        if r.get("bench") == "serve" and r.get("completed", 0) > 0:
            by_model[r["model"]].append(r)
    for model, runs in by_model.items():
        plot_serve_latency(model, runs[-6:], prefix)  # the latest runs keep the figure legible
        plot_serve_load(model, runs, prefix)


def main(path: str, prefix: str) -> None:
    rows = [json.loads(line) for line in open(path) if line.strip()]
    plot_serve(rows, prefix)
    rows = [r for r in rows if r.get("bench") == "step" and "skipped" not in r]
    by_model = collections.defaultdict(list)
    for r in rows:
        by_model[r["model"]].append(r)
    for model, points in by_model.items():
        gpu = points[0]["gpu"]
        # Greedy rows (older results have no "sampling"); the seeded sampling
        # rows of the same points would draw a second line per context.
        decode = [p for p in points
                  if p["kind"] == "decode" and p.get("sampling", "greedy") == "greedy"]
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
