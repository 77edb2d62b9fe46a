"""The duplicate path alone, for profiling a build: a committed key proposed again N times
through ``protect`` (caught), and through the Store API; prints µs per refusal (best of 5).
With ``--profile``, then the Python functions the ``protect`` refusals spent most time in
(``cProfile``, by own time: where the time above the Store API's goes). With ``--api``, only
the Store API loop (to run under ``perf record``: where the store's own refusal goes). The last
rows are the core's ``reserve`` called with what ``protect`` passes it (the least any decorator,
even one written in Rust, adds a refusal to); the least a decorator written in Python adds to
that (a wrapper that takes the call's arguments, formats the key with an f-string and calls the
core, whose refusal it lets through); and the floor, one indexed read of the same row through
the stdlib's ``sqlite3`` on the same file.

    python -m bench.refusal_profile [N] [--profile] [--api]
"""

import cProfile
import os
import pstats
import sqlite3
import sys
import tempfile
import timeit

import ctrlrun


def main() -> None:
    numbers = [a for a in sys.argv[1:] if not a.startswith("--")]
    n = int(numbers[0]) if numbers else 20000
    folder = tempfile.mkdtemp()
    store = ctrlrun.open_store("sqlite:///" + os.path.join(folder, "s.db"))

    @ctrlrun.protect("bench.dup", effect="dup:{k}", store=store)
    def f(k: str) -> int:
        return 1

    keys = [f"k{i}" for i in range(2000)]
    for k in keys:
        f(k)
    n = n - n % len(keys)
    cycle = iter([])

    def protected() -> None:  # each key in turn, as the benchmark's duplicate row does
        nonlocal cycle
        k = next(cycle, None)
        if k is None:
            cycle = iter(keys)
            k = next(cycle)
        try:
            f(k)
        except ctrlrun.DuplicateEffect:
            pass

    def api() -> None:
        try:
            store.reserve_effect("dup:k0", "act_" + "1" * 32, 60)
        except ctrlrun.DuplicateEffect:
            pass

    core, aid, parts = store._core, "act_" + "1" * 32, [("k", '"k0"')]

    def core_alone() -> None:  # what protect hands the core, with no Python around it
        try:
            core.reserve("dup:k0", aid, 60_000_000, None, True, "bench.dup", parts, False)
        except ctrlrun.DuplicateEffect:
            pass

    def least_python(k: str) -> None:  # a decorator's wrapper with nothing but the key in it
        core.reserve(f"dup:{k}", aid, 60_000_000, None, True, "bench.dup", parts, False)

    def python_alone() -> None:
        try:
            least_python("k0")
        except ctrlrun.DuplicateEffect:
            pass

    reader = sqlite3.connect(os.path.join(folder, "s.db"), isolation_level=None)
    select = "SELECT * FROM ctrlrun_effects WHERE effect_key = ?"

    def read() -> None:  # the floor: one indexed read of the row
        assert len(reader.execute(select, ("dup:k0",)).fetchall()) == 1

    loops = (
        ("protect", protected),
        ("Store.reserve_effect", api),
        ("_core.Store.reserve alone", core_alone),
        ("the least Python wrapper around it", python_alone),
        ("floor: one indexed read (stdlib sqlite3)", read),
    )
    for name, fn in loops[1:2] if "--api" in sys.argv[1:] else loops:
        best = min(timeit.repeat(fn, number=n, repeat=5)) / n * 1e6
        print(f"{name}: {best:.2f} us per refusal")
    if "--profile" in sys.argv[1:]:
        profile = cProfile.Profile()
        profile.runcall(timeit.repeat, protected, number=n, repeat=1)
        pstats.Stats(profile).sort_stats("tottime").print_stats(20)


if __name__ == "__main__":
    main()
