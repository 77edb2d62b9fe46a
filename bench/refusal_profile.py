"""The duplicate path alone, for profiling a build: a committed key proposed again N times
through ``protect`` (caught), and through the Store API; prints µs per refusal (best of 5).

    python bench/refusal_profile.py [N]
"""

import os
import sys
import tempfile
import timeit

import ctrlrun


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 20000
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

    for name, fn in (("protect", protected), ("Store.reserve_effect", api)):
        best = min(timeit.repeat(fn, number=n, repeat=5)) / n * 1e6
        print(f"{name}: {best:.2f} us per refusal")


if __name__ == "__main__":
    main()
