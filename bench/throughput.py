"""Throughput under concurrency on PostgreSQL: protected calls on fresh keys (a reservation and
an outcome, two durable commits) from threads and tasks sharing one store's default pool, beside
pgbench on the smallest correct protocol for the same work, on ctrlrun's own statements and on
the receipts floor; the server's and the client's CPU per call (``_cpu.py``). Each call's body
counts its executions per key: a key run twice is a double. See bench/README.md.

    python3 -m throwaway.pgserver -- python -m bench.throughput [--seconds S] [--repeats N] [--json FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import threading
import time
import uuid
from collections import Counter
from typing import Any, Callable, Dict, List, Tuple

import ctrlrun
from bench import _pgbench
from bench._cpu import CpuMeter
from bench._pgbench import pg_server, pgbench, schema_url, write_json


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

    def result(self, calls: int, wall: float, cpu: CpuMeter) -> Dict[str, Any]:
        """The run's figures (the store closed): calls, calls per second, doubles, CPU."""
        spent = cpu.per_call(calls)
        self.store.close()
        doubles = sum(1 for n in self.runs.values() if n > 1)
        figures = {"calls": calls, "wall_s": wall, "calls_per_s": calls / wall}
        return {**figures, "doubles": doubles, **spent}


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
    cpu, began = CpuMeter(), time.monotonic()
    start.wait()
    for t in ts:
        t.join()
    return c.result(sum(done), time.monotonic() - began, cpu)


