"""Per-kernel timeline of one decode step from a CELLM_KERNEL_TRACE build.

Reads the `ktrace` lines such a build prints to stderr at exit
(src/backend/cuda/kernel_trace.h): per traced launch, for marks 0..7, the
number of blocks that wrote the mark and the earliest and latest of them
(globaltimer nanoseconds). Mark 0 is block entry, 1 the return of the
programmatic-launch wait, 7 block exit; 2..6 are kernel phases.

The launches are ordered by their wait, and split into runs wherever nothing
was traced for --split-us; the last run is the step reported (a graph's
replays overwrite its capture's slots, so the report holds the last replay).
Eager launches take a new slot each time: the argmax after the previous
replay follows it by less than --split-us and opens the run, so the span is
one step period and the embedding's gap is the host's share of it. A greedy
one-token step launches no argmax (its lm_head GEMV takes it), so its run
starts at the embedding: trace a sampled step to see the host's share.
Launches with the same label (each layer's q/k/v GEMV, say) are averaged:

  dur     first wait return -> last block exit (us)
  gap     previous launch's last exit -> this first wait return
  lead    first block entry -> first wait return (how early blocks arrived)
  spread  first -> last wait return over the blocks

and the gaps are listed again by the launch that came before (mean, least and
most over the step), which shows where a kernel's wait returns late after one
predecessor and not after another.

Usage: kernel_trace.py TRACE.log [--split-us 100]
"""
import argparse
import statistics
import sys
from dataclasses import dataclass
from typing import Dict, List, Sequence, Tuple

MARKS = 8
ENTRY, WAIT, EXIT = 0, 1, 7
# Names of marks 2..6 by label prefix (attention_decode_v2.cu's and gemv.cu's Phase).
PHASES = {
    # The same kernel with the o projection fused (attention_decode_v2_out.cuh);
    # before its plain label, which is a prefix of this one.
    "attention/decode_v2+o": {
        2: "early reads issued",
        4: "key loop done",
        3: "heads merged in every block",
        5: "o weights landed",
        6: "partials stored and counted",
    },
    "attention/decode_v2": {
        2: "early reads issued",
        3: "first tile visible",
        4: "key loop done",
        5: "block merge done",
        6: "merged outputs stored",
    },
    # gemv.cu's Phase, as each block's first warp sees it.
    "gemv/": {
        2: "inputs staged",
        3: "first batch multiplied",
        4: "last unit stored",
        5: "first weights landed",
        6: "second batch multiplied",
    },
}


@dataclass
class Launch:
    slot: int
    label: str
    marks: List[Tuple[int, int, int]]  # (blocks, earliest, latest) per mark

    def has(self, m: int) -> bool:
        return self.marks[m][0] > 0

    def first(self, m: int) -> int:
        return self.marks[m][1]

    def last(self, m: int) -> int:
        return self.marks[m][2]


def parse(lines: Sequence[str]) -> List[Launch]:
    launches = []
    for line in lines:
        if not line.startswith("ktrace\t"):
            continue
        fields = line.rstrip("\n").split("\t")
        if len(fields) != 3 + MARKS:
            raise ValueError(f"malformed ktrace line: {line!r}")
        marks = []
        for f in fields[3:]:
            blocks, lo, hi = (int(x) for x in f.split())
            marks.append((blocks, lo, hi))
        launches.append(Launch(int(fields[1]), fields[2], marks))
    return launches


def last_run(launches: List[Launch], split_ns: int) -> List[Launch]:
    done = sorted((l for l in launches if l.has(WAIT) and l.has(EXIT)), key=lambda l: l.first(WAIT))
    if not done:
        return []
    runs = [[done[0]]]
    latest_exit = done[0].last(EXIT)
    for l in done[1:]:
        if l.first(WAIT) - latest_exit > split_ns:
            runs.append([])
        runs[-1].append(l)
        latest_exit = max(latest_exit, l.last(EXIT))
    return runs[-1]


def summarise(run: List[Launch]) -> Tuple[List[str], Dict[str, dict]]:
    order: List[str] = []
    rows: Dict[str, dict] = {}
    previous_exit = None
    previous_label = None
    for l in run:
        row = rows.setdefault(l.label, {"dur": [], "gap": [], "lead": [], "spread": [],
                                        "blocks": l.marks[EXIT][0], "phases": {}})
        if l.label not in order:
            order.append(l.label)
        start = l.first(WAIT)
        row["dur"].append((l.last(EXIT) - start) / 1e3)
        row["gap"].append((start - previous_exit) / 1e3 if previous_exit is not None else 0.0)
        if previous_label is not None:
            row.setdefault("gap_after", {}).setdefault(previous_label, []).append(row["gap"][-1])
        row["lead"].append((start - l.first(ENTRY)) / 1e3 if l.has(ENTRY) else 0.0)
        row["spread"].append((l.last(WAIT) - start) / 1e3)
        for m in range(2, EXIT):
            if l.has(m):
                row["phases"].setdefault(m, []).append(((l.first(m) - start) / 1e3,
                                                        (l.last(m) - start) / 1e3))
        previous_exit = l.last(EXIT)
        previous_label = l.label
    return order, rows


def phase_names(label: str) -> Dict[int, str]:
    for prefix, names in PHASES.items():
        if label.startswith(prefix):
            return names
    return {}


def report(launches: List[Launch], split_us: float, out=sys.stdout) -> None:
    run = last_run(launches, int(split_us * 1e3))
    if not run:
        print("no complete traced launches", file=out)
        return
    span = (max(l.last(EXIT) for l in run) - run[0].first(WAIT)) / 1e3
    print(f"step: {len(run)} launches over {span:.1f} us (first wait return -> last exit)", file=out)
    order, rows = summarise(run)
    print(f"{'kernel':52s} {'n':>4s} {'dur':>8s} {'gap':>7s} {'lead':>7s} {'spread':>7s} {'blocks':>7s}",
          file=out)
    mean = statistics.mean
    for label in order:
        r = rows[label]
        print(f"{label[:52]:52s} {len(r['dur']):4d} {mean(r['dur']):8.2f} {mean(r['gap']):7.2f} "
              f"{mean(r['lead']):7.2f} {mean(r['spread']):7.2f} {r['blocks']:7d}", file=out)
    print("gaps by the launch before (us): mean, least, most", file=out)
    for label in order:
        for before, gaps in rows[label].get("gap_after", {}).items():
            print(f"  {before[:40]:40s} -> {label[:40]:40s} {len(gaps):4d} {mean(gaps):6.2f} "
                  f"{min(gaps):6.2f} {max(gaps):6.2f}", file=out)
    for label in order:
        phases = rows[label]["phases"]
        if not phases:
            continue
        names = phase_names(label)
        print(f"{label}: phases, us after the first wait return (earliest / latest block)", file=out)
        for m in sorted(phases):
            lo = mean(p[0] for p in phases[m])
            hi = mean(p[1] for p in phases[m])
            print(f"  {names.get(m, f'mark {m}'):24s} {lo:7.2f} / {hi:7.2f}", file=out)


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace", help="stderr of a CELLM_KERNEL_TRACE build")
    parser.add_argument("--split-us", type=float, default=100.0,
                        help="a pause this long between launches starts a new run")
    args = parser.parse_args(argv)
    with open(args.trace) as f:
        launches = parse(f.readlines())
    report(launches, args.split_us)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
