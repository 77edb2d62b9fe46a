"""The reservation and the outcome write of ``async def`` protected calls, run on the core's
own threads (src/py/background.rs, python/ctrlrun/call/io_core.py): at most 16 of them however
many calls are in flight; a step still queued at exit is finished; a step that ends after its
loop closed keeps nothing open; a forked child gets threads of its own. Real SQLite stores."""

from __future__ import annotations

import asyncio
import contextvars
import gc
import os
import subprocess
import sys
import threading
import time

import pytest

import ctrlrun
from ctrlrun import _core
from ctrlrun.call import io_core as _io_core
from ctrlrun.call.outcome import Outcome
from ctrlrun.call.steps import Call
from tests_py.support.sqlite_lock import locked

pytestmark = pytest.mark.skipif(
    not hasattr(_core, "Completions"), reason="the core runs background steps on POSIX systems only"
)


def _fds() -> int:
    """The descriptors a loop or an inbox holds (sockets, pipes, epoll): not files, so a store
    connection the pool opened meanwhile (a SQLite file and its WAL) is not counted."""
    held = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            held += not os.readlink(f"/proc/self/fd/{fd}").startswith("/")
        except OSError:  # closed meanwhile (the listing's own descriptor among them)
            pass
    return held


def _core_threads() -> int:
    names = []
    for task in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{task}/comm") as f:
                names.append(f.read().strip())
        except FileNotFoundError:
            pass  # ended meanwhile
    return sum(1 for n in names if n.startswith("ctrlrun-core-"))


def test_an_awaited_call_whose_steps_ran_on_core_threads_takes_six_turns_of_the_loop(tmp_path):
    """Each step costs the turn that waits for its end and takes it off the inbox (the
    caller's future settled there), one for the future chained on it that keeps a cancellation
    from cutting the write off, and the task's own resumption: 3 per step. A future settled
    by a callback on another future would cost one more each (8 per call before)."""
    store = ctrlrun.open_store(f"sqlite:///{tmp_path / 's.db'}")  # FULL: every step queued

    @ctrlrun.protect("t.turns", effect="turns:{k}", store=store)
    async def tool(k: str) -> int:
        return 1

    async def main() -> float:
        for i in range(5):  # the inbox, the threads and the pool's connections
            await tool(f"warm{i}")
        loop = asyncio.get_running_loop()
        turns = [0]
        run_once = loop._run_once  # type: ignore[attr-defined]

        def counted() -> None:
            turns[0] += 1
            run_once()

        loop._run_once = counted  # type: ignore[attr-defined]
        for i in range(50):
            await tool(f"k{i}")
        return turns[0] / 50

    assert asyncio.run(main()) <= 6  # counted on CPython's asyncio loop (its _run_once)
    assert store.get_effect("turns:k49").state is ctrlrun.EffectState.COMMITTED
    store.close()


WHO: contextvars.ContextVar[str] = contextvars.ContextVar("who", default="nobody")


def test_what_a_caller_makes_of_its_step_runs_in_the_callers_context(tmp_path):
    """The inbox settles every caller's future from its reader, whose context is that of the
    task that made the inbox: the caller's mapping runs in the caller's own context (a log
    record it writes carries that caller's request ids)."""
    store = ctrlrun.open_store(f"sqlite:///{tmp_path / 's.db'}")  # FULL: every step queued

    async def caller(name: str) -> str:
        WHO.set(name)
        call = Call(store, f"ctx:{name}", 60_000_000)
        started = _io_core.reserve(store, call.reserve_request(), lambda ok, v: (ok, WHO.get()))
        assert started is not None and not started.done()  # queued, settled by the reader
        return str(await started)

    async def main() -> list:
        return [await asyncio.create_task(caller(n)) for n in ("first", "second", "third")]

    assert asyncio.run(main()) == ["first", "second", "third"]
    store.close()


