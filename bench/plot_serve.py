"""Plots `cellm bench serve` runs over HTTP (JSON lines with "bench": "serve_http").

One PNG with three panels, one curve per run:
  - TTFT: the distribution of time to first token over the requests (a CDF
    drawn from the 0..100 quantiles the JSON line carries);
  - ITL (solid) and TPOT (dashed): the distributions of inter-token gaps and
    of each request's time per output token;
  - output tokens/s over the run, with the in-process Runner's figure of the
    same load dashed when the run measured it (http_over_inprocess).

Usage: python3 bench/plot_serve.py [--out FILE.png] [--all] RESULTS.jsonl ...
By default only the last serve_http line of the files is drawn; --all draws
every one. `cellm bench serve --http --plot FILE.png` runs this script.
"""

import argparse
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def read_runs(paths):
    runs = []
    for path in paths:
        with open(path, encoding="utf-8") as f:
            for number, line in enumerate(f, 1):
                line = line.strip()
                if not line:
                    continue
                try:
                    row = json.loads(line)
                except json.JSONDecodeError as e:
                    sys.exit(f"{path}:{number}: not a JSON line: {e}")
                if row.get("bench") == "serve_http":
                    runs.append(row)
    return runs


def label(row):
    conc = row.get("max_concurrency") or "inf"
    return (f"{row.get('model')} via {row.get('target')}, {row.get('input_len')}/"
            f"{row.get('output_len')} tok, conc {conc}")


def cdf(ax, quantiles, **kwargs):
    if not quantiles:
        return False
    fractions = [p / 100 for p in range(len(quantiles))]
    ax.plot(quantiles, fractions, **kwargs)
    return True


def draw(runs, out):
    fig, (ttft_ax, itl_ax, tps_ax) = plt.subplots(1, 3, figsize=(17, 5))
    for i, row in enumerate(runs):
        color = f"C{i % 10}"
        name = label(row)
        cdf(ttft_ax, row.get("ttft_ms_quantiles"), color=color, label=name)
        cdf(itl_ax, row.get("itl_ms_quantiles"), color=color, label=f"ITL, {name}")
        cdf(itl_ax, row.get("tpot_ms_quantiles"), color=color, linestyle="--",
            label=f"TPOT, {name}")
        timeline = row.get("output_tps_timeline") or []
        step = row.get("timeline_bin_s") or 1.0
        if timeline:
            xs = [step * (k + 0.5) for k in range(len(timeline))]
            tps_ax.plot(xs, timeline, color=color,
                        label=f"{name}: mean {row.get('output_tokens_per_s', 0):.0f} tok/s")
        inproc = (row.get("inprocess") or {}).get("output_tokens_per_s")
        if inproc:
            ratio = row.get("http_over_inprocess", 0)
            tps_ax.axhline(inproc, color=color, linestyle="--",
                           label=f"in-process {inproc:.0f} tok/s (HTTP/in-process {ratio:.3f})")
    ttft_ax.set(title="time to first token", xlabel="ms", ylabel="fraction of requests")
    itl_ax.set(title="inter-token latency / time per output token", xlabel="ms",
               ylabel="fraction")
    tps_ax.set(title="output throughput", xlabel="s since the first request",
               ylabel="output tokens/s")
    for ax in (ttft_ax, itl_ax):
        ax.set_ylim(0, 1)
        ax.grid(alpha=0.3)
    tps_ax.grid(alpha=0.3)
    tps_ax.set_ylim(bottom=0)
    for ax in (ttft_ax, itl_ax, tps_ax):
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7, loc="lower right" if ax is not tps_ax else "lower center")
    fig.tight_layout()
    fig.savefig(out, dpi=110)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="+", help="JSON-lines files of cellm bench serve")
    parser.add_argument("--out", default="bench-serve.png", help="the PNG to write")
    parser.add_argument("--all", action="store_true", help="draw every run, not the last")
    args = parser.parse_args()
    runs = read_runs(args.files)
    if not runs:
        sys.exit("no serve_http line in " + ", ".join(args.files) +
                 ": run cellm bench serve --http (or --url) with --json FILE first")
    draw(runs if args.all else runs[-1:], args.out)
    print(f"wrote {args.out} ({len(runs) if args.all else 1} run(s))")


if __name__ == "__main__":
    main()
