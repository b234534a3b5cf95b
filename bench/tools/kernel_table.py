"""Summarises an Nsight Compute CSV of `cellm bench step --no-prefill` runs into
microseconds per decode step for each kernel.

The forward starts with the token embedding kernel, so everything from its
first launch on belongs to decode steps; the number of steps is the number of
sampler launches (one per step). Usage: kernel_table.py NCU.csv TITLE
"""
import collections
import csv
import re
import sys


def short(name: str) -> str:
    name = re.sub(r"\(anonymous namespace\)::", "", name)
    name = re.sub(r"<unnamed>::", "", name)
    name = re.sub(r"cellm::(cuda::)?", "", name)
    name = re.sub(r"\(.*$", "", name)  # drop the argument list
    name = re.sub(r"^void ", "", name)
    return name[:70]


def main(path: str, title: str) -> None:
    rows = []
    with open(path, newline="") as f:
        lines = [l for l in f if l.startswith('"')]
    for r in csv.DictReader(lines):
        if r.get("Metric Name") != "gpu__time_duration.sum":
            continue
        rows.append((int(r["ID"]), short(r["Kernel Name"]), float(r["Metric Value"].replace(",", ""))))
    rows.sort()
    # A decode step ends with the sampler. Graph capture and warm-up also run
    # forwards at other widths without sampling, so only the kernels between
    # consecutive sampler launches count, and only the last `keep` such steps.
    ends = [i for i, r in enumerate(rows) if re.search(r"sample|argmax", r[1])]
    if len(ends) < 2:
        sys.exit("fewer than two sampler launches: not a decode run?")
    keep = min(2, len(ends) - 1)
    rows = rows[ends[-keep - 1] + 1 : ends[-1] + 1]
    steps = keep
    total = collections.defaultdict(float)
    count = collections.Counter()
    for _, name, ns in rows:
        total[name] += ns
        count[name] += 1
    step_us = sum(total.values()) / steps / 1e3
    print(f"## {title}: {steps} steps, kernels sum to {step_us:.1f} us per step\n")
    print("| kernel | launches/step | us/step | share |")
    print("|---|---|---|---|")
    for name, ns in sorted(total.items(), key=lambda kv: -kv[1]):
        us = ns / steps / 1e3
        print(f"| {name} | {count[name] / steps:.1f} | {us:.1f} | {100 * us / step_us:.1f}% |")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
