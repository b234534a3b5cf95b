#!/usr/bin/env python3
"""The open targets beside what a bench/targets.sh run measured.

Reads the JSON lines bench/targets.sh appended (cellm bench step, bench
serve --http, perplexity) and prints one Markdown row per target: what the
issue asks for (on an H200), the figure measured, and the card it came from.
The reader judges an H100 figure at 0.95 of a serving target and at the
measured roofline fraction of a decode target; this table does not rescale.

    bench/tools/targets_table.py TARGETS.jsonl
"""
import json
import sys


def load(path):
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def last(rows, **want):
    """The last line whose fields equal `want` (None when there is none)."""
    found = None
    for r in rows:
        if all(r.get(k) == v for k, v in want.items()):
            found = r
    return found


def fmt(v, digits=3):
    return "not measured" if v is None else f"{v:,.{digits}f}"


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    rows = load(sys.argv[1])
    out = []

    def add(target, asked, measured, line):
        card = (line or {}).get("gpu", "")
        out.append(f"| {target} | {asked} | {measured} | {card} |")

    for r in rows:
        if r.get("bench") == "serve_http" and r.get("quantize") == "fp8":
            shape = f"{r['input_len']}/{r['output_len']}"
            asked = ">= 15,000 output tok/s" if shape == "512/256" else "beside TensorRT-LLM's 17.7k"
            add(f"8B FP8 served, {shape}, K/V {r.get('kv_dtype', 'bf16')}", asked,
                f"{r['output_tokens_per_s']:,.0f}", r)

    serve = last(rows, bench="serve_http", model="llama-3.1-8b", speculate="off", quantize="none",
                 kv_dtype="bf16")
    if serve is not None:
        inproc = (serve.get("inprocess") or {}).get("output_tokens_per_s")
        add("8B served over HTTP, 1000 x 512/256, concurrency 256", ">= 11,000 output tok/s",
            f"{serve['output_tokens_per_s']:,.0f} (in-process {fmt(inproc, 0)})", serve)
        add("HTTP over in-process, same run", ">= 0.95", fmt(serve.get("http_over_inprocess")), serve)
        p50, p99 = serve.get("itl_ms_p50"), serve.get("itl_ms_p99")
        ratio = p99 / p50 if p50 and p99 else None
        add("ITL p99 over its median", "<= 2.5",
            f"{fmt(ratio, 2)} ({fmt(p99, 1)} / {fmt(p50, 1)} ms)", serve)

    def decode(model, batch, context, **more):
        return last(rows, bench="step", kind="decode", model=model, batch=batch, context=context,
                    sampling="greedy", speculate="off", **more)

    one = decode("llama-3.2-1b", 1, 512, weights="bf16")
    if one is not None:
        add("1B decode, batch 1, 512 keys", "<= 0.80 ms", fmt(one.get("ms_per_step")), one)

    for batch in (64, 256):
        bf = decode("llama-3.1-8b", batch, 2048, kv_dtype="bf16")
        f8 = decode("llama-3.1-8b", batch, 2048, kv_dtype="fp8")
        if bf is None and f8 is None:
            continue
        got = []
        for name, line in (("bf16", bf), ("fp8", f8)):
            if line is None:
                got.append(f"{name} not measured")
            elif "skipped" in line:
                got.append(f"{name} skipped ({line['skipped']})")
            else:
                got.append(f"{name} {line['ms_per_step']:.3f} ms")
        asked = "fits and runs" if batch == 256 else "faster than bf16 K/V"
        add(f"8B FP8 K/V, batch {batch}, 2048 keys", asked, ", ".join(got), f8 or bf)

    for r in rows:
        if r.get("bench") != "step" or r.get("kind") != "decode" or r.get("batch") != 1:
            continue
        w = r.get("weights", "")
        if "Q4_K" in w and r.get("context") == 512 and r.get("sampling") == "greedy":
            asked = "<= 1.6 ms" if "8b" in r["model"] else "<= 0.45 ms"
            add(f"{r['model']} Q4_K_M kept, batch 1, 512 keys", asked, fmt(r.get("ms_per_step")), r)
        if (w.startswith("F8_E4M3") and r.get("model") == "llama-3.1-8b"
                and r.get("context") == 512 and r.get("sampling") == "greedy"):
            add("8B FP8 decode, batch 1, 512 keys", "<= 2.3 ms", fmt(r.get("ms_per_step")), r)
    for r in rows:
        if (r.get("bench") == "step" and r.get("kind") == "prefill" and r.get("prompt") == 512
                and r.get("model") == "llama-3.1-8b"
                and str(r.get("weights", "")).startswith("F8_E4M3")):
            add("8B FP8 prefill of 512", "<= 8 ms", fmt(r.get("ms")), r)

    for r in rows:
        if (r.get("bench") == "step" and r.get("kind") == "verify" and r.get("batch") == 1
                and r.get("drafts", 0) > 0):
            add(f"verification, {r['model']}, batch {r['batch']}, k = {r['drafts']}",
                "cost against a plain step", f"{r['ratio_to_plain']:.2f}x ({r.get('kernels', 'kernels not recorded')})", r)

    plain = {}
    for r in rows:
        if r.get("bench") != "serve_http" or not r.get("dataset"):
            continue
        if r.get("speculate") == "off":
            plain[r["model"]] = r["output_tokens_per_s"]
        elif r["model"] in plain:
            speedup = r["output_tokens_per_s"] / plain[r["model"]]
            acc = r.get("spec_acceptance_rate")
            add(f"text editing, batch 1, {r['speculate']}", ">= 2x where acceptance >= 0.8",
                f"{speedup:.2f}x (acceptance {fmt(acc, 3)})", r)

    for r in rows:
        if r.get("bench") == "perplexity":
            form = "kept in blocks" if r.get("keep_quantized") else "bf16"
            add(f"perplexity, {r['model']} ({r['backend']}, {form})", "within the quant's gap",
                f"{r['perplexity']:.3f} ± stderr {r['nll_stderr']:.4f} (nll)", r)

    print("| target | asked (H200) | measured | card |")
    print("|---|---|---|---|")
    print("\n".join(out) if out else "| (no lines) | | | |")


if __name__ == "__main__":
    main()
