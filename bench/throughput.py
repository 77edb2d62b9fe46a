"""Throughput under concurrency on PostgreSQL: protected calls with 1, 8 and 64 threads and with
64 concurrent tasks, beside pgbench running the same two statements with 8 and 32 clients, in
the same run, pgbench running ctrlrun's own statements (what the server alone costs), and
pgbench running the receipts floor (what the issues require be written, and no more). Each row
also gives the server's and the client's CPU per call (``bench/_cpu.py``).

    python3 tests_py/support/pgserver.py -- python -m bench.throughput [--seconds S] [--repeats N] [--json FILE]

The server is the one ``CTRLRUN_TEST_POSTGRES_URL`` names (``pgserver.py`` starts a throwaway
one). Every protected call is a fresh key: its reservation and its outcome, two durable commits.
pgbench's transaction is the smallest correct protocol for the same work: ``INSERT … ON CONFLICT
DO NOTHING`` then the compare-and-set ``UPDATE``, each an autocommit statement, prepared
(``-M prepared``), on a table with the key as primary key. The body of each protected call
counts its executions per key: a key run twice is a double. The store keeps its default pool
(16 connections per process): 64 threads or tasks share them, as they would in an application.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import threading
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any, Callable, Dict, List

import ctrlrun
from bench._cpu import CpuMeter
from bench._pgbench import ctrlrun_script, pgbench, receipts_script


class Counted:
    """One store and a protected function whose body counts executions per key."""

    def __init__(self, url: str) -> None:
        self.store = ctrlrun.open_store(url)
        self.runs: Counter = Counter()
        self.lock = threading.Lock()
        self.prefix = uuid.uuid4().hex[:8]

        @ctrlrun.protect("bench.tp", effect="tp:{key}", store=self.store)
        def call(key: str) -> int:
            with self.lock:
                self.runs[key] += 1
            return 1

        @ctrlrun.protect("bench.tp", effect="tp:{key}", store=self.store)
        async def acall(key: str) -> int:
            self.runs[key] += 1
            return 1

        self.call, self.acall = call, acall

    def doubles(self) -> int:
        return sum(1 for n in self.runs.values() if n > 1)


PREPARED_8 = "ctrlrun, 8 threads, prepared_statements=on"
PREPARED_64 = "ctrlrun, 64 tasks, prepared_statements=on"


def threads(url: str, n: int, seconds: float) -> Dict[str, Any]:
    c = Counted(url)
    for i in range(20):
        c.call(f"warm{c.prefix}{i}")
    done = [0] * n
    start = threading.Barrier(n + 1)
    deadline = [0.0]

    def worker(w: int) -> None:
        start.wait()
        i = 0
        while time.monotonic() < deadline[0]:
            c.call(f"{c.prefix}-{w}-{i}")
            i += 1
        done[w] = i

    ts = [threading.Thread(target=worker, args=(w,)) for w in range(n)]
    for t in ts:
        t.start()
    deadline[0] = time.monotonic() + seconds
    cpu = CpuMeter()
    began = time.monotonic()
    start.wait()
    for t in ts:
        t.join()
    wall = time.monotonic() - began
    spent = cpu.per_call(sum(done))
    c.store.close()
    return {
        "calls": sum(done),
        "wall_s": wall,
        "calls_per_s": sum(done) / wall,
        "doubles": c.doubles(),
        **spent,
    }


def tasks(url: str, n: int, seconds: float) -> Dict[str, Any]:
    c = Counted(url)

    async def main() -> Dict[str, Any]:
        for i in range(20):
            await c.acall(f"warm{c.prefix}{i}")
        deadline = time.monotonic() + seconds
        cpu = CpuMeter()
        began = time.monotonic()

        async def worker(w: int) -> int:
            i = 0
            while time.monotonic() < deadline:
                await c.acall(f"{c.prefix}-{w}-{i}")
                i += 1
            return i

        counts = await asyncio.gather(*(worker(w) for w in range(n)))
        wall = time.monotonic() - began
        spent = cpu.per_call(sum(counts))
        return {"calls": sum(counts), "wall_s": wall, "calls_per_s": sum(counts) / wall, **spent}

    out = asyncio.run(main())
    out["doubles"] = c.doubles()
    c.store.close()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", default=None)
    ap.add_argument(
        "--no-ctrlrun-sql", action="store_true", help="skip pgbench on ctrlrun's own statements"
    )
    args = ap.parse_args()
    pg = os.environ.get("CTRLRUN_TEST_POSTGRES_URL")
    if not pg:
        sys.exit(
            "bench/throughput.py needs a PostgreSQL server: run it as "
            "python3 tests_py/support/pgserver.py -- python -m bench.throughput"
        )
    sep = "&" if "?" in pg else "?"
    rows: Dict[str, Callable[[str], Dict[str, Any]]] = {
        "ctrlrun, 1 thread": lambda u: threads(u, 1, args.seconds),
        "ctrlrun, 8 threads": lambda u: threads(u, 8, args.seconds),
        "ctrlrun, 64 threads": lambda u: threads(u, 64, args.seconds),
        "ctrlrun, 64 concurrent tasks": lambda u: tasks(u, 64, args.seconds),
        # a direct connection's option (docs/postgres.md)
        PREPARED_8: lambda u: threads(f"{u}&prepared_statements=on", 8, args.seconds),
        PREPARED_64: lambda u: tasks(f"{u}&prepared_statements=on", 64, args.seconds),
        "pgbench, 1 client": lambda u: pgbench(pg, 1, args.seconds),
        "pgbench, 8 clients": lambda u: pgbench(pg, 8, args.seconds),
        "pgbench, 32 clients": lambda u: pgbench(pg, 32, args.seconds),
    }
    if not args.no_ctrlrun_sql:
        ours = ctrlrun_script(pg)
        # unnamed, as ctrlrun sends them
        rows["pgbench, 1 client, ctrlrun's SQL"] = lambda u: pgbench(
            pg, 1, args.seconds, ours, "extended"
        )
        rows["pgbench, 8 clients, ctrlrun's SQL"] = lambda u: pgbench(
            pg, 8, args.seconds, ours, "extended"
        )
    receipts = receipts_script(pg)
    rows["pgbench, 8 clients, receipts floor"] = lambda u: pgbench(pg, 8, args.seconds, receipts)
    rows["pgbench, 8 clients, receipts floor, unnamed"] = lambda u: pgbench(
        pg, 8, args.seconds, receipts, "extended"
    )
    runs: Dict[str, List[Dict[str, Any]]] = {name: [] for name in rows}
    for r in range(args.repeats):
        for name, measure in rows.items():
            url = f"{pg}{sep}schema=ctrlrun_scratch_tp_{uuid.uuid4().hex[:8]}"
            out = measure(url)
            runs[name].append(out)
            print(
                f"  [{r + 1}/{args.repeats}] {name}: {out['calls_per_s']:,.0f} calls/s"
                + (f", doubles {out['doubles']}" if "doubles" in out else ""),
                flush=True,
            )
    median = {
        name: statistics.median(o["calls_per_s"] for o in outs) for name, outs in runs.items()
    }
    doubles = sum(o.get("doubles", 0) for outs in runs.values() for o in outs)
    print(
        f"\n== PostgreSQL throughput: {args.seconds:g} s per run, {args.repeats} runs, medians =="
    )
    print(
        f"{'workload':<46} {'calls/s':>10} {'all runs':>26} {'server CPU':>11} {'client CPU':>11}"
    )
    for name, outs in runs.items():
        each = ", ".join(f"{o['calls_per_s']:,.0f}" for o in outs)
        server = statistics.median(o["server_cpu_us"] for o in outs)
        client = statistics.median(o["client_cpu_us"] for o in outs)
        print(f"{name:<46} {median[name]:>10,.0f} {each:>26} {server:>8,.0f} µs {client:>8,.0f} µs")
    print("(CPU per call, medians: every postgres process; this process or pgbench)")
    checks = [
        (
            "8 threads vs pgbench 8 clients",
            median["ctrlrun, 8 threads"] / median["pgbench, 8 clients"],
        ),
        (
            "64 tasks vs pgbench 32 clients",
            median["ctrlrun, 64 concurrent tasks"] / median["pgbench, 32 clients"],
        ),
        (
            "8 threads, prepared_statements=on, vs pgbench 8 clients",
            median[PREPARED_8] / median["pgbench, 8 clients"],
        ),
        (
            "64 tasks, prepared_statements=on, vs pgbench 32 clients",
            median[PREPARED_64] / median["pgbench, 32 clients"],
        ),
    ]
    ours_row = median.get("pgbench, 8 clients, ctrlrun's SQL")
    info = [
        ("1 thread vs pgbench 1 client", median["ctrlrun, 1 thread"] / median["pgbench, 1 client"])
    ]
    info += (
        []
        if ours_row is None
        else [
            (
                "1 thread vs pgbench 1 client on ctrlrun's SQL",
                median["ctrlrun, 1 thread"] / median["pgbench, 1 client, ctrlrun's SQL"],
            ),
            ("8 threads vs pgbench on ctrlrun's SQL", median["ctrlrun, 8 threads"] / ours_row),
            (
                "pgbench: ctrlrun's SQL vs the two statements",
                ours_row / median["pgbench, 8 clients"],
            ),
        ]
    )
    floor = median["pgbench, 8 clients, receipts floor"]
    info += [
        ("receipts floor vs the two statements (8 clients)", floor / median["pgbench, 8 clients"]),
        (
            "receipts floor unnamed vs the two statements",
            median["pgbench, 8 clients, receipts floor, unnamed"] / median["pgbench, 8 clients"],
        ),
        ("8 threads vs pgbench on the receipts floor", median["ctrlrun, 8 threads"] / floor),
    ]
    print(f"\n{'check':<56} {'measured':>8} {'goal':>8} verdict")
    for name, ratio in checks:
        print(f"{name:<56} {ratio:>7.2f}x {'>= 0.6x':>8} {'MET' if ratio >= 0.6 else 'MISSED'}")
    for name, ratio in info:
        print(f"{name:<56} {ratio:>7.2f}x {'info':>8} n/a")
    print(f"{'doubles, every run':<56} {doubles:>8} {'0':>8} {'MET' if doubles == 0 else 'MISSED'}")
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                {
                    "runs": runs,
                    "median": median,
                    "checks": dict(checks),
                    "info": dict(info),
                    "doubles": doubles,
                },
                indent=2,
            )
        )


if __name__ == "__main__":
    main()
