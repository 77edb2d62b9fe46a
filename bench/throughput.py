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
import os
import statistics
import sys
import tempfile
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
TASKS_64 = "ctrlrun, 64 concurrent tasks"


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
    args = ap.parse_args()
    pg = pg_server() or sys.exit("needs a server: python3 -m throwaway.pgserver -- <this command>")
    s = args.seconds
    prepared = "&prepared_statements=on"  # a direct connection's option (docs/postgres.md)
    rows: Dict[str, Callable[[str], Dict[str, Any]]] = {
        "ctrlrun, 8 threads": lambda u: threads(u, 8, s),
        TASKS_64: lambda u: tasks(u, 64, s),
        PREPARED_8: lambda u: threads(u + prepared, 8, s),
        PREPARED_64: lambda u: tasks(u + prepared, 64, s),
        "ctrlrun, 8 threads, group_commit=off": lambda u: threads(u + "&group_commit=off", 8, s),
        f"{TASKS_64}, group_commit=off": lambda u: tasks(u + "&group_commit=off", 64, s),
    }
    for gc in ("on", "off"):  # SQLite FULL: each commit an fsync (issue 51, item 3)
        rows[f"SQLite FULL, 8 threads, group_commit={gc}"] = lambda u, g=gc: on_a_file(
            lambda f: threads(f"sqlite:///{f}?group_commit={g}", 8, s)
        )
    template = _pgbench.template(pg)
    floor = _pgbench.floor_script(pg, template, "autocommit")
    for clients in (8, 32):
        rows[f"pgbench, {clients} clients"] = lambda u, c=clients: pgbench(pg, c, s, floor)
    ours = _pgbench.ctrlrun_script(pg)  # as ctrlrun sends them: unnamed, or prepared
    receipts = _pgbench.floor_script(pg, template, "receipts")
    for form, mode in (("unnamed", "extended"), ("prepared", "prepared")):
        for clients in (8, 32):
            for what, script in (("ctrlrun's SQL", ours), ("receipts floor", receipts)):
                rows[f"pgbench, {clients} clients, {what}, {form}"] = (
                    lambda u, c=clients, sc=script, m=mode: pgbench(pg, c, s, sc, m)
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
    med = {
        (name, k): statistics.median(o[k] for o in outs)
        for name, outs in runs.items()
        for k in ("calls_per_s", "server_cpu_us", "client_cpu_us")
    }
    doubles = sum(o.get("doubles", 0) for outs in runs.values() for o in outs)
    title = f"PostgreSQL throughput: {args.seconds:g} s per run, {args.repeats} runs, medians"
    print(f"\n== {title} ==")
    print(
        f"{'workload':<50} {'calls/s':>10} {'all runs':>26} {'server CPU':>11} {'client CPU':>11}"
    )
    for name, outs in runs.items():
        each = ", ".join(f"{o['calls_per_s']:,.0f}" for o in outs)
        server, client = med[(name, "server_cpu_us")], med[(name, "client_cpu_us")]
        print(
            f"{name:<50} {med[(name, 'calls_per_s')]:>10,.0f} {each:>26} {server:>8,.0f} µs "
            f"{client:>8,.0f} µs"
        )
    print("(CPU per call, medians: every postgres process; this process or pgbench)")
    write_json(args.json, {"runs": runs, "checks": report(med, doubles), "doubles": doubles})


def on_a_file(run: Callable[[str], Dict[str, Any]]) -> Dict[str, Any]:
    with tempfile.TemporaryDirectory(dir=_pgbench.ROOT / "bench") as folder:
        return run(os.path.join(folder, "state.db"))


def report(med: Dict[Tuple[str, str], float], doubles: int) -> List[Tuple[str, float, str]]:
    """Issue 51's checks, each a ratio of two medians of this run (``>=``/``<=`` goal), and
    for information the server's CPU per call of ctrlrun's client beside its SQL's alone."""
    tps, cpu = (lambda n: med[(n, "calls_per_s")]), (lambda n: med[(n, "server_cpu_us")])
    floor, checks = "pgbench, {} clients, receipts floor, {}", []
    for form, eight, many in (
        ("unnamed", "ctrlrun, 8 threads", TASKS_64),
        ("prepared", PREPARED_8, PREPARED_64),
    ):
        sql = f"pgbench, 8 clients, ctrlrun's SQL, {form}"
        checks += [
            (f"1: server CPU/call, ctrlrun's SQL vs receipts floor, 8 clients, {form}", cpu(sql) / cpu(floor.format(8, form)), "<= 1.2"),
            (f"2: {eight} vs receipts floor, 8 clients", tps(eight) / tps(floor.format(8, form)), ">= 0.9"),
            (f"2: {many} vs receipts floor, 32 clients", tps(many) / tps(floor.format(32, form)), ">= 0.9"),
            (f"3: {many} vs pgbench, 32 clients (two statements)", tps(many) / tps("pgbench, 32 clients"), ">= 1.0"),
            (f"info: server CPU/call, {eight} vs ctrlrun's SQL alone", cpu(eight) / cpu(sql), "info"),
        ]  # fmt: skip
    checks += [
        ("3: server CPU/call, 64 tasks vs group_commit=off", cpu(TASKS_64) / cpu(f"{TASKS_64}, group_commit=off"), "<= 0.5"),
        ("3: SQLite FULL, 8 threads vs group_commit=off", tps("SQLite FULL, 8 threads, group_commit=on") / tps("SQLite FULL, 8 threads, group_commit=off"), ">= 3.0"),
    ]  # fmt: skip
    print(f"\n{'check':<78} {'measured':>8} {'goal':>7} verdict")
    for name, ratio, goal in checks:
        op, want = goal.split(" ") if goal != "info" else ("", "0")
        met = ratio <= float(want) if op == "<=" else ratio >= float(want)
        print(
            f"{name:<78} {ratio:>7.2f}x {goal:>7} {'n/a' if not op else 'MET' if met else 'MISSED'}"
        )
    print(f"{'doubles, every run':<78} {doubles:>8} {'0':>7} {'MET' if doubles == 0 else 'MISSED'}")
    return checks


if __name__ == "__main__":
    main()
