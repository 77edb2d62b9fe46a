"""The benchmark's plan: each row of ``bench.rows`` as a ``Spec`` that runs its measurement on a
fresh store in its own subprocess, and the ``Bench`` that plans, runs and counts them."""

from __future__ import annotations

import argparse
import os
import re
import shutil
import sys
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

from bench.rows import PG_DURABILITY, POSTGRES_ROWS, SQLITE_ROWS, Row
from bench.workers import (
    CONTENTION_KEYS,
    CONTENTION_PROCS,
    CTRLRUN_WORKER,
    FLOOR_WORKER,
    REF_VERSION,
    REF_WORKER,
    log,
    run_contention,
    run_worker,
)

Runner = Callable[[int], Dict[str, Any]]
SYSCALLS = "fsync,fdatasync,pwrite64,write"


class Spec:
    """One row of the table: a workload measured ``repeats`` times."""

    def __init__(self, backend: str, row: Row, label: str, durability: str, run: Runner) -> None:
        self.backend, self.id, self.who, self.kind = backend, row.id, row.who, row.kind
        self.label, self.durability, self.run = label, durability, run
        self.results: List[Dict[str, Any]] = []

    def median(self) -> Optional[Dict[str, Any]]:
        if not self.results:
            return None
        key = "total_s" if self.kind == "contention" else "p50_us"
        ordered = sorted(self.results, key=lambda r: r[key])
        return ordered[(len(ordered) - 1) // 2]


class Bench:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args, self.quick, self.repeats = args, args.quick, args.repeats
        self.n_sqlite = 200 if self.quick else 2000
        self.n_pg = 100 if self.quick else 1000
        self.reference = not args.no_reference
        self.specs: List[Spec] = []
        self.counter = 0
        self.workdir = self.pg_url = self.bouncer_url = self.ref_py = ""
        self.templates: Dict[str, str] = {}  # the stores ctrlrun made, whose tables floors copy
        self.pg_schemas: List[str] = []
        self.floor_py = sys.executable
        self.meta: Dict[str, Any] = {}

    def fresh(self, tag: str) -> str:
        self.counter += 1
        d = os.path.join(self.workdir, f"{self.counter:03d}-{tag}")
        os.makedirs(d)
        return d

    def schema(self) -> str:
        self.counter += 1
        name = f"ctrlrun_bench_{os.getpid()}_{self.counter}"
        self.pg_schemas.append(name)
        return name

    @staticmethod
    def with_schema(base: str, schema: str) -> str:
        return f"{base}{'&' if '?' in base else '?'}schema={schema}"

    # -- the rows ---------------------------------------------------------------------------

    def plan_sqlite(self) -> None:
        self.plan("sqlite", SQLITE_ROWS)

    def plan_postgres(self, b: str = "postgres") -> None:
        """The PostgreSQL rows, straight to the server (``postgres``) or through PgBouncer in
        transaction mode (``pgbouncer``)."""
        self.plan(b, POSTGRES_ROWS)

    def plan(self, b: str, rows: List[Row]) -> None:
        via = b == "pgbouncer"
        kind = "sqlite" if b == "sqlite" else "postgres"
        if kind not in self.templates:  # the floors' tables are copied from a store ctrlrun made
            if kind == "sqlite":
                self.templates[kind] = os.path.join(self.fresh("template"), "state.db")
                url = f"sqlite:///{self.templates[kind]}"
            else:
                self.templates[kind] = self.schema()
                url = self.with_schema(self.pg_url, self.templates[kind])
            run_worker(sys.executable, CTRLRUN_WORKER, {"mode": "init", "url": url})
        words = {
            "ref": REF_VERSION,
            "psycopg": "psycopg, unprepared" if via else "psycopg",
            "c": f"contention: {CONTENTION_PROCS} procs x {CONTENTION_KEYS} keys",
        }
        for row in rows:
            if (row.who == "original" and (not self.reference or via)) or (row.direct and via):
                continue
            durability = row.sync if b == "sqlite" else PG_DURABILITY
            label = row.label.format(**words)
            self.specs.append(Spec(b, row, label, durability, self.runner(b, row)))

    def worker(self, b: str, who: str) -> Tuple[str, str]:
        """The interpreter and script that measure ``who``'s rows."""
        if who == "ctrlrun":
            return sys.executable, CTRLRUN_WORKER
        if who == "original":
            return self.ref_py, REF_WORKER
        return (sys.executable if b == "sqlite" else self.floor_py), FLOOR_WORKER

    @staticmethod
    def mode(b: str, row: Row, step: str = "") -> str:
        """The worker's mode: ``step`` (init, contend), or the row's measurement."""
        if row.who != "floor":
            return step or ("dup" if row.kind == "dup" else "latency")
        prefix = "sqlite_" if b == "sqlite" else "pg_"
        return prefix + (step or ("read" if row.kind == "read" else "latency"))

    def store(self, b: str, row: Row) -> Dict[str, Any]:
        """The worker's configuration for a fresh store (a new file, a new schema)."""
        if b == "sqlite":
            path = os.path.join(self.fresh(row.who), "state.db")
            if row.who == "ctrlrun":
                return {"url": f"sqlite:///{path}?synchronous={row.sync.lower()}"}
            if row.who == "original":
                return {"path": path}
            floor = {"synchronous": row.sync, "variant": row.variant}
            return {"path": path, **floor, "template": self.templates["sqlite"]}
        via = b == "pgbouncer"
        base = self.bouncer_url if via else self.pg_url
        if row.who == "ctrlrun":
            url = self.with_schema(base, self.schema())
            return {"url": f"{url}&{row.url_options}" if row.url_options else url}
        if row.who == "original":
            return {"pg_url": self.pg_url, "schema": self.schema()}
        prepare = (not via) if row.prepare is None else row.prepare
        floor = {"variant": row.variant, "prepare": prepare, "template": self.templates["postgres"]}
        return {"pg_url": base, "schema": self.schema(), **floor}

    def runner(self, b: str, row: Row) -> Runner:
        python, script = self.worker(b, row.who)
        n = self.n_sqlite if b == "sqlite" else self.n_pg
        w = max(10, n // 20)

        def contend(r: int) -> Dict[str, Any]:
            """CONTENTION_PROCS processes over the same keys, on a store made first."""
            marks = os.path.join(self.fresh(f"contend-{b}-{row.who}"), "marks")
            os.makedirs(marks)
            cfg = self.store(b, row)
            run_worker(python, script, dict(cfg, mode=self.mode(b, row, "init")))
            contend = dict(cfg, mode=self.mode(b, row, "contend"))
            return run_contention(python, script, contend, marks, r)

        def run(r: int) -> Dict[str, Any]:
            cfg = dict(self.store(b, row), mode=self.mode(b, row), n=n, warmup=w)
            cfg["async"] = row.is_async
            go = lambda: run_worker(python, script, cfg)  # noqa: E731
            stats = b != "sqlite" and row.kind == "latency"  # commits, WAL syncs per call
            return self.with_pg_stats(go, n + w) if stats else go()

        return contend if row.kind == "contention" else run

    # -- PostgreSQL: commits and WAL flushes per call ---------------------------------------

    def pg_stats(self) -> Dict[str, Any]:
        return run_worker(self.floor_py, FLOOR_WORKER, {"mode": "pg_stats", "pg_url": self.pg_url})

    def with_pg_stats(self, fn: Callable[[], Dict[str, Any]], calls: int) -> Dict[str, Any]:
        """Run ``fn`` between two reads of the server's counters: commits and WAL flushes per
        call (the server is otherwise idle; setup and warm-up are counted in, so expect a
        little over the true figure)."""
        before = self.pg_stats()
        result = fn()
        time.sleep(0.5)  # a backend reports its counters when it exits
        after = self.pg_stats()
        for name, counter in (("server_commits", "xact_commit"), ("wal_syncs", "wal_sync")):
            result[f"{name}_per_call"] = (after[counter] - before[counter]) / calls
        result["wal_writes_per_call"] = (after["wal_write"] - before["wal_write"]) / calls
        return result

    # -- SQLite: fsyncs per call, from strace, in a separate untimed pass -------------------

    def sqlite_syscalls(self) -> Dict[str, Dict[str, float]]:
        """Every sync latency row again, with 0 and 200 calls, under ``strace -c``."""
        strace = shutil.which("strace")
        if strace is None or self.args.no_syscalls:
            return {}
        out: Dict[str, Dict[str, float]] = {}
        line = re.compile(r"\s*[\d.]+\s+[\d.]+\s+\d+\s+(\d+)\s+(?:\d+\s+)?(\w+)\s*$")
        for row in SQLITE_ROWS:
            skipped = row.who == "original" and not self.reference
            if row.kind != "latency" or row.is_async or skipped:
                continue
            counts: List[Dict[str, int]] = []
            for n in (0, 200):
                trace = os.path.join(self.fresh("strace"), "trace.txt")
                cfg = dict(self.store("sqlite", row), mode=self.mode("sqlite", row), n=n, warmup=0)
                traced = [strace, "-f", "-qq", "-c", "-o", trace, "-e", f"trace={SYSCALLS}"]
                run_worker(*self.worker("sqlite", row.who), cfg, prefix=traced)
                with open(trace) as f:
                    found = (line.match(ln) for ln in f)
                    counts.append({m.group(2): int(m.group(1)) for m in found if m})
            before, after = counts
            diff = {k: (after.get(k, 0) - before.get(k, 0)) / 200 for k in {*before, *after}}
            fsyncs = diff.get("fsync", 0) + diff.get("fdatasync", 0)
            out[row.id] = {"fsync_per_call": fsyncs, "pwrite_per_call": diff.get("pwrite64", 0)}
        return out

    # -- running ----------------------------------------------------------------------------

    def execute(self, backend: str) -> None:
        """Every row of ``backend`` ``repeats`` times, in interleaved rounds."""
        specs = [s for s in self.specs if s.backend == backend]
        for r in range(self.repeats):
            for s in specs:
                t0, load = time.monotonic(), loadavg()
                res = s.run(r)
                res["loadavg_1m_before"] = load
                res["elapsed_s"] = time.monotonic() - t0
                s.results.append(res)
                if s.kind == "contention":
                    shown = (
                        f"total {res['total_s']:.3f} s, executions {res['executions']}, "
                        f"doubles {res['double_executions']}"
                    )
                else:
                    shown = f"p50 {res['p50_us']:.1f} us, p99 {res['p99_us']:.1f} us"
                log(f"  [{backend} {r + 1}/{self.repeats}] {s.label} [{s.durability}]: {shown}")


def loadavg() -> Optional[float]:
    try:
        with open("/proc/loadavg") as f:
            return float(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None
