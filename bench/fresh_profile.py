"""A fresh protected call alone, for profiling a build on SQLite (issue 34, item 1): N calls on
new keys through ``protect`` and through the Store API (reserve, begin, commit), µs per call
(best of 3). ``--perf`` wraps the ``protect`` loop in ``perf record`` (``perf report -i
bench/.work/fresh.perf``); ``--profile`` prints the Python functions with most own time.

    python -m bench.fresh_profile [--calls N] [--synchronous NORMAL|FULL] [--perf] [--profile]
"""

from __future__ import annotations

import argparse
import cProfile
import itertools
import os
import pstats
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import ctrlrun

WORK = Path(__file__).resolve().parent / ".work"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=20000)
    ap.add_argument("--synchronous", default="NORMAL", choices=("NORMAL", "FULL"))
    ap.add_argument("--perf", action="store_true")
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--only", choices=("protect", "api"), default=None)
    a = ap.parse_args()
    if a.perf:
        WORK.mkdir(exist_ok=True)
        out = WORK / "fresh.perf"
        cmd = [sys.executable, "-m", "bench.fresh_profile", "--calls", str(a.calls)]
        cmd += ["--synchronous", a.synchronous, "--only", "protect"]
        subprocess.run(["perf", "record", "-F", "4999", "-g", "-o", str(out), *cmd], check=True)
        print(f"perf report -i {out} --no-children --sort dso,sym")
        return
    folder = tempfile.mkdtemp(dir=WORK if WORK.exists() else None)
    url = "sqlite:///" + os.path.join(folder, "s.db") + f"?synchronous={a.synchronous.lower()}"
    store = ctrlrun.open_store(url)
    counter = itertools.count()

    @ctrlrun.protect("bench.fresh", effect="fresh:{k}", store=store)
    def f(k: str) -> int:
        return 1

    def protected(n: int) -> float:
        t = time.perf_counter()
        for _ in range(n):
            f(f"k{next(counter)}")
        return (time.perf_counter() - t) / n * 1e6

    def api(n: int) -> float:
        t = time.perf_counter()
        for _ in range(n):
            k = f"a{next(counter)}"
            aid = "act_" + os.urandom(16).hex()
            store.reserve_effect(k, aid, 300)
            store.begin_execution(k, aid)
            store.commit_effect(k, aid, 1)
        return (time.perf_counter() - t) / n * 1e6

    protected(500)
    if a.only != "api":
        print(f"protect: {min(protected(a.calls) for _ in range(3)):.2f} us per fresh call")
    if a.only != "protect":
        print(f"Store API: {min(api(a.calls) for _ in range(3)):.2f} us per fresh call")
    if a.profile:
        prof = cProfile.Profile()
        prof.runcall(protected, a.calls)
        pstats.Stats(prof).sort_stats("tottime").print_stats(20)


if __name__ == "__main__":
    main()
