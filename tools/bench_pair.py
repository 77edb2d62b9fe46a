"""Two builds of ctrlrun paired in-process: the per-call time of a new key and of a duplicate,
each build in its own process, alternated, so that a noisy minute hits both alike. A check
beside ``python -m bench.compare`` (whose PostgreSQL floors drift run to run on a small VM);
it prints numbers and asserts nothing.

    python3 -m throwaway.pgserver -- .venv/bin/python tools/bench_pair.py \\
        --a /tmp/old/python --b /tmp/new/python --backend postgres [--url-extra '&prepared_statements=on']

``--a``/``--b``: folders to put first on ``PYTHONPATH`` (each holds a ``ctrlrun`` package with a
release-built ``_core.abi3.so``). PostgreSQL comes from ``CTRLRUN_TEST_POSTGRES_URL``."""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid


def measure(backend: str, extra: str, news: int, dups: int) -> str:
    import ctrlrun

    if backend == "sqlite":
        url = f"sqlite:///{tempfile.mkdtemp()}/pair.db?synchronous=normal"
    else:
        base = os.environ["CTRLRUN_TEST_POSTGRES_URL"]
        sep = "&" if "?" in base else "?"
        url = f"{base}{sep}schema=pair_{uuid.uuid4().hex[:12]}{extra}"
    store = ctrlrun.open_store(url)

    @ctrlrun.protect("pair", effect="k:{k}", store=store)
    def f(k: str) -> int:
        return 1

    def dup() -> None:
        try:
            f("x")
        except ctrlrun.DuplicateEffect:
            pass

    f("x")
    for i in range(100):  # warm-up: connections, statements, caches
        f(f"w{i}")
        dup()

    def loops(body, n: int) -> str:
        per = []
        for r in range(5):
            t = time.perf_counter_ns()
            body(r, n)
            per.append((time.perf_counter_ns() - t) / n / 1000)
        return f"{min(per):.1f}/{statistics.median(per):.1f} us"

    new = loops(lambda r, n: [f(f"n{r}-{i}") for i in range(n)], news)
    again = loops(lambda r, n: [dup() for _ in range(n)], dups)
    return f"new key {new}  duplicate {again}  (best/median of 5 loops)"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--a", required=True)
    p.add_argument("--b", required=True)
    p.add_argument("--backend", choices=("sqlite", "postgres"), default="sqlite")
    p.add_argument("--url-extra", default="")
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    news, dups = (500, 2000) if args.backend == "sqlite" else (300, 600)
    if args.worker:
        print(measure(args.backend, args.url_extra, news, dups))
        return 0
    for _ in range(args.rounds):
        for name, path in (("A", args.a), ("B", args.b)):
            env = dict(os.environ, PYTHONPATH=path)
            argv = [sys.executable, __file__, *sys.argv[1:], "--worker"]
            done = subprocess.run(argv, env=env, capture_output=True, text=True)
            print(f"{name}: {done.stdout.strip() or done.stderr.strip()[-300:]}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