def tasks(url: str, n: int, seconds: float) -> Dict[str, Any]:
    c = Counted(url)

    async def main() -> Tuple[int, float, CpuMeter]:
        for i in range(20):
            await c.acall(f"warm{c.prefix}{i}")
        deadline = time.monotonic() + seconds
        cpu, began = CpuMeter(), time.monotonic()

        async def worker(w: int) -> int:
            i = 0
            while time.monotonic() < deadline:
                await c.acall(f"{c.prefix}-{w}-{i}")
                i += 1
            return i

        counts = await asyncio.gather(*(worker(w) for w in range(n)))
        return sum(counts), time.monotonic() - began, cpu

    return c.result(*asyncio.run(main()))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", default=None)
    ap.add_argument(
        "--no-ctrlrun-sql", action="store_true", help="skip pgbench on ctrlrun's own statements"
    )
    args = ap.parse_args()
    pg = pg_server()
    if not pg:
        sys.exit(
            "needs a PostgreSQL server: python3 -m throwaway.pgserver -- python -m bench.throughput"
        )
    s = args.seconds
    prepared = "&prepared_statements=on"  # a direct connection's option (docs/postgres.md)
    rows: Dict[str, Callable[[str], Dict[str, Any]]] = {
        "ctrlrun, 1 thread": lambda u: threads(u, 1, s),
        "ctrlrun, 8 threads": lambda u: threads(u, 8, s),
        "ctrlrun, 64 threads": lambda u: threads(u, 64, s),
        "ctrlrun, 64 concurrent tasks": lambda u: tasks(u, 64, s),
        PREPARED_8: lambda u: threads(u + prepared, 8, s),
        PREPARED_64: lambda u: tasks(u + prepared, 64, s),
    }
    template = _pgbench.template(pg)
    floor = _pgbench.floor_script(pg, template, "autocommit")
    for clients in (1, 8, 32):
        rows[f"pgbench, {clients} client{'s' if clients > 1 else ''}"] = lambda u, c=clients: (
            pgbench(pg, c, s, floor)
        )
    if not args.no_ctrlrun_sql:  # unnamed, as ctrlrun sends them
        ours = _pgbench.ctrlrun_script(pg)
        rows["pgbench, 1 client, ctrlrun's SQL"] = lambda u: pgbench(pg, 1, s, ours, "extended")
        rows["pgbench, 8 clients, ctrlrun's SQL"] = lambda u: pgbench(pg, 8, s, ours, "extended")
    receipts = _pgbench.floor_script(pg, template, "receipts")
    rows["pgbench, 8 clients, receipts floor"] = lambda u: pgbench(pg, 8, s, receipts)
    rows["pgbench, 8 clients, receipts floor, unnamed"] = lambda u: pgbench(
        pg, 8, s, receipts, "extended"
    )
    runs: Dict[str, List[Dict[str, Any]]] = {name: [] for name in rows}
    for r in range(args.repeats):
        for name, measure in rows.items():
            out = measure(schema_url(pg, "ctrlrun_scratch_tp_")[0])
            runs[name].append(out)
            doubles = f", doubles {out['doubles']}" if "doubles" in out else ""
            print(
                f"  [{r + 1}/{args.repeats}] {name}: {out['calls_per_s']:,.0f} calls/s{doubles}",
                flush=True,
            )
    median = {
        name: statistics.median(o["calls_per_s"] for o in outs) for name, outs in runs.items()
    }
    doubles = sum(o.get("doubles", 0) for outs in runs.values() for o in outs)
    title = f"PostgreSQL throughput: {args.seconds:g} s per run, {args.repeats} runs, medians"
    print(f"\n== {title} ==")
    print(
        f"{'workload':<46} {'calls/s':>10} {'all runs':>26} {'server CPU':>11} {'client CPU':>11}"
    )
    for name, outs in runs.items():
        each = ", ".join(f"{o['calls_per_s']:,.0f}" for o in outs)
        server = statistics.median(o["server_cpu_us"] for o in outs)
        client = statistics.median(o["client_cpu_us"] for o in outs)
        print(f"{name:<46} {median[name]:>10,.0f} {each:>26} {server:>8,.0f} µs {client:>8,.0f} µs")
    print("(CPU per call, medians: every postgres process; this process or pgbench)")
    pg8, pg32 = median["pgbench, 8 clients"], median["pgbench, 32 clients"]
    mine = median.get("pgbench, 8 clients, ctrlrun's SQL")
    checks = [
        ("8 threads vs pgbench 8 clients", median["ctrlrun, 8 threads"] / pg8),
        ("64 tasks vs pgbench 32 clients", median["ctrlrun, 64 concurrent tasks"] / pg32),
        ("8 threads, prepared_statements=on, vs pgbench 8 clients", median[PREPARED_8] / pg8),
        ("64 tasks, prepared_statements=on, vs pgbench 32 clients", median[PREPARED_64] / pg32),
    ]
    one = median["ctrlrun, 1 thread"]
    info = [("1 thread vs pgbench 1 client", one / median["pgbench, 1 client"])]
    if mine is not None:
        ours = one / median["pgbench, 1 client, ctrlrun's SQL"]
        info.append(("1 thread vs pgbench 1 client on ctrlrun's SQL", ours))
        info.append(("8 threads vs pgbench on ctrlrun's SQL", median["ctrlrun, 8 threads"] / mine))
        info.append(("pgbench: ctrlrun's SQL vs the two statements", mine / pg8))
    floor = median["pgbench, 8 clients, receipts floor"]
    info.append(("receipts floor vs the two statements (8 clients)", floor / pg8))
    unnamed = median["pgbench, 8 clients, receipts floor, unnamed"]
    info.append(("receipts floor unnamed vs the two statements", unnamed / pg8))
    eight = median["ctrlrun, 8 threads"]
    info.append(("8 threads vs pgbench on the receipts floor", eight / floor))
    print(f"\n{'check':<56} {'measured':>8} {'goal':>8} verdict")
    for name, ratio in checks:
        print(f"{name:<56} {ratio:>7.2f}x {'>= 0.6x':>8} {'MET' if ratio >= 0.6 else 'MISSED'}")
    for name, ratio in info:
        print(f"{name:<56} {ratio:>7.2f}x {'info':>8} n/a")
    print(f"{'doubles, every run':<56} {doubles:>8} {'0':>8} {'MET' if doubles == 0 else 'MISSED'}")
    summary = {"runs": runs, "median": median, "checks": dict(checks), "info": dict(info)}
    write_json(args.json, {**summary, "doubles": doubles})


if __name__ == "__main__":
    main()
