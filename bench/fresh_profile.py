"""A fresh protected call alone, for profiling a build on SQLite (issue 34, item 1): N calls on
new keys through ``protect``; the same two core calls that ``protect`` makes (the reservation
straight into ``executing`` and the outcome, with the same arguments) made directly, with no
Python around them; and the Store API (reserve, begin, commit: three writes). µs per call,
the best of 3 runs of the median call (p50, as ``bench.run`` reports: a call that ran the
log's checkpoint is in the tail). ``protect`` less ``core`` is the Python of the decorator.
``--perf`` wraps the ``protect`` loop in ``perf record`` (``perf report -i
bench/.work/fresh.perf``); ``--profile`` prints the Python functions with most own time;
``--page-size`` makes the store file with that SQLite page size before ctrlrun writes its
schema (a design tried for item 1: fewer bytes in each WAL frame).

    python -m bench.fresh_profile [--calls N] [--synchronous NORMAL|FULL] [--page-size B]
                                  [--perf] [--profile]
"""

from __future__ import annotations

import argparse
import cProfile
import itertools
import os
import pstats
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

import ctrlrun
from ctrlrun import _core
from ctrlrun.call.steps import OUTCOME_PAUSES

WORK = Path(__file__).resolve().parent / ".work"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=20000)
    ap.add_argument("--synchronous", default="NORMAL", choices=("NORMAL", "FULL"))
    ap.add_argument("--page-size", type=int, default=None)
    ap.add_argument("--perf", action="store_true")
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--only", choices=("protect", "core", "api"), default=None)
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
    path = os.path.join(folder, "s.db")
    if a.page_size:
        made = sqlite3.connect(path)
        made.execute(f"PRAGMA page_size = {int(a.page_size)}")
        made.execute("PRAGMA journal_mode = WAL")
        made.execute("CREATE TABLE scratch (x)")  # the page size holds once a table is written
        made.execute("DROP TABLE scratch")
        made.close()
    url = "sqlite:///" + path + f"?synchronous={a.synchronous.lower()}"
    store = ctrlrun.open_store(url)
    if a.page_size:
        size = sqlite3.connect(path).execute("PRAGMA page_size").fetchone()[0]
        print(f"page size {size}")
    counter = itertools.count()

    @ctrlrun.protect("bench.fresh", effect="fresh:{k}", store=store)
    def f(k: str) -> int:
        return 1

    clock = time.perf_counter_ns

    def timed(prefix: str, one: Callable[[str], object]) -> Callable[[int], float]:
        """A loop of ``n`` calls of ``one`` on new keys: the p50 in µs."""

        def loop(n: int) -> float:
            took = []
            for _ in range(n):
                k = f"{prefix}{next(counter)}"
                t = clock()
                one(k)
                took.append(clock() - t)
            return statistics.median(took) / 1000

        return loop

    def api_call(k: str) -> None:
        aid = "act_" + os.urandom(16).hex()
        store.reserve_effect(k, aid, 300)
        store.begin_execution(k, aid)
        store.commit_effect(k, aid, 1)

    core, pauses = store._core, list(OUTCOME_PAUSES)

    def core_calls(k: str) -> None:
        aid = "act_" + os.urandom(16).hex()
        parts = [("k", '"' + k + '"')]
        key = "fresh:" + k
        got = core.reserve(key, aid, 300_000_000, None, True, "bench.fresh", parts, False)
        core.record_outcome(pauses, key, aid, got.attempt, _core.Step.COMMIT, "1", None)

    protected, api, direct = timed("k", f), timed("a", api_call), timed("c", core_calls)
    protected(500)
    for name, loop, what in (
        ("protect", protected, "protect"),
        ("core", direct, "the two core calls alone"),
        ("api", api, "Store API (3 writes)"),
    ):
        if a.only in (None, name):
            print(f"{what}: {min(loop(a.calls) for _ in range(3)):.2f} us per fresh call (p50)")
    if a.profile:
        prof = cProfile.Profile()
        prof.runcall(protected, a.calls)
        pstats.Stats(prof).sort_stats("tottime").print_stats(20)


if __name__ == "__main__":
    main()
