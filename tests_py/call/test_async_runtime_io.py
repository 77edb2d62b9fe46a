"""``async def`` executors at run time: the reservation write cut before it reaches the server, the
event loop never blocking on the store, and many tasks / threads racing over shared keys (docs/spec.md §3,
§5, §8.1). Cancellation: test_async_runtime.py.

pytest-asyncio is not used: each test drives its coroutines with ``asyncio.run``.
"""

from __future__ import annotations

import asyncio
import logging
import random
import struct
import threading
import time
from collections import Counter

import pytest

import ctrlrun
from ctrlrun import DuplicateEffect, EffectState
from tests_py.support.aio import _warm, run

# --------------------------------------------------------------------------------------------
# the reservation write (straight into executing) is cut before it reaches the server
# --------------------------------------------------------------------------------------------


def _bind_params(captured: bytes) -> list:
    """The parameter values of a Bind message as captured by the proxy
    (``<statement SQL> \\0 <Bind body>``)."""
    _sql, body = captured.split(b"\0", 1)
    _portal, body = body.split(b"\0", 1)
    _stmt, body = body.split(b"\0", 1)
    (nfmt,) = struct.unpack("!h", body[:2])
    pos = 2 + 2 * nfmt
    (nparams,) = struct.unpack("!h", body[pos : pos + 2])
    pos += 2
    params = []
    for _ in range(nparams):
        (n,) = struct.unpack("!i", body[pos : pos + 4])
        pos += 4
        if n < 0:
            params.append(None)
        else:
            params.append(body[pos : pos + n])
            pos += n
    return params


@pytest.mark.parametrize("flavour", ["sync", "async"])
def test_reservation_write_dropped_as_it_is_sent_is_settled_and_the_body_runs_once(
    proxy, proxied, direct, flavour, caplog
):
    """The reservation is one statement that commits by itself: the connection cut as it goes
    out leaves it unknown, the re-read finds no row, the insert is tried again, and the body
    runs once."""
    caplog.set_level(logging.WARNING, logger="ctrlrun.store")
    runs: list = []
    if flavour == "sync":

        @ctrlrun.protect("pay", effect="pay:{order}", store=proxied)
        def pay(order):
            runs.append(order)
            return "paid"

        call = pay
    else:

        @ctrlrun.protect("pay", effect="pay:{order}", store=proxied)
        async def apay(order):
            runs.append(order)
            return "paid"

        def call(order):
            return run(apay(order))

    matched: list = []
    take = proxy._take_rule

    def spy(on, text):
        rule = take(on, text)
        if rule is not None:
            matched.append(text)
        return rule

    proxy._take_rule = spy
    rule = proxy.arm("drop_before", b"executing", on="statement")

    assert call("o2") == "paid"
    assert rule.fired == 1
    assert runs == ["o2"]
    branches = [r.getMessage().split(":")[0] for r in caplog.records]
    assert branches[:2] == ["commit_unknown", "reread_none_retry_insert"], branches

    # the statement that was dropped is the decorator's reservation: the insert of the
    # planner's row, whose state (its second parameter) is 'executing', the begin transition
    # folded into it
    (text,) = matched
    assert b"ctrlrun_reserve($1" in text.split(b"\0", 1)[0]
    params = _bind_params(text)
    assert params[0] == b"pay:o2"
    assert params[1] == b"executing"

    done = direct.get_effect("pay:o2")
    assert done.state == EffectState.COMMITTED
    assert done.attempt == 1
    with pytest.raises(DuplicateEffect):
        call("o2")
    assert runs == ["o2"]


# --------------------------------------------------------------------------------------------
# the event loop never waits on the store
# --------------------------------------------------------------------------------------------


def test_store_io_does_not_block_the_event_loop(proxy, proxied, direct):
    n = 5
    runs: list = []

    @ctrlrun.protect("pay", effect="pay:{order}", store=proxied)
    async def pay(order):
        await asyncio.sleep(0)
        runs.append(order)
        return order

    _warm(proxied, n)
    proxy.delay = 0.2

    async def main():
        ticks = [time.monotonic()]
        stop = asyncio.Event()

        async def ticker():
            while not stop.is_set():
                await asyncio.sleep(0.01)
                ticks.append(time.monotonic())

        tick_task = asyncio.create_task(ticker())
        await asyncio.sleep(0.05)
        t0 = time.monotonic()
        out = await asyncio.gather(*(pay(f"o{i}") for i in range(n)))
        elapsed = time.monotonic() - t0
        stop.set()
        await tick_task
        return out, elapsed, ticks

    out, elapsed, ticks = run(main())
    assert out == [f"o{i}" for i in range(n)]
    assert sorted(runs) == sorted(out)
    assert elapsed >= 0.4, elapsed  # the delay was in effect: two 0.2 s round trips
    gaps = [b - a for a, b in zip(ticks, ticks[1:])]
    assert len(ticks) >= elapsed / 0.02  # the ticker really ran all along
    assert max(gaps) < 0.05, f"the loop stalled for {max(gaps):.3f} s"
    proxy.delay = 0.0
    assert {r.effect_key for r in direct.list_effects("committed")} >= {
        f"pay:o{i}" for i in range(n)
    }


