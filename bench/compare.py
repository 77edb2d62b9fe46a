"""Two builds of ctrlrun paired: the ctrlrun rows of several ``bench.run --json`` results of
build A and of build B (run alternately, A B A B ..., so that a noisy minute hits both), each
row's p50 the median over that build's results, and B / A.

    python -m bench.compare --a old-1.json old-2.json --b new-1.json new-2.json

Only rows of ctrlrun itself are compared (the floors do not depend on the build); contention
rows compare their total time. Prints a plain-text table; asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import statistics
from typing import Dict, List, Optional, Tuple

Key = Tuple[str, str]


def figures(paths: List[str]) -> Tuple[Dict[Key, List[float]], Dict[Key, str], List[str]]:
    """Per (backend, row id): its figure in each result (p50 µs, or total s for contention),
    the row's label, and each result's build (its extension's path)."""
    got: Dict[Key, List[float]] = {}
    labels: Dict[Key, str] = {}
    builds: List[str] = []
    for path in paths:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
        builds.append(str(data.get("ctrlrun", {}).get("extension", "?")))
        for row in data["rows"]:
            if row["who"] != "ctrlrun" or not row.get("median"):
                continue
            key = (row["backend"], row["id"])
            median = row["median"]
            value = median.get("total_s") if row["kind"] == "contention" else median.get("p50_us")
            if value is not None:
                got.setdefault(key, []).append(float(value))
                labels[key] = f"{row['label']} [{row['durability']}]"
    return got, labels, builds


def main(argv: Optional[List[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--a", nargs="+", required=True, help="results of build A")
    parser.add_argument("--b", nargs="+", required=True, help="results of build B")
    args = parser.parse_args(argv)
    a, labels, builds_a = figures(args.a)
    b, _, builds_b = figures(args.b)
    print(f"A: {', '.join(sorted(set(builds_a)))} ({len(args.a)} results)")
    print(f"B: {', '.join(sorted(set(builds_b)))} ({len(args.b)} results)")
    head = ("backend", "row", "A", "B", "B / A")
    rows = []
    for key in sorted(set(a) & set(b)):
        ma, mb = statistics.median(a[key]), statistics.median(b[key])
        unit = "s" if "contention" in labels[key] else "us"
        rows.append(
            (key[0], labels[key], f"{ma:.3f} {unit}" if unit == "s" else f"{ma:.1f} {unit}",
             f"{mb:.3f} {unit}" if unit == "s" else f"{mb:.1f} {unit}", f"{mb / ma:.2f}x")
        )  # fmt: skip
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
    for r in [head, *rows]:
        print("  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip())


if __name__ == "__main__":
    main()
