"""Where an awaited protected call's client CPU goes, beside a sync one, on the store a URL
names (issue 34, item 3): N fresh calls each way, the process's CPU per call; then the same
sync calls made from a task of a running loop (blocking it: the bound a loop that waits on the
socket itself, item 3(b), could reach, less the loop's own readiness callbacks); the turns of
the loop per awaited call (each future chained on another costs one); and with
``--perf`` a ``perf record`` of the async run (``perf report -i bench/.work/async.perf``).

    python3 tests_py/support/pgserver.py -- python -m bench.async_cpu_profile [--calls N] [--perf]

Without ``--url`` it uses ``CTRLRUN_TEST_POSTGRES_URL`` with a scratch schema.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any, Optional, Tuple

import ctrlrun

WORK = Path(__file__).resolve().parent / ".work"


def cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=3000)
    ap.add_argument("--url", default=None)
    ap.add_argument("--perf", action="store_true")
    args = ap.parse_args()
    url = args.url or (
        os.environ["CTRLRUN_TEST_POSTGRES_URL"]
        + f"?schema=ctrlrun_scratch_acpu_{uuid.uuid4().hex[:8]}"
    )
    store = ctrlrun.open_store(url)
    tag = uuid.uuid4().hex[:8]

    @ctrlrun.protect("bench.cpu", effect="cpu:{key}", store=store)
    def sync_call(key: str) -> int:
        return 1

    @ctrlrun.protect("bench.cpu", effect="cpu:{key}", store=store)
    async def async_call(key: str) -> int:
        return 1

    for i in range(50):
        sync_call(f"{tag}-warm-{i}")
    c0, t0 = cpu(), time.perf_counter()
    for i in range(args.calls):
        sync_call(f"{tag}-s-{i}")
    sync_cpu, sync_wall = cpu() - c0, time.perf_counter() - t0

    async def run() -> tuple:
        for i in range(50):
            await async_call(f"{tag}-awarm-{i}")
        perf = None
        if args.perf:
            WORK.mkdir(exist_ok=True)
            perf = subprocess.Popen(
                [
                    "perf",
                    "record",
                    "-q",
                    "-g",
                    "-F",
                    "4000",
                    "-p",
                    str(os.getpid()),
                    "-o",
                    str(WORK / "async.perf"),
                ]
            )
            await asyncio.sleep(0.5)
        c0, t0 = cpu(), time.perf_counter()
        for i in range(args.calls):
            await async_call(f"{tag}-a-{i}")
        spent = (cpu() - c0, time.perf_counter() - t0)
        if perf is not None:
            perf.send_signal(2)
            perf.wait()
        return spent

    async_cpu, async_wall = asyncio.run(run())

    async def on_the_loop() -> tuple:
        # The lower bound of item 3(b) (the loop waits on the socket itself): each step's wait
        # is one wake-up of the loop's thread, as it is here, where the coroutine makes the
        # sync call and so blocks the loop on the socket. Never how ctrlrun runs (the loop must
        # not block); a measurement of what the hops to and from a core thread cost.
        async def step(key: str) -> int:
            return sync_call(key)

        c0, t0 = cpu(), time.perf_counter()
        for i in range(args.calls):
            await asyncio.ensure_future(step(f"{tag}-b-{i}"))
        return cpu() - c0, time.perf_counter() - t0

    loop_cpu, loop_wall = asyncio.run(on_the_loop())

    async def turns() -> Tuple[float, float]:
        # Turns of the loop per awaited call, and how many of them waited (a select with a
        # timeout): the others are callbacks chained on futures, each a turn of its own.
        loop = asyncio.get_running_loop()
        counted = [0, 0]
        run_once, select = loop._run_once, loop._selector.select  # type: ignore[attr-defined]

        def once() -> None:
            counted[0] += 1
            run_once()

        def waited(timeout: Optional[float] = None) -> Any:
            if timeout is None or timeout > 0:
                counted[1] += 1
            return select(timeout)

        loop._run_once = once  # type: ignore[attr-defined]
        loop._selector.select = waited  # type: ignore[attr-defined]
        n = min(args.calls, 500)
        for i in range(n):
            await async_call(f"{tag}-t-{i}")
        return counted[0] / n, counted[1] / n

    loop_turns, waits = asyncio.run(turns())
    store.close()
    n = args.calls
    print(f"sync:  {sync_cpu / n * 1e6:7.1f} µs CPU/call, {sync_wall / n * 1e6:7.1f} µs wall/call")
    print(
        f"async: {async_cpu / n * 1e6:7.1f} µs CPU/call, {async_wall / n * 1e6:7.1f} µs wall/call"
    )
    print(f"async/sync CPU {async_cpu / sync_cpu:.2f}x, wall {async_wall / sync_wall:.2f}x")
    print(
        f"the same calls blocking the loop (the hop-free bound, not a product path): "
        f"{loop_cpu / n * 1e6:7.1f} µs CPU/call ({loop_cpu / sync_cpu:.2f}x sync), "
        f"{loop_wall / n * 1e6:7.1f} µs wall/call"
    )
    print(f"turns of the loop per awaited call: {loop_turns:.1f}, of which waiting {waits:.1f}")


if __name__ == "__main__":
    main()
