"""The benchmark's plan: each row of ``bench.rows`` as a ``Spec`` that runs its measurement on a
fresh store in its own subprocess, and the ``Bench`` that plans, runs and counts them."""

from __future__ import annotations

import argparse
import os
import re
import shutil
import sys
import time
from typing import Any, Callable, Dict, List, Optional

from bench.rows import PG_DURABILITY, POSTGRES_ROWS, SQLITE_ROWS, Row
from bench.venvs import REF_VERSION
from bench.workers import (
    CONTENTION_KEYS,
    CONTENTION_PROCS,
    CTRLRUN_WORKER,
    FLOOR_WORKER,
    REF_WORKER,
    log,
    run_contention,
    run_worker,
)

Runner = Callable[[int], Dict[str, Any]]


class Spec:
    """One row of the table: a workload measured ``repeats`` times."""

    def __init__(
        self,
        backend: str,
        rid: str,
        who: str,
        label: str,
        durability: str,
        kind: str,
        run: Callable[[int], Dict[str, Any]],
    ) -> None:
        self.backend, self.id, self.who, self.label = backend, rid, who, label
        self.durability, self.kind, self.run = durability, kind, run
        self.results: List[Dict[str, Any]] = []

    def median(self) -> Optional[Dict[str, Any]]:
        if not self.results:
            return None
        key = "total_s" if self.kind == "contention" else "p50_us"
        ordered = sorted(self.results, key=lambda r: r[key])
        return ordered[(len(ordered) - 1) // 2]


class Bench:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.quick = args.quick
        self.repeats = args.repeats
        self.n_sqlite = 200 if self.quick else 2000
        self.n_pg = 100 if self.quick else 1000
        self.reference = not args.no_reference
        self.specs: List[Spec] = []
        self.counter = 0
        self.workdir = ""
        self.pg_url = ""
        self.bouncer_url = ""
        self.pg_schemas: List[str] = []
        self.floor_py = sys.executable
        self.ref_py = ""
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

    # -- the rows ---------------------------------------------------------------------------

    def plan_sqlite(self) -> None:
        self.plan("sqlite", SQLITE_ROWS)

    def plan_postgres(self, b: str = "postgres") -> None:
        """The PostgreSQL rows, straight to the server (``postgres``) or through PgBouncer in
        transaction mode (``pgbouncer``)."""
        self.plan(b, POSTGRES_ROWS)

    def plan(self, b: str, rows: List[Row]) -> None:
        via = b == "pgbouncer"
        words = {
            "ref": REF_VERSION,
            "psycopg": "psycopg, unprepared" if via else "psycopg",
            "c": f"contention: {CONTENTION_PROCS} procs x {CONTENTION_KEYS} keys",
        }
        for row in rows:
            if (row.who == "original" and (not self.reference or via)) or (row.direct and via):
                continue
            if b == "sqlite":
                durability, run = row.sync, self.sqlite_runner(row)
            else:
                durability, run = PG_DURABILITY, self.pg_runner(row, via)
            self.specs.append(
                Spec(b, row.id, row.who, row.label.format(**words), durability, row.kind, run)
            )

    # -- SQLite ---------------------------------------------------------------------------

    def sqlite_runner(self, row: Row) -> Runner:
        n, w = self.n_sqlite, max(10, self.n_sqlite // 20)
        sync, kind, is_async = row.sync, row.mode, row.is_async

        if row.kind == "contention":
            return self.sqlite_contend(row.who, sync, row.variant)
        if row.who == "ctrlrun":

            def run(r: int) -> Dict[str, Any]:
                path = os.path.join(self.fresh("ctrlrun"), "state.db")
                url = f"sqlite:///{path}?synchronous={sync.lower()}"
                return run_worker(
                    sys.executable,
                    CTRLRUN_WORKER,
                    {"mode": kind, "url": url, "n": n, "warmup": w, "async": is_async},
                )

            return run
        if row.who == "original":

            def run(r: int) -> Dict[str, Any]:
                path = os.path.join(self.fresh("ref"), "state.db")
                return run_worker(
                    self.ref_py,
                    REF_WORKER,
                    {"mode": kind, "path": path, "n": n, "warmup": w, "async": is_async},
                )

            return run
        mode, variant = row.mode, row.variant

        def run(r: int) -> Dict[str, Any]:
            path = os.path.join(self.fresh("floor"), "state.db")
            return run_worker(
                sys.executable,
                FLOOR_WORKER,
                {
                    "mode": mode,
                    "path": path,
                    "synchronous": sync,
                    "variant": variant,
                    "n": n,
                    "warmup": w,
                    "async": is_async,
                },
            )

        return run

    def sqlite_contend(self, who: str, sync: str, variant: str = "min") -> Runner:
        def run(r: int) -> Dict[str, Any]:
            d = self.fresh(f"contend-{who}")
            marks = os.path.join(d, "marks")
            os.makedirs(marks)
            path = os.path.join(d, "state.db")
            if who == "ctrlrun":
                url = f"sqlite:///{path}?synchronous={sync.lower()}"
                cfg = {"url": url}
                run_worker(sys.executable, CTRLRUN_WORKER, dict(cfg, mode="init"))
                return run_contention(
                    sys.executable, CTRLRUN_WORKER, dict(cfg, mode="contend"), marks, r
                )
            if who == "original":
                cfg = {"path": path}
                run_worker(self.ref_py, REF_WORKER, dict(cfg, mode="init"))
                return run_contention(self.ref_py, REF_WORKER, dict(cfg, mode="contend"), marks, r)
            cfg = {"path": path, "synchronous": sync, "variant": variant}
            run_worker(sys.executable, FLOOR_WORKER, dict(cfg, mode="sqlite_init"))
            return run_contention(
                sys.executable, FLOOR_WORKER, dict(cfg, mode="sqlite_contend"), marks, r
            )

        return run

    # -- PostgreSQL -------------------------------------------------------------------------

    @staticmethod
    def with_schema(base: str, schema: str) -> str:
        sep = "&" if "?" in base else "?"
        return f"{base}{sep}schema={schema}"

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
        result["server_commits_per_call"] = (after["xact_commit"] - before["xact_commit"]) / calls
        result["wal_syncs_per_call"] = (after["wal_sync"] - before["wal_sync"]) / calls
        result["wal_writes_per_call"] = (after["wal_write"] - before["wal_write"]) / calls
        return result

    def pg_runner(self, row: Row, via: bool) -> Runner:
        n, w = self.n_pg, max(10, self.n_pg // 20)
        base = self.bouncer_url if via else self.pg_url
        kind, is_async = row.mode, row.is_async
        stats = row.kind == "latency"  # commits and WAL flushes per call, on the latency rows

        if row.kind == "contention":
            return self.pg_contend(row.who, base, via, row.variant)
        if row.who == "ctrlrun":
            options = row.url_options

            def run(r: int) -> Dict[str, Any]:
                url = self.with_schema(base, self.schema())
                cfg = {
                    "mode": kind,
                    "url": f"{url}&{options}" if options else url,
                    "n": n,
                    "warmup": w,
                    "async": is_async,
                }
                go = lambda: run_worker(sys.executable, CTRLRUN_WORKER, cfg)  # noqa: E731
                return self.with_pg_stats(go, n + w) if stats else go()

            return run
        if row.who == "original":

            def run(r: int) -> Dict[str, Any]:
                cfg = {
                    "mode": kind,
                    "pg_url": self.pg_url,
                    "schema": self.schema(),
                    "n": n,
                    "warmup": w,
                    "async": is_async,
                }
                go = lambda: run_worker(self.ref_py, REF_WORKER, cfg)  # noqa: E731
                return self.with_pg_stats(go, n + w) if stats else go()

            return run
        mode, variant = row.mode, row.variant
        prepare = (not via) if row.prepare is None else row.prepare

        def run(r: int) -> Dict[str, Any]:
            cfg = {
                "mode": mode,
                "pg_url": base,
                "schema": self.schema(),
                "variant": variant,
                "n": n,
                "warmup": w,
                "prepare": prepare,
                "async": is_async,
            }
            go = lambda: run_worker(self.floor_py, FLOOR_WORKER, cfg)  # noqa: E731
            return self.with_pg_stats(go, n + w) if stats else go()

        return run

    def pg_contend(self, who: str, base: str, via: bool, variant: str = "min") -> Runner:
        def run(r: int) -> Dict[str, Any]:
            marks = os.path.join(self.fresh(f"contend-pg-{who}"), "marks")
            os.makedirs(marks)
            schema = self.schema()
            if who == "ctrlrun":
                cfg = {"url": self.with_schema(base, schema)}
                run_worker(sys.executable, CTRLRUN_WORKER, dict(cfg, mode="init"))
                return run_contention(
                    sys.executable, CTRLRUN_WORKER, dict(cfg, mode="contend"), marks, r
                )
            if who == "original":
                cfg = {"pg_url": self.pg_url, "schema": schema}
                run_worker(self.ref_py, REF_WORKER, dict(cfg, mode="init"))
                return run_contention(self.ref_py, REF_WORKER, dict(cfg, mode="contend"), marks, r)
            cfg = {"pg_url": base, "schema": schema, "variant": variant, "prepare": not via}
            run_worker(self.floor_py, FLOOR_WORKER, dict(cfg, mode="pg_init"))
            return run_contention(
                self.floor_py, FLOOR_WORKER, dict(cfg, mode="pg_contend"), marks, r
            )

        return run

    # -- syscalls (SQLite): fsyncs per call, from strace, in a separate untimed pass --------

    def sqlite_syscalls(self) -> Dict[str, Dict[str, float]]:
        strace = shutil.which("strace")
        if strace is None or self.args.no_syscalls:
            return {}
        n = 200
        out: Dict[str, Dict[str, float]] = {}

        def count(python: str, script: str, cfg: Dict[str, Any]) -> Dict[str, int]:
            trace = os.path.join(self.fresh("strace"), "trace.txt")
            run_worker(
                python,
                script,
                cfg,
                prefix=[
                    strace,
                    "-f",
                    "-qq",
                    "-c",
                    "-o",
                    trace,
                    "-e",
                    "trace=fsync,fdatasync,pwrite64,write",
                ],
            )
            counts: Dict[str, int] = {}
            with open(trace) as f:
                for line in f:
                    m = re.match(r"\s*[\d.]+\s+[\d.]+\s+\d+\s+(\d+)\s+(?:\d+\s+)?(\w+)\s*$", line)
                    if m:
                        counts[m.group(2)] = int(m.group(1))
            return counts

        def per_call(rid: str, python: str, script: str, make: Callable[[int], Dict]) -> None:
            base = count(python, script, make(0))
            full = count(python, script, make(n))
            diff = {k: (full.get(k, 0) - base.get(k, 0)) / n for k in set(full) | set(base)}
            out[rid] = {
                "fsync_per_call": diff.get("fsync", 0) + diff.get("fdatasync", 0),
                "pwrite_per_call": diff.get("pwrite64", 0),
            }

        for sync in ("FULL", "NORMAL"):

            def cfg_c(k: int, sync: str = sync) -> Dict[str, Any]:
                path = os.path.join(self.fresh("sc"), "s.db")
                return {
                    "mode": "latency",
                    "n": k,
                    "warmup": 0,
                    "url": f"sqlite:///{path}?synchronous={sync.lower()}",
                }

            per_call(f"ctrlrun.sync.{sync}", sys.executable, CTRLRUN_WORKER, cfg_c)
            for variant in ("min", "same", "receipts"):

                def cfg_f(k: int, sync: str = sync, variant: str = variant) -> Dict[str, Any]:
                    return {
                        "mode": "sqlite_latency",
                        "n": k,
                        "warmup": 0,
                        "synchronous": sync,
                        "variant": variant,
                        "path": os.path.join(self.fresh("sf"), "s.db"),
                    }

                per_call(f"floor.{variant}.{sync}", sys.executable, FLOOR_WORKER, cfg_f)
        if self.reference:

            def cfg_r(k: int) -> Dict[str, Any]:
                return {
                    "mode": "latency",
                    "n": k,
                    "warmup": 0,
                    "path": os.path.join(self.fresh("sr"), "s.db"),
                }

            per_call("ref.sync.NORMAL", self.ref_py, REF_WORKER, cfg_r)
        return out

    # -- running ----------------------------------------------------------------------------

    def execute(self, backend: str) -> None:
        specs = [s for s in self.specs if s.backend == backend]
        for r in range(self.repeats):
            for s in specs:
                t0 = time.monotonic()
                load = loadavg()
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