def test_a_slow_server_does_not_starve_another_stores_connections(pg, pg_schema, proxy, proxied):
    """Store I/O runs on worker threads; a store whose server is slow must not hold up a
    different store on a healthy server (here: its very first connection)."""
    proxy.delay = 0.5
    slow_done: list = []

    def slow_read():
        proxied.get_effect("nothing")  # needs a new connection through the slow proxy
        slow_done.append(time.monotonic())

    readers = [threading.Thread(target=slow_read, daemon=True) for _ in range(4)]
    for t in readers:
        t.start()
    time.sleep(0.3)  # the slow store is busy opening connections
    healthy = ctrlrun.open_store(pg.url(pg_schema))  # straight to the server
    try:
        t0 = time.monotonic()
        error = None
        try:
            healthy.get_effect("nothing")
        except Exception as exc:  # reported below, with how long it took
            error = exc
        took = time.monotonic() - t0
        for t in readers:
            t.join(timeout=60)
        assert not [t for t in readers if t.is_alive()]
        assert len(slow_done) == 4
        assert error is None, f"the healthy store failed after {took:.1f} s: {error}"
        assert took < 2.0, f"a read on the healthy store took {took:.1f} s"
    finally:
        proxy.delay = 0.0
        healthy.close()


# --------------------------------------------------------------------------------------------
# many tasks, many threads
# --------------------------------------------------------------------------------------------


def test_100_concurrent_tasks_over_10_keys_execute_each_key_once(store, second_store):
    executed: Counter = Counter()

    @ctrlrun.protect("race.task", effect="task:{k}", store=store)
    async def effect(k, i):
        executed[k] += 1
        await asyncio.sleep(0.2)  # long enough that the other tasks meet the live lease
        return i

    async def main():
        calls = [(f"k{i % 10}", i) for i in range(100)]
        random.Random(7).shuffle(calls)
        return calls, await asyncio.gather(
            *(effect(k, i) for k, i in calls), return_exceptions=True
        )

    calls, results = run(main())
    dups = [r for r in results if isinstance(r, DuplicateEffect)]
    ok = [r for r in results if not isinstance(r, BaseException)]
    other = [
        r for r in results if isinstance(r, BaseException) and not isinstance(r, DuplicateEffect)
    ]
    assert other == []
    assert executed == Counter({f"k{j}": 1 for j in range(10)})
    assert len(ok) == 10
    assert len(dups) == 90
    assert {d.state for d in dups} <= {"in_progress", "committed"}
    assert "in_progress" in {d.state for d in dups}  # the tasks really overlapped
    assert Counter(d.effect_key for d in dups) == Counter({f"task:k{j}": 9 for j in range(10)})

    recs = second_store.list_effects()
    assert len(recs) == 10
    winners = {
        calls[idx][0]: r for idx, r in enumerate(results) if not isinstance(r, BaseException)
    }
    for rec in recs:
        assert rec.state == EffectState.COMMITTED
        assert rec.attempt == 1
        assert rec.result == winners[rec.effect_key.split(":", 1)[1]]


def test_16_threads_over_1000_keys_execute_each_key_once(store, second_store):
    n_threads, n_keys = 16, 1000
    keys = [f"k{i:04d}" for i in range(n_keys)]
    executed: Counter = Counter()
    lock = threading.Lock()

    @ctrlrun.protect("race.thread", effect="thr:{k}", store=store)
    def effect(k):
        with lock:
            executed[k] += 1
        return threading.get_ident()

    barrier = threading.Barrier(n_threads)
    reports: dict = {}

    def worker(idx):
        order = list(keys)
        random.Random(idx).shuffle(order)
        ran, dup, other = [], [], []
        barrier.wait(timeout=30)
        for k in order:
            try:
                effect(k)
                ran.append(k)
            except DuplicateEffect as e:
                dup.append((k, e.state))
            except BaseException as e:
                other.append((k, repr(e)))
        reports[idx] = (ran, dup, other)

    threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(n_threads)]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    deadline = t0 + 120
    for t in threads:
        t.join(timeout=max(0.1, deadline - time.monotonic()))
    assert not [t for t in threads if t.is_alive()], "a thread is stuck (deadlock?)"

    assert len(reports) == n_threads
    other = [o for r in reports.values() for o in r[2]]
    assert other == []
    assert executed == Counter({k: 1 for k in keys})
    ran = [k for r in reports.values() for k in r[0]]
    dup = [d for r in reports.values() for d in r[1]]
    assert sorted(ran) == keys
    assert len(dup) == n_threads * n_keys - n_keys
    assert {s for _, s in dup} <= {"in_progress", "committed"}
    assert Counter(k for k, _ in dup) == Counter({k: n_threads - 1 for k in keys})
    for ran_i, dup_i, _ in reports.values():  # every thread met every key exactly once
        assert sorted(ran_i + [k for k, _ in dup_i]) == keys

    recs = second_store.list_effects()
    assert len(recs) == n_keys
    assert all(r.state == EffectState.COMMITTED and r.attempt == 1 for r in recs)


def test_a_write_that_must_settle_is_waited_for_without_spinning_under_anyio():
    """anyio (the MCP SDK's runtime) re-delivers a scope's cancellation at every await: the
    wait for a store write that must settle is shielded, so it sleeps instead of waking on
    every turn of the event loop (measured as the CPU the wait burns)."""
    import anyio

    from ctrlrun.call import runner_async as _runner_async

    settled: list = []
    cpu: list = []

    async def write() -> int:
        await asyncio.sleep(1.0)
        settled.append(True)
        return 1

    async def main() -> None:
        with anyio.CancelScope() as scope:
            asyncio.get_running_loop().call_later(0.1, scope.cancel)
            started = time.process_time()
            try:
                await _runner_async._finish(write())
            finally:
                cpu.append(time.process_time() - started)

    anyio.run(main)
    assert settled == [True]  # the write settled before the cancellation propagated
    assert cpu[0] < 0.5, cpu  # a spinning wait burns about the whole second