def test_many_calls_in_flight_share_at_most_16_core_threads(tmp_path):
    store = ctrlrun.open_store(f"sqlite:///{tmp_path}/s.db")

    @ctrlrun.protect("t", effect="t:{k}", store=store)
    async def act(k):
        await asyncio.sleep(0.01)
        return k

    async def main():
        return await asyncio.gather(*(act(f"k{i}") for i in range(200)))

    assert asyncio.run(main()) == [f"k{i}" for i in range(200)]
    assert 1 <= _core_threads() <= 16
    assert len(store.list_effects("committed")) == 200
    store.close()


def test_a_step_that_ends_after_its_loop_closed_keeps_nothing_open(tmp_path):
    path = str(tmp_path / "s.db")
    store = ctrlrun.open_store(f"sqlite:///{path}")

    async def abandon(k):
        # a reservation left behind (as no protected call ever leaves one: it waits for its
        # writes), still waiting for the lock when the loop closes
        _io_core.reserve(store, Call(store, k, 60_000_000).reserve_request())

    asyncio.run(abandon("t:warm"))  # the store's connection is open from here on
    time.sleep(0.1)
    gc.collect()
    before = _fds()
    for i in range(5):
        holder = locked(path, 0.3)
        asyncio.run(abandon(f"t:late{i}"))
        assert holder.wait(10) == 0
        holder.stdout.close()
    # every step ends, after its loop closed: wait until each has landed (under load that
    # takes longer than the lock is held), then a moment for its thread to let go
    deadline = time.monotonic() + 30
    while any(store.get_effect(f"t:late{i}") is None for i in range(5)):
        assert time.monotonic() < deadline, "the abandoned steps never landed"
        time.sleep(0.05)
    # The futures left waiting refer to their loops, so a closed loop with a step in flight
    # is let go when the next loop makes its inbox. Every step queued so far has ended
    # (finish_background waits for them, each bounded), so nothing is still on its way.
    _core.finish_background()
    asyncio.run(abandon("t:next"))
    _core.finish_background()
    gc.collect()
    assert _fds() - before <= 2, (before, _fds())
    for i in range(5):  # each landed, though nobody was there to hear it
        assert store.get_effect(f"t:late{i}").state is ctrlrun.EffectState.EXECUTING
    store.close()


EXIT = """
import asyncio, sys
import ctrlrun
from ctrlrun.call import io_core as _io_core
from ctrlrun.call.outcome import Outcome
from ctrlrun.call.steps import Call

store = ctrlrun.open_store(f"sqlite:///{sys.argv[1]}")

async def main():
    call = Call(store, "exit:1", 60_000_000)
    _io_core.reserve(store, call.reserve_request())  # not awaited: the program ends first

asyncio.run(main())
"""


def test_at_exit_a_queued_step_is_finished(tmp_path):
    path = str(tmp_path / "s.db")
    ctrlrun.open_store(f"sqlite:///{path}").close()  # the schema, before the lock is taken
    holder = locked(path, 1.0)  # the reservation waits for it, past the program's end
    done = subprocess.run(
        [sys.executable, "-c", EXIT, path], capture_output=True, text=True, timeout=60
    )
    assert holder.wait(10) == 0
    assert done.returncode == 0, done.stderr
    store = ctrlrun.open_store(f"sqlite:///{path}")
    assert store.get_effect("exit:1").state is ctrlrun.EffectState.EXECUTING
    store.close()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")
def test_a_forked_child_runs_its_own_async_calls(tmp_path):
    url = f"sqlite:///{tmp_path}/s.db"
    store = ctrlrun.open_store(url)

    @ctrlrun.protect("t", effect="t:{k}", store=store)
    async def act(k):
        return k

    assert asyncio.run(act("parent")) == "parent"  # core threads exist from here on
    pid = os.fork()
    if pid == 0:  # the child: a store of its own, and the core's threads made anew
        code = 1
        try:
            child = ctrlrun.open_store(url)

            @ctrlrun.protect("t", effect="t:{k}", store=child)
            async def again(k):
                return k

            ok = asyncio.run(asyncio.wait_for(again("child"), 20)) == "child"
            code = 0 if ok and _core_threads() >= 1 else 1
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert asyncio.run(act("after")) == "after"
    assert store.get_effect("t:child").state is ctrlrun.EffectState.COMMITTED
    store.close()


