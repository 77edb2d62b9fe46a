#!/usr/bin/env python3
"""ctrlrun's benchmark: protected calls against the original product and the engine floors.

    python -m bench.run [--quick] [--backends sqlite,postgres] [--no-reference]

Measures the ctrlrun the running interpreter imports and says which build that is; each
measurement in its own subprocess on a fresh store, ``--repeats`` times, the median run shown.
Writes bench/results.json (bench/README.md). Not a test: its exit status is 1 only if a
contention run executed some key twice (or never).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
from typing import Any, Dict, List
from urllib.parse import unquote, urlsplit

from bench import _report
from bench.plan import Bench
from bench.workers import (
    BENCH,
    CONTENTION_KEYS,
    CONTENTION_PROCS,
    CTRLRUN_WORKER,
    FLOOR_VENV,
    FLOOR_WORKER,
    PSYCOPG,
    REF_VENV,
    REF_VERSION,
    REF_WORKER,
    ROOT,
    ensure_venv,
    log,
    run_worker,
)
from throwaway.pgbouncer import PgBouncer
from throwaway.pgserver import start_cluster


def fs_of(path: str) -> str:
    """The type of the file system ``path`` is on (the longest mount point above it)."""
    best, fstype = "", "?"
    try:
        with open("/proc/mounts") as f:
            for parts in (line.split() for line in f):
                mnt = parts[1]
                if (path == mnt or path.startswith(mnt.rstrip("/") + "/")) and len(mnt) > len(best):
                    best, fstype = mnt, parts[2]
    except OSError:
        pass
    return fstype


def git_state() -> Dict[str, Any]:
    git = ["git", "-C", ROOT]
    try:
        out = lambda *a: subprocess.run([*git, *a], capture_output=True, text=True).stdout  # noqa: E731
        head, dirty = out("rev-parse", "HEAD"), out("status", "--porcelain", "--", "src", "python")
        return {"commit": head.strip(), "src_or_python_dirty": bool(dirty.strip())}
    except OSError:
        return {}


def start_bouncer(pg_url: str) -> Any:
    """A throwaway PgBouncer in transaction mode in front of ``pg_url``'s server, with a
    server pool large enough for the contention rows' 8 processes."""
    u = urlsplit(pg_url)
    host, port, user = u.hostname or "127.0.0.1", u.port or 5432, unquote(u.username or "postgres")
    password = unquote(u.password) if u.password else None
    return PgBouncer(host, port, user, password, "transaction", pool_size=CONTENTION_PROCS)


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    for flag, text in [
        ("--quick", "10x fewer calls per run"),
        ("--no-reference", "skip the original product (no bench/.ref-venv needed)"),
        ("--no-syscalls", "skip the strace pass that counts fsyncs per call (SQLite)"),
    ]:
        ap.add_argument(flag, action="store_true", help=text)
    every = "sqlite,postgres,pgbouncer"
    text = "of sqlite, postgres, pgbouncer (PostgreSQL through PgBouncer in transaction mode)"
    ap.add_argument("--backends", default=every, help=f"{text}; default all")
    ap.add_argument("--repeats", type=int, default=3, help="runs per measurement (default 3)")
    work, results = os.path.join(BENCH, ".work"), os.path.join(BENCH, "results.json")
    ap.add_argument("--workdir", default=work, help="where the SQLite files go (a real disk)")
    text = "where to write the results (default bench/results.json)"
    ap.add_argument("--json", default=results, help=text)
    args = ap.parse_args()
    args.backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    for b in args.backends:
        if b not in ("sqlite", "postgres", "pgbouncer"):
            ap.error(f"unknown backend {b!r}")
    return args


def measure(bench: Bench, backends: List[str]) -> Dict[str, Dict[str, float]]:
    """Every row of ``backends``, on throwaway servers; the fsyncs per call (SQLite)."""
    cluster = bouncer = None
    syscalls: Dict[str, Dict[str, float]] = {}
    try:
        sqlite_info = run_worker(sys.executable, FLOOR_WORKER, {"mode": "sqlite_info"})
        bench.meta["sqlite_floor"] = sqlite_info
        bench.meta["workdir_fs"] = fs_of(os.path.realpath(bench.workdir))
        if "sqlite" in backends:
            bench.plan_sqlite()
            log(
                f"SQLite: files under {bench.workdir} ({bench.meta['workdir_fs']}); floor uses "
                f"the stdlib sqlite3 ({sqlite_info['sqlite_version']})"
            )
            bench.execute("sqlite")
            log("SQLite: counting fsyncs per call with strace (separate, untimed pass)")
            syscalls = bench.sqlite_syscalls()
        if "postgres" in backends or "pgbouncer" in backends:
            bench.pg_url = os.environ.get("CTRLRUN_BENCH_POSTGRES_URL", "")
            bench.meta["postgres_server"] = "CTRLRUN_BENCH_POSTGRES_URL"
            if not bench.pg_url:
                cluster = start_cluster()
                bench.pg_url = cluster.url()
                bench.meta["postgres_server"] = f"throwaway cluster in {cluster.datadir}"
            info = run_worker(
                bench.floor_py, FLOOR_WORKER, {"mode": "pg_info", "pg_url": bench.pg_url}
            )
            bench.meta["postgres"] = info
            bench.meta["postgres_fs"] = fs_of(cluster.datadir) if cluster else "?"
            log(
                f"PostgreSQL {info['server_version']}: synchronous_commit={info['synchronous_commit']}, "
                f"fsync={info['fsync']}, wal_sync_method={info['wal_sync_method']}; psycopg "
                f"{info['psycopg']} ({info['psycopg_impl']})"
            )
            if "postgres" in backends:
                bench.plan_postgres()
                bench.execute("postgres")
            if "pgbouncer" in backends:
                bouncer = start_bouncer(bench.pg_url)
                bench.bouncer_url = bouncer.url(db=urlsplit(bench.pg_url).path.lstrip("/"))
                log(
                    f"PgBouncer (transaction mode) on port {bouncer.port}, in front of the same server"
                )
                bench.plan_postgres("pgbouncer")
                bench.execute("pgbouncer")
    finally:
        if bouncer is not None:
            bouncer.stop()
        if bench.pg_schemas and bench.pg_url:
            drop = {"mode": "pg_drop", "pg_url": bench.pg_url, "schemas": bench.pg_schemas}
            try:
                run_worker(bench.floor_py, FLOOR_WORKER, drop)
            except Exception as exc:  # the cluster may be gone; a user's server is told
                log(f"could not drop the bench schemas: {exc}")
        if cluster is not None:
            cluster.stop()
        shutil.rmtree(bench.workdir, ignore_errors=True)
    return syscalls


