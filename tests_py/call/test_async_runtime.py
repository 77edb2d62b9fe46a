"""``async def`` executors at run time: cancellation, mid-body and while the reservation is being
written (docs/spec.md §3, §5, §8.1). The reservation write cut before it reaches the server, the event loop
never blocking on the store, and many tasks / threads racing over shared keys:
test_async_runtime_io.py.

pytest-asyncio is not used: each test drives its coroutines with ``asyncio.run``.
"""

from __future__ import annotations

import asyncio
import sys
import time

import pytest

import ctrlrun
from ctrlrun import AmbiguousEffect, DuplicateEffect, EffectState
from tests_py.support.aio import _warm, run

LIVE = (EffectState.RESERVED, EffectState.EXECUTING)


# --------------------------------------------------------------------------------------------
# cancellation mid-body: ambiguous, and the blind retry is refused
# --------------------------------------------------------------------------------------------


def _sleeper(store, runs, started_box):
    @ctrlrun.protect("slow.send", effect="send:{order}", store=store)
    async def send(order):
        runs.append(order)
        started_box["holder"] = store.get_effect(f"send:{order}").action_id
        started_box["event"].set()
        await asyncio.sleep(30)  # the cancellation lands here
        return "sent"

    return send


def _assert_ambiguous_and_refused(send, second_store, key_value, runs, holder, exc_name):
    key = f"send:{key_value}"
    rec = second_store.get_effect(key)
    assert rec is not None
    assert rec.state == EffectState.AMBIGUOUS
    assert rec.action_id == holder
    assert rec.attempt == 1
    assert rec.lease_expires_at is None
    assert rec.error is not None and exc_name in rec.error

    for _ in range(2):  # the blind retry is refused, every time, and runs nothing
        with pytest.raises(AmbiguousEffect) as ei:
            run(send(key_value))
        assert ei.value.effect_key == key
        assert ei.value.action_id == holder
    assert runs == [key_value]
    assert second_store.get_effect(key) == rec


def test_task_cancel_mid_body_makes_the_effect_ambiguous(store, second_store):
    runs: list = []
    box: dict = {}
    send = _sleeper(store, runs, box)

    async def main():
        box["event"] = asyncio.Event()
        task = asyncio.create_task(send("c1"))
        await asyncio.wait_for(box["event"].wait(), 30)
        assert second_store.get_effect("send:c1").state == EffectState.EXECUTING
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert task.cancelled()

    t0 = time.monotonic()
    run(main())
    assert time.monotonic() - t0 < 10  # the executor's 30 s sleep was really cut short
    _assert_ambiguous_and_refused(send, second_store, "c1", runs, box["holder"], "CancelledError")


def test_wait_for_timeout_mid_body_makes_the_effect_ambiguous(store, second_store):
    runs: list = []
    box: dict = {}
    send = _sleeper(store, runs, box)

    async def main():
        box["event"] = asyncio.Event()
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(send("c2"), 0.5)

    t0 = time.monotonic()
    run(main())
    assert time.monotonic() - t0 < 10
    assert box["event"].is_set()  # the timeout hit the body, not the reservation
    _assert_ambiguous_and_refused(send, second_store, "c2", runs, box["holder"], "CancelledError")


if sys.version_info >= (3, 11):

    def test_asyncio_timeout_mid_body_makes_the_effect_ambiguous(store, second_store):
        runs: list = []
        box: dict = {}
        send = _sleeper(store, runs, box)

        async def main():
            box["event"] = asyncio.Event()
            with pytest.raises(TimeoutError):
                async with asyncio.timeout(0.5):
                    await send("c3")

        t0 = time.monotonic()
        run(main())
        assert time.monotonic() - t0 < 10
        assert box["event"].is_set()
        _assert_ambiguous_and_refused(
            send, second_store, "c3", runs, box["holder"], "CancelledError"
        )


# --------------------------------------------------------------------------------------------
# cancellation while the reservation is being written (PostgreSQL through a slow proxy)
# --------------------------------------------------------------------------------------------


