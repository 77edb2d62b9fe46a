"""The worker threads of ``async def`` protected calls' store calls besides the reservation
and the outcome (python/ctrlrun/call/io_threads.py; those two: test_io_core.py): one pipe per event
loop, closed with the loop; at most 16 threads however many jobs are in flight; and the plain
executor on a loop that cannot watch a pipe. Real SQLite stores."""

from __future__ import annotations

import asyncio
import gc
import os
import subprocess
import sys
import threading
import time

import pytest

import ctrlrun
from ctrlrun.call import io_threads as _io_threads


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_a_loop_per_call_leaks_no_pipe(tmp_path):
    store = ctrlrun.open_store(f"sqlite:///{tmp_path}/s.db")

    @ctrlrun.protect("t", effect="t:{k}", store=store)
    async def act(k):
        return k

    asyncio.run(act("warm"))
    gc.collect()
    before = _fds()
    for i in range(100):  # asyncio.run makes a new loop each time
        assert asyncio.run(act(f"k{i}")) == f"k{i}"
    gc.collect()
    assert _fds() - before <= 2, (before, _fds())
    assert len(store.list_effects("committed")) == 101
    store.close()


def test_many_jobs_in_flight_share_at_most_16_threads():
    async def main():
        return await asyncio.gather(*(_io_threads.run(time.sleep, 0.01) for _ in range(200)))

    assert asyncio.run(main()) == [None] * 200
    workers = [t for t in threading.enumerate() if t.name.startswith("ctrlrun-io-")]
    assert 1 <= len(workers) <= _io_threads.MAX_WORKERS


class NoPipeLoop(asyncio.SelectorEventLoop):
    """A loop that, like Windows' proactor loop, cannot watch a file descriptor."""

    def add_reader(self, *args, **kwargs):
        raise NotImplementedError


def test_a_loop_that_cannot_watch_a_pipe_uses_the_plain_executor(tmp_path):
    store = ctrlrun.open_store(f"sqlite:///{tmp_path}/s.db")
    ran = []

    @ctrlrun.protect("t", effect="t:{k}", store=store)
    async def act(k):
        ran.append(k)
        return k

    loop = NoPipeLoop()
    try:
        assert loop.run_until_complete(act("a")) == "a"
        assert loop.run_until_complete(act("b")) == "b"
        with pytest.raises(ctrlrun.DuplicateEffect):
            loop.run_until_complete(act("a"))
    finally:
        loop.close()
    assert ran == ["a", "b"]
    assert store.get_effect("t:a").state is ctrlrun.EffectState.COMMITTED
    store.close()


def test_a_job_that_ends_after_its_loop_closed_keeps_nothing_alive():
    async def abandon():
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(_io_threads.run(time.sleep, 0.3), 0.02)

    asyncio.run(abandon())  # a first loop: the worker thread exists from here on
    time.sleep(0.4)
    gc.collect()
    before = _fds()
    for _ in range(10):
        asyncio.run(abandon())
    time.sleep(0.5)  # every job has ended, after its loop closed
    asyncio.run(asyncio.sleep(0))  # a new loop lets the closed ones go
    gc.collect()
    assert _fds() - before <= 2, (before, _fds())


EXIT = """
import asyncio, sys, time
from ctrlrun.call import io_threads as _io_threads
def slow_write(path):
    time.sleep(0.5)
    with open(path, "w") as f:
        f.write("written")

async def main():
    _io_threads.run(slow_write, sys.argv[1])  # not awaited: the program ends first

asyncio.run(main())
"""


def test_at_exit_the_jobs_in_flight_are_finished(tmp_path):
    out = tmp_path / "out.txt"
    done = subprocess.run(
        [sys.executable, "-c", EXIT, str(out)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert out.read_text() == "written"
