#!/usr/bin/env python3
"""Turns one tool's raw JSON lines into gpu_gguf_side_by_side.sh's common form.

    side_by_side_jsonl.py TOOL RAW.jsonl --card NAME --file F.gguf --shape S --mix M

TOOL is llama.cpp (RAW from `llama-bench -o jsonl`) or cellm (RAW from
`cellm bench step --json`). Prints one line per measurement on stdout:

  bench       "gguf_side_by_side"
  card        the GPU, as nvidia-smi names it
  file, file_bytes, shape, mix   the GGUF measured (random_gguf.py's output)
  tool        "llama.cpp" or "cellm"; tool_build: llama.cpp's build commit or
              "llama-cpp-python <version>" / cellm's commit
  flash_attn  llama.cpp: "on" or "off"; cellm: null (it has one attention path)
  test        "ppN": prefill of an N-token prompt, one sequence (N = 512 in
              the script); "tgN": decode at batch 1 (llama-bench: N tokens
              generated from an empty context; cellm: N timed greedy steps
              after 8 warm-up steps from a 2-token context, as the Runner
              serves them; N = 128 in the script)
  tokens_per_s, stddev_tokens_per_s (llama.cpp only), reps
  ms          cellm: ms of the prefill forward / ms per decode step
  time        when the line was written (UTC)

Only numpy-free standard library: runs on the GPU machine's bare Python.
"""

import argparse
import datetime
import json
import os
import sys


def llama_lines(raw):
    for r in raw:
        if r.get("n_prompt") and not r.get("n_gen"):
            test = "pp%d" % r["n_prompt"]
        elif r.get("n_gen") and not r.get("n_prompt"):
            test = "tg%d" % r["n_gen"]
        else:
            test = "pp%d+tg%d" % (r.get("n_prompt", 0), r.get("n_gen", 0))
        fa = r.get("flash_attn")
        yield {
            "tool": "llama.cpp",
            "tool_build": r.get("build_commit"),
            "flash_attn": {1: "on", 0: "off", -1: "auto", True: "on", False: "off"}.get(fa, fa),
            "test": test,
            "tokens_per_s": r.get("avg_ts"),
            "stddev_tokens_per_s": r.get("stddev_ts"),
            "reps": len(r.get("samples_ts") or []),
            "n_gpu_layers": r.get("n_gpu_layers"),
            "n_batch": r.get("n_batch"),
            "n_ubatch": r.get("n_ubatch"),
            "gpu_info": r.get("gpu_info"),
        }


def cellm_lines(raw, tg=None):
    for r in raw:
        if r.get("bench") != "step" or "skipped" in r:
            continue
        if r.get("kind") == "decode":
            # The GPU path writes ms_per_step, the CPU path (a local trial) ms.
            test = "tg%d" % (tg or r.get("steps", 0))
            ms = r.get("ms_per_step", r.get("ms"))
        else:
            test, ms = "pp%d" % r.get("prompt", 0), r.get("ms")
        yield {
            "tool": "cellm",
            "tool_build": r.get("commit"),
            "flash_attn": None,
            "test": test,
            "tokens_per_s": r.get("tokens_per_s"),
            "stddev_tokens_per_s": None,
            "reps": r.get("steps") if r.get("kind") == "decode" else None,
            "ms": ms,
            "batch": r.get("batch"),
            "context": r.get("context"),
            "sampling": r.get("sampling"),
            "roofline_fraction": r.get("roofline_fraction"),
            "gpu_info": r.get("gpu", r.get("cpu")),
            # "bf16" (converted at load) or the projections kept in GGUF blocks.
            "weights": r.get("weights"),
        }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("tool", choices=["llama.cpp", "cellm"])
    ap.add_argument("raw")
    ap.add_argument("--card", required=True)
    ap.add_argument("--file", required=True)
    ap.add_argument("--shape", required=True)
    ap.add_argument("--mix", required=True)
    ap.add_argument("--tool-build",
                    help="what tool_build says where the tool's own lines say 'unknown' "
                         "(llama.cpp built from the pack has no git commit)")
    ap.add_argument("--tg", type=int,
                    help="cellm: the decode steps asked for, which name the test (tgN) even "
                         "where bench step timed fewer (reps says how many)")
    a = ap.parse_args()
    raw = []
    with open(a.raw) as f:
        for line in f:
            line = line.strip()
            if line:
                try:
                    raw.append(json.loads(line))
                except json.JSONDecodeError:
                    print(f"side_by_side_jsonl.py: skipping a line of {a.raw} that is not JSON",
                          file=sys.stderr)
    lines = llama_lines(raw) if a.tool == "llama.cpp" else cellm_lines(raw, a.tg)
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    n = 0
    for rec in lines:
        out = {"bench": "gguf_side_by_side", "card": a.card, "file": os.path.basename(a.file),
               "file_bytes": os.path.getsize(a.file) if os.path.exists(a.file) else None,
               "shape": a.shape, "mix": a.mix}
        out.update(rec)
        if a.tool_build and out.get("tool_build") in (None, "", "unknown"):
            out["tool_build"] = a.tool_build
        out["time"] = now
        print(json.dumps(out))
        n += 1
    if n == 0:
        print(f"side_by_side_jsonl.py: no measurement in {a.raw}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
