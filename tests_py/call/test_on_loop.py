"""The reservation and the outcome write of ``async def`` protected calls done on the event
loop's own thread where nothing can make them wait (SQLite at ``synchronous=NORMAL``,
src/py/on_loop.rs, src/store/nowait.rs): taken for a free store, never at ``FULL``; a write
lock another process holds sends the step to a core thread at once, so the loop never stalls
for the lock; the log's checkpoint is made off the loop and the log stays bounded. Real
SQLite files, a real second process holding the lock."""

from __future__ import annotations

import asyncio
import os
import sqlite3
import time
from typing import Dict

import pytest

import ctrlrun
from ctrlrun import _core
from ctrlrun.call import io_core as _io_core
from tests_py.support.sqlite_lock import locked

pytestmark = pytest.mark.skipif(
    not hasattr(_core, "step_soon"), reason="the core runs background steps on POSIX systems only"
)


@pytest.fixture
def where(monkeypatch) -> Dict[str, int]:
    """How many steps were done on the loop's thread ("loop") and how many queued ("queued")."""
    counts = {"loop": 0, "queued": 0}
    start = _io_core._step_soon

    def counted(*args):
        done = start(*args)
        counts["loop" if done is not None else "queued"] += 1
        return done

    monkeypatch.setattr(_io_core, "_step_soon", counted)
    return counts


def _protected(store):
    @ctrlrun.protect("t", effect="t:{k}", store=store)
    async def act(k):
        return k

    return act


def test_at_normal_a_free_store_is_written_on_the_loops_thread(tmp_path, where):
    store = ctrlrun.open_store(f"sqlite:///{tmp_path}/s.db?synchronous=normal")
    act = _protected(store)

    async def main():
        return [await act(i) for i in range(20)]

    assert asyncio.run(main()) == list(range(20))
    # the first reservation opens the pool's first connection (opening a file can wait): on
    # a core thread; every other step is made on the loop's thread
    assert where == {"loop": 39, "queued": 1}
    with pytest.raises(ctrlrun.DuplicateEffect):  # a refusal made on the loop is the same refusal
        asyncio.run(act(3))
    assert all(store.get_effect(f"t:{i}").state is ctrlrun.EffectState.COMMITTED for i in range(20))
    store.close()


def test_at_full_every_step_goes_to_a_core_thread(tmp_path, where):
    """A commit at FULL syncs the log: a wait the loop's thread must never make."""
    store = ctrlrun.open_store(f"sqlite:///{tmp_path}/s.db")
    act = _protected(store)
    assert asyncio.run(act("a")) == "a"
    assert where == {"loop": 0, "queued": 2}
    store.close()


def test_a_lock_held_elsewhere_sends_the_step_to_a_thread_and_the_loop_never_stalls(
    tmp_path, where
):
    path = str(tmp_path / "s.db")
    store = ctrlrun.open_store(f"sqlite:///{path}?synchronous=normal")
    act = _protected(store)
    asyncio.run(act("warm"))  # the schema and a pooled connection exist
    holder = locked(path, 0.5)

    async def main():
        ticks = [time.monotonic()]

        async def ticker():
            while True:
                await asyncio.sleep(0.001)
                ticks.append(time.monotonic())

        tick = asyncio.ensure_future(ticker())
        await asyncio.sleep(0.01)
        out = await asyncio.gather(*(act(i) for i in range(20)))
        tick.cancel()
        return out, ticks

    out, ticks = asyncio.run(main())
    assert holder.wait(10) == 0
    assert out == list(range(20))
    assert ticks[-1] - ticks[0] >= 0.4  # the calls did wait for the lock ...
    gaps = [b - a for a, b in zip(ticks, ticks[1:])]
    # ... on core threads: a wait on the lock (busy_timeout, 5 s) would show here as a gap as
    # long as the lock was held; 50 ms leaves room for a loaded CI machine's scheduler
    assert max(gaps) < 0.05, f"the loop stalled for {max(gaps) * 1000:.1f} ms"
    assert where["queued"] >= 20  # every reservation met the lock and was queued
    assert all(store.get_effect(f"t:{i}").state is ctrlrun.EffectState.COMMITTED for i in range(20))
    store.close()


def test_the_log_is_checkpointed_off_the_loop_and_stays_bounded(tmp_path, where):
    """A commit made on the loop's thread that leaves the log due for its checkpoint sends the
    next step to a core thread, whose commit makes it; the log then restarts."""
    path = str(tmp_path / "s.db")
    store = ctrlrun.open_store(f"sqlite:///{path}?synchronous=normal")
    act = _protected(store)

    async def main():
        for i in range(1500):
            await act(i)

    asyncio.run(main())
    page = sqlite3.connect(path).execute("PRAGMA page_size").fetchone()[0]
    frames = (os.path.getsize(path + "-wal") - 32) // (page + 24)
    # SQLite's own automatic checkpoint comes at 1000 frames; a transaction writes about a
    # dozen: a log that is never restarted would hold over 15,000 by now
    assert frames < 1100, f"the log holds {frames} frames"
    assert 0 < where["queued"] < where["loop"] / 50  # a checkpoint is rare and off the loop
    assert store.get_effect("t:1499").state is ctrlrun.EffectState.COMMITTED
    store.close()