def test_cancel_while_the_reservation_is_in_flight_never_leaves_a_live_reservation(
    proxy, proxied, direct
):
    runs: list = []

    @ctrlrun.protect("pay", effect="pay:{order}", store=proxied)
    async def pay(order):
        runs.append(order)
        return "paid"

    _warm(proxied)
    # the proxy keeps the reservation's COMMIT from the server until released: the write is
    # in flight for as long as the test wants, whatever the machine's load
    rule = proxy.arm("hold", b"ctrlrun_reserve($1")

    async def main():
        task = asyncio.create_task(pay("o1"))
        assert await asyncio.to_thread(rule.wait_fired, 30)
        assert not task.done()
        assert direct.get_effect("pay:o1") is None  # nothing has landed yet
        task.cancel()
        await asyncio.sleep(0.2)
        assert not task.done()  # the cancellation waits for the write in flight to settle
        rule.release()
        with pytest.raises(asyncio.CancelledError):
            await task

    run(main())
    assert runs == []  # the executor never ran
    # the reservation landed once released, and the cancellation then settled it as failed
    rec = direct.get_effect("pay:o1")
    assert rec is not None and rec.state == EffectState.FAILED, rec
    assert rec.attempt == 1
    assert rec.lease_expires_at is None

    # nothing keeps writing behind the caller's back: let any stray write finish, look again
    time.sleep(1.0)
    assert direct.get_effect("pay:o1") == rec

    # the retry (not through the proxy) runs the executor exactly once
    @ctrlrun.protect("pay", effect="pay:{order}", store=direct)
    async def pay_direct(order):
        runs.append(order)
        return "paid"

    assert run(pay_direct("o1")) == "paid"
    assert runs == ["o1"]
    done = direct.get_effect("pay:o1")
    assert done.state == EffectState.COMMITTED
    assert done.attempt == 2
    with pytest.raises(DuplicateEffect):
        run(pay_direct("o1"))
    assert runs == ["o1"]


def test_cancel_while_the_commit_write_is_in_flight_settles_it_before_propagating(
    proxy, proxied, direct
):
    """The body has returned; the caller is cancelled while the commit write is on the wire.
    The write must settle (the row says ``committed``) before the cancellation reaches the
    caller, as for the ambiguous write after a mid-body cancellation."""
    runs: list = []
    box: dict = {}

    @ctrlrun.protect("pay", effect="pay:{order}", store=proxied)
    async def pay(order):
        runs.append(order)
        box["returned"].set()
        return "paid"

    _warm(proxied)
    # the proxy keeps the commit write's COMMIT from the server until released
    rule = proxy.arm("hold", b"committed")

    async def main():
        box["returned"] = asyncio.Event()
        task = asyncio.create_task(pay("o5"))
        await asyncio.wait_for(box["returned"].wait(), 30)
        assert await asyncio.to_thread(rule.wait_fired, 30)  # the commit write is in flight
        task.cancel()
        await asyncio.sleep(0.2)
        assert not task.done()  # the cancellation waits for the write in flight to settle
        rule.release()
        with pytest.raises(asyncio.CancelledError):
            await task
        return direct.get_effect("pay:o5").state

    state_when_cancel_propagated = run(main())
    assert runs == ["o5"]

    # the outcome write itself is not lost: it lands (in its worker thread) ...
    deadline = time.monotonic() + 10
    rec = direct.get_effect("pay:o5")
    while rec.state != EffectState.COMMITTED and time.monotonic() < deadline:
        time.sleep(0.05)
        rec = direct.get_effect("pay:o5")
    assert rec.state == EffectState.COMMITTED
    assert rec.result == "paid"

    # ... but it must have landed before the CancelledError reached the caller: a caller that
    # handles the cancellation (or retries at once) must not find the effect still executing
    assert state_when_cancel_propagated == EffectState.COMMITTED, (
        "CancelledError propagated while the commit write was still in flight "
        f"(the row was {state_when_cancel_propagated.value})"
    )