def main() -> int:
    args = parse_args()
    bench = Bench(args)
    started = _dt.datetime.now(_dt.timezone.utc)
    info = run_worker(sys.executable, CTRLRUN_WORKER, {"mode": "info"})
    build_line = (
        f"Measuring ctrlrun {info['version']} ({info['build']} build) from {info['extension']} "
        f"({info['extension_bytes'] / 1e6:.1f} MB), Python {info['python']}"
    )
    log(build_line)
    warnings: List[str] = []
    if info["build"] != "release":
        warnings.append(
            f"WARNING: the extension is a {info['build']} build: these numbers do not measure the "
            f"product. Build it with `maturin develop --release` (`make bench` does)."
        )
    if info["stale"]:
        warnings.append(
            "WARNING: src/ has .rs files newer than the extension: the build is stale (rebuild "
            "with `maturin develop --release`)."
        )
    for w in warnings:
        log(w)
    if args.no_reference:
        log("the original product: skipped (--no-reference)")
    else:
        check = f"import importlib.metadata as m, psycopg; assert m.version('ctrlrun') == '{REF_VERSION}'"
        bench.ref_py = ensure_venv(REF_VENV, [f"ctrlrun=={REF_VERSION}", PSYCOPG], check)
        bench.meta["original"] = run_worker(bench.ref_py, REF_WORKER, {"mode": "info"})
        log(f"original product: ctrlrun {bench.meta['original']['version']} in {REF_VENV}")
    if "postgres" in args.backends or "pgbouncer" in args.backends:
        bench.floor_py = ensure_venv(FLOOR_VENV, [PSYCOPG], "import psycopg")
    os.makedirs(args.workdir, exist_ok=True)
    bench.workdir = tempfile.mkdtemp(prefix="run-", dir=args.workdir)
    syscalls = measure(bench, args.backends)

    text, summary, all_once = _report.report(bench, syscalls, CONTENTION_KEYS)
    got = (r.get("loadavg_1m_before") for s in bench.specs for r in s.results)
    loads = sorted(x for x in got if x is not None)
    header = [build_line, *warnings]
    if loads:
        median = statistics.median(loads)
        noisy = "; other work on the machine makes the rows noisy, the fsync-bound ones most"
        header.append(
            f"Load average (1 min) before each run: min {loads[0]:.2f}, median {median:.2f}, max "
            f"{loads[-1]:.2f} on {os.cpu_count()} CPUs{noisy if loads[-1] > 1.0 else ''}"
        )
        bench.meta["loadavg_1m"] = {"min": loads[0], "median": median, "max": loads[-1]}
    pg, meta = bench.meta.get("postgres"), bench.meta
    where = f"SQLite files on {meta.get('workdir_fs', '?')}"
    if pg:
        where += (
            f"; PostgreSQL {pg['server_version']} (synchronous_commit={pg['synchronous_commit']}, "
            f"fsync={pg['fsync']}), data on {meta.get('postgres_fs', '?')}"
        )
    header.append(f"Machine: {platform.platform()}, {os.cpu_count()} CPUs visible; {where}")
    header.append(
        "p50/p99: per-call latency (time.perf_counter_ns around each call). calls/s (1/p50) = "
        "1e6 / p50 us; calls/s (N/wall) = calls / wall time of the timed loop."
    )
    print("\n".join(header) + "\n" + text)

    names = ("backend", "id", "who", "label", "durability", "kind")
    rows = [
        {**{k: getattr(s, k) for k in names}, "median": s.median(), "runs": s.results}
        | {"syscalls": syscalls.get(s.id) if s.backend == "sqlite" else None}
        for s in bench.specs
    ]
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
        "rows": rows,
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
