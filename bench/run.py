#!/usr/bin/env python3
"""ctrlrun's benchmark: protected calls against the original product and the engine floors.

    python -m bench.run [--quick] [--backends sqlite,postgres] [--no-reference]

Measures the ctrlrun that the running interpreter imports (``make bench`` builds it with
``maturin develop --release`` first) and says which build that is. Every measurement runs in its
own subprocess, on a fresh store, three times (``--repeats``); the run with the median p50 is
reported. Prints a plain-text table and writes bench/results.json. See bench/README.md.

Not a test: it asserts nothing except that no key executed twice in the contention runs (a
double execution makes the exit status 1).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any, Callable, Dict, List, Optional, Tuple
from urllib.parse import unquote, urlsplit

from bench import _report
from tests_py.support.pgbouncer import PgBouncer

BENCH = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(BENCH)
REF_VENV = os.path.join(BENCH, ".ref-venv")
FLOOR_VENV = os.path.join(BENCH, ".floor-venv")
REF_VERSION = "0.12.2"
PSYCOPG = "psycopg[binary]==3.3.9"
CTRLRUN_WORKER = os.path.join(BENCH, "_ctrlrun_worker.py")
REF_WORKER = os.path.join(BENCH, "_ref_worker.py")
FLOOR_WORKER = os.path.join(BENCH, "_floor_worker.py")

CONTENTION_PROCS = 8
CONTENTION_KEYS = 200
WORKER_TIMEOUT = 1800


def log(msg: str) -> None:
    sys.stderr.write(msg + "\n")
    sys.stderr.flush()


# -- venvs ----------------------------------------------------------------------------------


def venv_python(venv: str) -> str:
    return os.path.join(venv, "bin", "python")


def ensure_venv(venv: str, packages: List[str], check: str) -> str:
    """Create ``venv`` (from the base interpreter) with ``packages`` unless ``check`` already
    runs in it. Returns its python."""
    py = venv_python(venv)
    if os.path.exists(py):
        ok = subprocess.run([py, "-c", check], capture_output=True).returncode == 0
        if ok:
            return py
    log(f"setting up {os.path.relpath(venv, ROOT)}: pip install {' '.join(packages)}")
    if not os.path.exists(py):
        base = getattr(sys, "_base_executable", sys.executable)
        subprocess.run([base, "-m", "venv", venv], check=True)
    subprocess.run([py, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                    *packages], check=True)
    subprocess.run([py, "-c", check], check=True)
    return py


# -- workers --------------------------------------------------------------------------------


class WorkerError(RuntimeError):
    pass


def run_worker(python: str, script: str, cfg: Dict[str, Any],
               prefix: Optional[List[str]] = None) -> Dict[str, Any]:
    cmd = [*(prefix or []), python, script, json.dumps(cfg)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=WORKER_TIMEOUT,
                          cwd=cfg.get("cwd") or None)
    lines = [ln for ln in proc.stdout.splitlines() if ln.strip()]
    if proc.returncode != 0 or not lines:
        raise WorkerError(
            f"{os.path.basename(script)} {cfg.get('mode')} failed ({proc.returncode}):\n"
            f"{proc.stderr[-3000:]}\n{proc.stdout[-1000:]}")
    return json.loads(lines[-1])


def run_contention(python: str, script: str, base_cfg: Dict[str, Any], marks: str,
                   seed: int) -> Dict[str, Any]:
    """CONTENTION_PROCS processes over the same CONTENTION_KEYS keys, each in its own shuffled
    order, released together; total = last finish - common start."""
    keys = [f"c{i}" for i in range(CONTENTION_KEYS)]
    procs = []
    for p in range(CONTENTION_PROCS):
        order = list(keys)
        random.Random(seed * 1000 + p).shuffle(order)
        cfg = dict(base_cfg, keys=order, marks=marks)
        procs.append(subprocess.Popen([python, script, json.dumps(cfg)], stdin=subprocess.PIPE,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    try:
        for pr in procs:
            line = pr.stdout.readline()
            if line.strip() != "ready":
                raise WorkerError(f"contention worker did not start: {line!r} "
                                  f"{pr.stderr.read()[-2000:]}")
        start = time.time() + 0.3
        for pr in procs:
            pr.stdin.write(f"{start}\n")
            pr.stdin.flush()
        outs = []
        for pr in procs:
            out, err = pr.communicate(timeout=WORKER_TIMEOUT)
            lines = [ln for ln in out.splitlines() if ln.strip()]
            if pr.returncode != 0 or not lines:
                raise WorkerError(f"contention worker failed ({pr.returncode}): {err[-2000:]}")
            outs.append(json.loads(lines[-1]))
    finally:
        for pr in procs:
            if pr.poll() is None:
                pr.kill()
    runs: Dict[str, int] = {k: 0 for k in keys}
    for name in os.listdir(marks):
        runs[name.split(".", 1)[0]] = runs.get(name.split(".", 1)[0], 0) + 1
    doubles = sorted(k for k, c in runs.items() if c > 1)
    missing = sorted(k for k, c in runs.items() if c == 0)
    return {
        "total_s": max(o["end"] for o in outs) - start,
        "won": sum(o["won"] for o in outs),
        "lost": sum(o["lost"] for o in outs),
        "errors": sum(o["n_errors"] for o in outs),
        "error_samples": [e for o in outs for e in o["errors"]][:5],
        "executions": sum(runs.values()),
        "double_executions": len(doubles),
        "double_keys": doubles[:10],
        "never_executed": len(missing),
        "exactly_once": not doubles and not missing,
    }


# -- the plan -------------------------------------------------------------------------------


class Spec:
    """One row of the table: a workload measured ``repeats`` times."""

    def __init__(self, backend: str, rid: str, who: str, label: str, durability: str,
                 kind: str, run: Callable[[int], Dict[str, Any]]) -> None:
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

    # -- SQLite ---------------------------------------------------------------------------

    def plan_sqlite(self) -> None:
        n, w = self.n_sqlite, max(10, self.n_sqlite // 20)
        add = self.specs.append

        def ctrl(sync: str, kind: str, is_async: bool = False) -> Callable[[int], Dict]:
            def run(r: int) -> Dict[str, Any]:
                path = os.path.join(self.fresh("ctrlrun"), "state.db")
                url = f"sqlite:///{path}?synchronous={sync.lower()}"
                return run_worker(sys.executable, CTRLRUN_WORKER, {
                    "mode": kind, "url": url, "n": n, "warmup": w, "async": is_async})
            return run

        def ref(kind: str, is_async: bool = False) -> Callable[[int], Dict]:
            def run(r: int) -> Dict[str, Any]:
                path = os.path.join(self.fresh("ref"), "state.db")
                return run_worker(self.ref_py, REF_WORKER, {
                    "mode": kind, "path": path, "n": n, "warmup": w, "async": is_async})
            return run

        def floor(mode: str, sync: str, variant: str = "min",
                  is_async: bool = False) -> Callable[[int], Dict]:
            def run(r: int) -> Dict[str, Any]:
                path = os.path.join(self.fresh("floor"), "state.db")
                return run_worker(sys.executable, FLOOR_WORKER, {
                    "mode": mode, "path": path, "synchronous": sync, "variant": variant,
                    "n": n, "warmup": w, "async": is_async})
            return run

        b = "sqlite"
        for sync in ("FULL", "NORMAL"):
            add(Spec(b, f"ctrlrun.sync.{sync}", "ctrlrun", "ctrlrun, sync", sync, "latency",
                     ctrl(sync, "latency")))
            add(Spec(b, f"ctrlrun.async.{sync}", "ctrlrun", "ctrlrun, async", sync, "latency",
                     ctrl(sync, "latency", True)))
        if self.reference:
            add(Spec(b, "ref.sync.NORMAL", "original", f"original {REF_VERSION}, sync", "NORMAL",
                     "latency", ref("latency")))
            add(Spec(b, "ref.async.NORMAL", "original",
                     f"original {REF_VERSION}, async (to_thread)", "NORMAL", "latency",
                     ref("latency", True)))
        for sync in ("FULL", "NORMAL"):
            add(Spec(b, f"floor.min.{sync}", "floor", "floor: 2 txns (minimum)", sync,
                     "latency", floor("sqlite_latency", sync, "min")))
            add(Spec(b, f"floor.same.{sync}", "floor", "floor: ctrlrun's statements (2 txns)",
                     sync, "latency", floor("sqlite_latency", sync, "same")))
            add(Spec(b, f"floor.receipts.{sync}", "floor",
                     "floor: 2 txns + receipts, columns, indexes", sync, "latency",
                     floor("sqlite_latency", sync, "receipts")))
            add(Spec(b, f"floor.min.async.{sync}", "floor",
                     "floor: 2 txns (minimum), async (off the loop)", sync, "latency",
                     floor("sqlite_latency", sync, "min", True)))
            add(Spec(b, f"floor.receipts.async.{sync}", "floor",
                     "floor: 2 txns + receipts, columns, indexes, async (off the loop)", sync,
                     "latency", floor("sqlite_latency", sync, "receipts", True)))
        add(Spec(b, "dup.ctrlrun", "ctrlrun", "duplicate: ctrlrun (committed key again)", "FULL",
                 "dup", ctrl("FULL", "dup")))
        if self.reference:
            add(Spec(b, "dup.ref", "original", f"duplicate: original {REF_VERSION}", "NORMAL",
                     "dup", ref("dup")))
        add(Spec(b, "dup.floor", "floor", "floor: one indexed read", "FULL", "read",
                 floor("sqlite_read", "FULL")))

        def contend(who: str, sync: str, variant: str = "min") -> Callable[[int], Dict]:
            def run(r: int) -> Dict[str, Any]:
                d = self.fresh(f"contend-{who}")
                marks = os.path.join(d, "marks")
                os.makedirs(marks)
                path = os.path.join(d, "state.db")
                if who == "ctrlrun":
                    url = f"sqlite:///{path}?synchronous={sync.lower()}"
                    cfg = {"url": url}
                    run_worker(sys.executable, CTRLRUN_WORKER, dict(cfg, mode="init"))
                    return run_contention(sys.executable, CTRLRUN_WORKER,
                                          dict(cfg, mode="contend"), marks, r)
                if who == "original":
                    cfg = {"path": path}
                    run_worker(self.ref_py, REF_WORKER, dict(cfg, mode="init"))
                    return run_contention(self.ref_py, REF_WORKER, dict(cfg, mode="contend"),
                                          marks, r)
                cfg = {"path": path, "synchronous": sync, "variant": variant}
                run_worker(sys.executable, FLOOR_WORKER, dict(cfg, mode="sqlite_init"))
                return run_contention(sys.executable, FLOOR_WORKER,
                                      dict(cfg, mode="sqlite_contend"), marks, r)
            return run

        c = f"contention: {CONTENTION_PROCS} procs x {CONTENTION_KEYS} keys"
        for sync in ("FULL", "NORMAL"):
            add(Spec(b, f"contend.ctrlrun.{sync}", "ctrlrun", f"{c}, ctrlrun", sync,
                     "contention", contend("ctrlrun", sync)))
            add(Spec(b, f"contend.floor.min.{sync}", "floor", f"{c}, floor 2 txns", sync,
                     "contention", contend("floor", sync, "min")))
            add(Spec(b, f"contend.floor.same.{sync}", "floor", f"{c}, floor ctrlrun's statements", sync,
                     "contention", contend("floor", sync, "same")))
        if self.reference:
            add(Spec(b, "contend.ref.NORMAL", "original", f"{c}, original {REF_VERSION}",
                     "NORMAL", "contention", contend("original", "NORMAL")))

    # -- PostgreSQL -------------------------------------------------------------------------

    @staticmethod
    def with_schema(base: str, schema: str) -> str:
        sep = "&" if "?" in base else "?"
        return f"{base}{sep}schema={schema}"

    def pg_stats(self) -> Dict[str, Any]:
        return run_worker(self.floor_py, FLOOR_WORKER, {"mode": "pg_stats",
                                                        "pg_url": self.pg_url})

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

    def plan_postgres(self, b: str = "postgres") -> None:
        """The PostgreSQL rows, straight to the server (``postgres``) or through PgBouncer in
        transaction mode (``pgbouncer``: no original, and the floors send every statement
        unnamed, since a prepared one would not be there on the next server connection)."""
        n, w = self.n_pg, max(10, self.n_pg // 20)
        add = self.specs.append
        via = b == "pgbouncer"
        base = self.bouncer_url if via else self.pg_url
        reference = self.reference and not via

        def ctrl(kind: str, is_async: bool = False) -> Callable[[int], Dict]:
            def run(r: int) -> Dict[str, Any]:
                cfg = {"mode": kind, "url": self.with_schema(base, self.schema()), "n": n,
                       "warmup": w, "async": is_async}
                go = lambda: run_worker(sys.executable, CTRLRUN_WORKER, cfg)  # noqa: E731
                return self.with_pg_stats(go, n + w) if kind == "latency" else go()
            return run

        def ref(kind: str, is_async: bool = False) -> Callable[[int], Dict]:
            def run(r: int) -> Dict[str, Any]:
                cfg = {"mode": kind, "pg_url": self.pg_url, "schema": self.schema(), "n": n,
                       "warmup": w, "async": is_async}
                go = lambda: run_worker(self.ref_py, REF_WORKER, cfg)  # noqa: E731
                return self.with_pg_stats(go, n + w) if kind == "latency" else go()
            return run

        def floor(mode: str, variant: str = "min", prepare: bool = not via,
                  is_async: bool = False) -> Callable[[int], Dict]:
            def run(r: int) -> Dict[str, Any]:
                cfg = {"mode": mode, "pg_url": base, "schema": self.schema(),
                       "variant": variant, "n": n, "warmup": w, "prepare": prepare,
                       "async": is_async}
                go = lambda: run_worker(self.floor_py, FLOOR_WORKER, cfg)  # noqa: E731
                return self.with_pg_stats(go, n + w) if mode == "pg_latency" else go()
            return run

        dur = "sync_commit=on"
        psycopg = "psycopg, unprepared" if via else "psycopg"
        add(Spec(b, "ctrlrun.sync", "ctrlrun", "ctrlrun, sync", dur, "latency", ctrl("latency")))
        add(Spec(b, "ctrlrun.async", "ctrlrun", "ctrlrun, async", dur, "latency",
                 ctrl("latency", True)))
        if reference:
            add(Spec(b, "ref.sync", "original", f"original {REF_VERSION}, sync", dur, "latency",
                     ref("latency")))
            add(Spec(b, "ref.async", "original", f"original {REF_VERSION}, async (to_thread)",
                     dur, "latency", ref("latency", True)))
        add(Spec(b, "floor.min", "floor", f"floor: 2 txns (minimum), {psycopg}", dur, "latency",
                 floor("pg_latency", "min")))
        add(Spec(b, "floor.auto", "floor", f"floor: 2 autocommit statements, {psycopg}", dur,
                 "latency", floor("pg_latency", "autocommit")))
        add(Spec(b, "floor.same", "floor", f"floor: ctrlrun's statements (2 txns), {psycopg}",
                 dur, "latency", floor("pg_latency", "same")))
        if not via:  # (the pooler's report compares with the unprepared 2-txn floor only)
            add(Spec(b, "floor.receipts", "floor",
                     f"floor: 2 autocommit statements + receipts, columns, indexes, {psycopg}", dur,
                     "latency", floor("pg_latency", "receipts")))
            add(Spec(b, "floor.receipts.unprepared", "floor",
                     "floor: 2 autocommit statements + receipts, columns, indexes, psycopg, "
                     "unprepared", dur, "latency", floor("pg_latency", "receipts", prepare=False)))
            add(Spec(b, "floor.auto.async", "floor",
                     f"floor: 2 autocommit statements, {psycopg} async", dur, "latency",
                     floor("pg_latency", "autocommit", is_async=True)))
            add(Spec(b, "floor.receipts.async", "floor",
                     f"floor: 2 autocommit statements + receipts, columns, indexes, {psycopg} "
                     f"async", dur, "latency", floor("pg_latency", "receipts", is_async=True)))
        add(Spec(b, "dup.ctrlrun", "ctrlrun", "duplicate: ctrlrun (committed key again)", dur,
                 "dup", ctrl("dup")))
        if reference:
            add(Spec(b, "dup.ref", "original", f"duplicate: original {REF_VERSION}", dur, "dup",
                     ref("dup")))
        add(Spec(b, "dup.floor", "floor", f"floor: one indexed read, {psycopg}", dur, "read",
                 floor("pg_read")))
        if not via:  # what a read costs when it is parsed on every call, as ctrlrun's are
            add(Spec(b, "dup.floor.unprepared", "floor", "one indexed read, psycopg, unprepared",
                     dur, "read", floor("pg_read", prepare=False)))

        def contend(who: str, variant: str = "min") -> Callable[[int], Dict]:
            def run(r: int) -> Dict[str, Any]:
                marks = os.path.join(self.fresh(f"contend-pg-{who}"), "marks")
                os.makedirs(marks)
                schema = self.schema()
                if who == "ctrlrun":
                    cfg = {"url": self.with_schema(base, schema)}
                    run_worker(sys.executable, CTRLRUN_WORKER, dict(cfg, mode="init"))
                    return run_contention(sys.executable, CTRLRUN_WORKER,
                                          dict(cfg, mode="contend"), marks, r)
                if who == "original":
                    cfg = {"pg_url": self.pg_url, "schema": schema}
                    run_worker(self.ref_py, REF_WORKER, dict(cfg, mode="init"))
                    return run_contention(self.ref_py, REF_WORKER, dict(cfg, mode="contend"),
                                          marks, r)
                cfg = {"pg_url": base, "schema": schema, "variant": variant, "prepare": not via}
                run_worker(self.floor_py, FLOOR_WORKER, dict(cfg, mode="pg_init"))
                return run_contention(self.floor_py, FLOOR_WORKER,
                                      dict(cfg, mode="pg_contend"), marks, r)
            return run

        c = f"contention: {CONTENTION_PROCS} procs x {CONTENTION_KEYS} keys"
        add(Spec(b, "contend.ctrlrun", "ctrlrun", f"{c}, ctrlrun", dur, "contention",
                 contend("ctrlrun")))
        add(Spec(b, "contend.floor.min", "floor", f"{c}, floor 2 txns", dur, "contention",
                 contend("floor", "min")))
        if not via:
            add(Spec(b, "contend.floor.same", "floor", f"{c}, floor ctrlrun's statements", dur,
                     "contention", contend("floor", "same")))
        if reference:
            add(Spec(b, "contend.ref", "original", f"{c}, original {REF_VERSION}", dur,
                     "contention", contend("original")))

    # -- syscalls (SQLite): fsyncs per call, from strace, in a separate untimed pass --------

    def sqlite_syscalls(self) -> Dict[str, Dict[str, float]]:
        strace = shutil.which("strace")
        if strace is None or self.args.no_syscalls:
            return {}
        n = 200
        out: Dict[str, Dict[str, float]] = {}

        def count(python: str, script: str, cfg: Dict[str, Any]) -> Dict[str, int]:
            trace = os.path.join(self.fresh("strace"), "trace.txt")
            run_worker(python, script, cfg,
                       prefix=[strace, "-f", "-qq", "-c", "-o", trace,
                               "-e", "trace=fsync,fdatasync,pwrite64,write"])
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
            out[rid] = {"fsync_per_call": diff.get("fsync", 0) + diff.get("fdatasync", 0),
                        "pwrite_per_call": diff.get("pwrite64", 0)}

        for sync in ("FULL", "NORMAL"):
            def cfg_c(k: int, sync: str = sync) -> Dict[str, Any]:
                path = os.path.join(self.fresh("sc"), "s.db")
                return {"mode": "latency", "n": k, "warmup": 0,
                        "url": f"sqlite:///{path}?synchronous={sync.lower()}"}
            per_call(f"ctrlrun.sync.{sync}", sys.executable, CTRLRUN_WORKER, cfg_c)
            for variant in ("min", "same", "receipts"):
                def cfg_f(k: int, sync: str = sync, variant: str = variant) -> Dict[str, Any]:
                    return {"mode": "sqlite_latency", "n": k, "warmup": 0, "synchronous": sync,
                            "variant": variant,
                            "path": os.path.join(self.fresh("sf"), "s.db")}
                per_call(f"floor.{variant}.{sync}", sys.executable, FLOOR_WORKER, cfg_f)
        if self.reference:
            def cfg_r(k: int) -> Dict[str, Any]:
                return {"mode": "latency", "n": k, "warmup": 0,
                        "path": os.path.join(self.fresh("sr"), "s.db")}
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
                    shown = (f"total {res['total_s']:.3f} s, executions {res['executions']}, "
                             f"doubles {res['double_executions']}")
                else:
                    shown = f"p50 {res['p50_us']:.1f} us, p99 {res['p99_us']:.1f} us"
                log(f"  [{backend} {r + 1}/{self.repeats}] {s.label} [{s.durability}]: {shown}")


def loadavg() -> Optional[float]:
    try:
        with open("/proc/loadavg") as f:
            return float(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None


# -- reporting ------------------------------------------------------------------------------


def fs_of(path: str) -> str:
    best, fstype = "", "?"
    try:
        with open("/proc/mounts") as f:
            for line in f:
                parts = line.split()
                mnt = parts[1]
                if (path == mnt or path.startswith(mnt.rstrip("/") + "/")) and len(mnt) > len(best):
                    best, fstype = mnt, parts[2]
    except OSError:
        pass
    return fstype


def git_state() -> Dict[str, Any]:
    try:
        head = subprocess.run(["git", "-C", ROOT, "rev-parse", "HEAD"], capture_output=True,
                              text=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", ROOT, "status", "--porcelain", "--", "src",
                                "python"], capture_output=True, text=True).stdout.strip()
        return {"commit": head, "src_or_python_dirty": bool(dirty)}
    except OSError:
        return {}


def start_bouncer(pg_url: str) -> Any:
    """A throwaway PgBouncer in transaction mode in front of ``pg_url``'s server, with a
    server pool large enough for the contention rows' 8 processes."""
    parts = urlsplit(pg_url)
    return PgBouncer(
        parts.hostname or "127.0.0.1", parts.port or 5432, unquote(parts.username or "postgres"),
        unquote(parts.password) if parts.password else None, "transaction",
        pool_size=CONTENTION_PROCS)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="10x fewer calls per run")
    ap.add_argument("--backends", default="sqlite,postgres,pgbouncer",
                    help="comma-separated: sqlite, postgres, pgbouncer (PostgreSQL through "
                         "PgBouncer in transaction mode); default all three")
    ap.add_argument("--no-reference", action="store_true",
                    help="skip the original product (no bench/.ref-venv needed)")
    ap.add_argument("--repeats", type=int, default=3, help="runs per measurement (default 3)")
    ap.add_argument("--no-syscalls", action="store_true",
                    help="skip the strace pass that counts fsyncs per call (SQLite)")
    ap.add_argument("--workdir", default=os.path.join(BENCH, ".work"),
                    help="where the SQLite files go (default bench/.work; keep it on a real disk)")
    ap.add_argument("--json", default=os.path.join(BENCH, "results.json"),
                    help="where to write the results (default bench/results.json)")
    args = ap.parse_args()
    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    for b in backends:
        if b not in ("sqlite", "postgres", "pgbouncer"):
            ap.error(f"unknown backend {b!r}")

    bench = Bench(args)
    started = _dt.datetime.now(_dt.timezone.utc)

    info = run_worker(sys.executable, CTRLRUN_WORKER, {"mode": "info"})
    build_line = (f"Measuring ctrlrun {info['version']} ({info['build']} build) from "
                  f"{info['extension']} ({info['extension_bytes'] / 1e6:.1f} MB), "
                  f"Python {info['python']}")
    log(build_line)
    warnings: List[str] = []
    if info["build"] != "release":
        warnings.append(f"WARNING: the extension is a {info['build']} build: these numbers do not "
                        f"measure the product. Build it with `maturin develop --release` "
                        f"(`make bench` does).")
    if info["stale"]:
        warnings.append("WARNING: src/ has .rs files newer than the extension: the build is "
                        "stale (rebuild with `maturin develop --release`).")
    for w in warnings:
        log(w)

    if args.no_reference:
        log("the original product: skipped (--no-reference)")
    else:
        bench.ref_py = ensure_venv(
            REF_VENV, [f"ctrlrun=={REF_VERSION}", PSYCOPG],
            f"import importlib.metadata as m, psycopg; "
            f"assert m.version('ctrlrun') == '{REF_VERSION}'")
        ref_info = run_worker(bench.ref_py, REF_WORKER, {"mode": "info"})
        log(f"original product: ctrlrun {ref_info['version']} in {REF_VENV}")
        bench.meta["original"] = ref_info
    pg_wanted = "postgres" in backends or "pgbouncer" in backends
    if pg_wanted:
        bench.floor_py = ensure_venv(FLOOR_VENV, [PSYCOPG], "import psycopg")

    os.makedirs(args.workdir, exist_ok=True)
    bench.workdir = tempfile.mkdtemp(prefix="run-", dir=args.workdir)
    cluster = None
    bouncer = None
    syscalls: Dict[str, Dict[str, float]] = {}
    try:
        sqlite_info = run_worker(sys.executable, FLOOR_WORKER, {"mode": "sqlite_info"})
        bench.meta["sqlite_floor"] = sqlite_info
        bench.meta["workdir_fs"] = fs_of(os.path.realpath(bench.workdir))
        if "sqlite" in backends:
            bench.plan_sqlite()
            log(f"SQLite: files under {bench.workdir} ({bench.meta['workdir_fs']}); floor uses "
                f"the stdlib sqlite3 ({sqlite_info['sqlite_version']})")
            bench.execute("sqlite")
            log("SQLite: counting fsyncs per call with strace (separate, untimed pass)")
            syscalls = bench.sqlite_syscalls()
        if pg_wanted:
            url = os.environ.get("CTRLRUN_BENCH_POSTGRES_URL")
            if url:
                bench.pg_url = url
                bench.meta["postgres_server"] = "CTRLRUN_BENCH_POSTGRES_URL"
            else:
                cluster = load_test_helper("pgserver").start_cluster()
                bench.pg_url = cluster.url()
                bench.meta["postgres_server"] = f"throwaway cluster in {cluster.datadir}"
            pg_info = run_worker(bench.floor_py, FLOOR_WORKER, {"mode": "pg_info",
                                                                 "pg_url": bench.pg_url})
            bench.meta["postgres"] = pg_info
            bench.meta["postgres_fs"] = (fs_of(cluster.datadir) if cluster else "?")
            log(f"PostgreSQL {pg_info['server_version']}: synchronous_commit="
                f"{pg_info['synchronous_commit']}, fsync={pg_info['fsync']}, "
                f"wal_sync_method={pg_info['wal_sync_method']}; psycopg {pg_info['psycopg']} "
                f"({pg_info['psycopg_impl']})")
            if "postgres" in backends:
                bench.plan_postgres()
                bench.execute("postgres")
            if "pgbouncer" in backends:
                bouncer = start_bouncer(bench.pg_url)
                bench.bouncer_url = bouncer.url(db=urlsplit(bench.pg_url).path.lstrip("/"))
                log(f"PgBouncer (transaction mode) on port {bouncer.port}, in front of the same "
                    f"server")
                bench.plan_postgres("pgbouncer")
                bench.execute("pgbouncer")
    finally:
        if bouncer is not None:
            bouncer.stop()
        if bench.pg_schemas and bench.pg_url:
            try:
                run_worker(bench.floor_py, FLOOR_WORKER, {"mode": "pg_drop",
                                                          "pg_url": bench.pg_url,
                                                          "schemas": bench.pg_schemas})
            except Exception as exc:  # the cluster may be gone; a user's server is told
                log(f"could not drop the bench schemas: {exc}")
        if cluster is not None:
            cluster.stop()
        shutil.rmtree(bench.workdir, ignore_errors=True)

    text, summary, all_once = _report.report(bench, syscalls, CONTENTION_KEYS)
    loads = sorted(r["loadavg_1m_before"] for s in bench.specs for r in s.results
                   if r.get("loadavg_1m_before") is not None)
    load_line = ""
    if loads:
        load_line = (f"Load average (1 min) before each run: min {loads[0]:.2f}, median "
                     f"{statistics.median(loads):.2f}, max {loads[-1]:.2f} on {os.cpu_count()} "
                     f"CPUs" + ("; other work on the machine makes the rows noisy, the fsync-bound "
                                "ones most" if loads[-1] > 1.0 else ""))
        bench.meta["loadavg_1m"] = {"min": loads[0], "median": statistics.median(loads),
                                    "max": loads[-1]}
    header = [build_line, *warnings, *([load_line] if load_line else []),
              f"Machine: {platform.platform()}, {os.cpu_count()} CPUs visible; "
              f"SQLite files on {bench.meta.get('workdir_fs', '?')}"
              + (f"; PostgreSQL {bench.meta['postgres']['server_version']} "
                 f"(synchronous_commit={bench.meta['postgres']['synchronous_commit']}, "
                 f"fsync={bench.meta['postgres']['fsync']}), data on "
                 f"{bench.meta.get('postgres_fs', '?')}" if "postgres" in bench.meta else ""),
              "p50/p99: per-call latency (time.perf_counter_ns around each call). calls/s "
              "(1/p50) = 1e6 / p50 us; calls/s (N/wall) = calls / wall time of the timed loop."]
    print("\n".join(header) + "\n" + text)

    results = {
        "started": started.isoformat(),
        "command": " ".join([os.path.relpath(sys.argv[0], ROOT), *sys.argv[1:]]),
        "quick": args.quick,
        "repeats": args.repeats,
        "calls_per_run": {"sqlite": bench.n_sqlite, "postgres": bench.n_pg},
        "ctrlrun": info,
        "git": git_state(),
        "warnings": warnings,
        "machine": {"platform": platform.platform(), "cpus": os.cpu_count()},
        "meta": bench.meta,
        "rows": [{"backend": s.backend, "id": s.id, "who": s.who, "label": s.label,
                  "durability": s.durability, "kind": s.kind, "median": s.median(),
                  "runs": s.results,
                  "syscalls": syscalls.get(s.id) if s.backend == "sqlite" else None}
                 for s in bench.specs],
        "targets": summary["targets"],
        "every_key_exactly_once": all_once,
        "table": text,
    }
    with open(args.json, "w") as f:
        json.dump(results, f, indent=2)
    log(f"wrote {os.path.relpath(args.json, os.getcwd())}")
    return 0 if all_once else 1


if __name__ == "__main__":
    sys.exit(main())