def test_an_outcome_write_that_meets_a_lock_is_reissued_on_the_core_thread(tmp_path, caplog):
    path = str(tmp_path / "s.db")
    store = ctrlrun.open_store(f"sqlite:///{path}?busy_timeout=0.1")
    holders = []

    @ctrlrun.protect("t", effect="t:{k}", store=store)
    async def act(k):
        holders.append(locked(path, 0.5))  # the outcome write waits 0.1 s, fails, tries again
        return k

    with caplog.at_level("WARNING", logger="ctrlrun"):
        assert asyncio.run(act("a")) == "a"
    assert holders[0].wait(10) == 0
    assert store.get_effect("t:a").state is ctrlrun.EffectState.COMMITTED
    assert any(
        "recording commit for 't:a' failed" in r.getMessage() and "retrying" in r.getMessage()
        for r in caplog.records
    ), caplog.records
    store.close()


def test_an_outcome_write_is_reissued_after_its_loop_closed(tmp_path):
    path = str(tmp_path / "s.db")
    store = ctrlrun.open_store(f"sqlite:///{path}?busy_timeout=0.1")
    call = Call(store, "t:b", 60_000_000)

    async def reserve():
        call.attempt = (await _io_core.reserve(store, call.reserve_request())).attempt

    async def leave_the_outcome():
        _io_core.transition(store, call.record_request(Outcome(_core.Step.COMMIT, "1")))

    asyncio.run(reserve())
    holder = locked(path, 0.5)
    asyncio.run(leave_the_outcome())  # the loop is closed before the first try fails
    assert holder.wait(10) == 0
    deadline = time.monotonic() + 10
    while store.get_effect("t:b").state is ctrlrun.EffectState.EXECUTING:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert store.get_effect("t:b").state is ctrlrun.EffectState.COMMITTED
    store.close()


def test_without_core_threads_the_worker_threads_do_the_steps(tmp_path, monkeypatch):
    monkeypatch.setattr(_io_core, "_AVAILABLE", False)
    monkeypatch.setattr(_io_core, "_inboxes", _io_core._registry())
    store = ctrlrun.open_store(f"sqlite:///{tmp_path}/s.db")

    @ctrlrun.protect("t", effect="t:{k}", store=store)
    async def act(k):
        return k

    assert asyncio.run(act("a")) == "a"
    with pytest.raises(ctrlrun.DuplicateEffect):
        asyncio.run(act("a"))
    assert store.get_effect("t:a").state is ctrlrun.EffectState.COMMITTED
    assert any(t.name.startswith("ctrlrun-io-") for t in threading.enumerate())
    store.close()


def test_a_store_url_opened_at_the_first_call_does_not_block_the_event_loop(tmp_path):
    """Opening a SQLite file for the first time creates its schema, which waits for another
    process's lock: on a worker thread, while the loop goes on."""
    path = str(tmp_path / "fresh.db")
    holder = locked(path, 1.0)  # the file exists, with no schema, and is locked

    @ctrlrun.protect("t", effect="t:{k}", store=f"sqlite:///{path}")
    async def act(k):
        return k

    async def main():
        ticks = [time.monotonic()]

        async def ticker():
            while True:
                await asyncio.sleep(0.01)
                ticks.append(time.monotonic())

        tick = asyncio.ensure_future(ticker())
        out = await act("a")
        tick.cancel()
        return out, ticks

    out, ticks = asyncio.run(main())
    assert holder.wait(10) == 0
    assert out == "a"
    assert ticks[-1] - ticks[0] >= 0.5  # the call did wait for the lock ...
    gaps = [b - a for a, b in zip(ticks, ticks[1:])]
    assert max(gaps) < 0.2, f"the loop stalled for {max(gaps):.3f} s"  # ... off the loop
