"""What the schema designs of ``bench.frames`` cost in time, not frames (issue 34, item 1).

    python -m bench.design_timing [--calls 1000] [--rounds 5] [--prefill 2000]
                                  [--synchronous NORMAL|FULL] [--designs a,b,...]

``bench.frames`` counts the pages each design writes. This times the same designs: each is
opened once on a file of its own (``--prefill`` fresh calls first, so its B-trees have a used
store's depth), then ``--rounds`` rounds each time ``--calls`` fresh calls of every design in
turn (interleaved, so a change of the machine's load falls on all of them alike). It prints
each design's p50 and mean per call (the best round's p50 and the mean over all rounds) and its
ratio to ``floor-min``'s in the same run.

The prototypes (``sql-*``, ``bench/_frames_sql.py``) and the floors run through the stdlib's
``sqlite3`` with no decorator around them: a design's time here is what its writes cost with
the least client work there can be. So when the best layout still takes more than 1.5x
``floor-min`` here, no implementation of that layout (ctrlrun's included, which adds a
decorator and a planner) can meet item 1's target with it.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from typing import Dict, List

from bench.frames import DESIGNS, key

DEFAULT = "floor-min,floor-receipts,sql-v6,sql-c,sql-c-full,ctrlrun"


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.design_timing", description=__doc__)
    ap.add_argument("--calls", type=int, default=1000, help="timed calls per design per round")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--prefill", type=int, default=2000)
    ap.add_argument("--synchronous", default="NORMAL", choices=("NORMAL", "FULL"))
    ap.add_argument("--designs", default=DEFAULT, help="comma-separated (bench.frames' names)")
    args = ap.parse_args()
    names = args.designs.split(",")
    unknown = [n for n in names if n not in DESIGNS]
    if unknown:
        ap.error(f"unknown design(s) {unknown}; known: {', '.join(DESIGNS)}")
    workdir = tempfile.mkdtemp(prefix="ctrlrun-design-timing-")
    opened = {}
    p50s: Dict[str, List[float]] = {n: [] for n in names}
    means: Dict[str, List[float]] = {n: [] for n in names}
    try:
        for name in names:
            opened[name] = DESIGNS[name](os.path.join(workdir, f"{name}.db"), args.synchronous)
            call = opened[name][0]
            for i in range(args.prefill):
                call(key("p", i), lambda: None)
        for r in range(args.rounds):
            for name in names:
                call = opened[name][0]
                times = []
                for i in range(args.calls):
                    k = key(f"r{r}-", i)
                    t0 = time.perf_counter_ns()
                    call(k, lambda: None)
                    times.append((time.perf_counter_ns() - t0) / 1000)
                p50s[name].append(statistics.median(times))
                means[name].append(statistics.fmean(times))
    finally:
        for _, close in opened.values():
            close()
        shutil.rmtree(workdir, ignore_errors=True)
    best = {n: min(p50s[n]) for n in names}
    mean = {n: statistics.fmean(means[n]) for n in names}
    floor = best.get("floor-min")
    print(
        f"SQLite WAL, synchronous={args.synchronous}, {args.rounds} rounds of {args.calls} "
        f"fresh calls each after {args.prefill}"
    )
    print(f"{'design':<16} {'p50 (µs)':>9} {'mean (µs)':>10} {'p50 vs floor-min':>17}")
    for n in names:
        ratio = f"{best[n] / floor:.2f}x" if floor else "-"
        print(f"{n:<16} {best[n]:>9.1f} {mean[n]:>10.1f} {ratio:>17}")


if __name__ == "__main__":
    main()
