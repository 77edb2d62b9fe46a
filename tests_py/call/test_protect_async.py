"""``@ctrlrun.protect`` on ``async def`` executors: what only coroutines do (docs/spec.md §3, §8.1).
Every decorator behaviour both kinds of executor share is in test_protect.py and
test_protect_keys.py, run in both modes; cancellation and the event loop are in
test_async_runtime.py.

pytest-asyncio is not used: each test drives its coroutines with ``asyncio.run``.
"""

from __future__ import annotations

import asyncio
import inspect
import threading

import pytest

import ctrlrun
from ctrlrun import DuplicateEffect, EffectState, InvalidArgument


def keys(store):
    return [r.effect_key for r in store.list_effects()]


def run(coro):
    return asyncio.run(coro)


def test_the_body_runs_as_a_coroutine_on_the_callers_loop_and_thread(store, second_store):
    loops = []

    @ctrlrun.protect("billing.refund", effect="refund:{payment_id}", store=store)
    async def refund(payment_id, amount):
        loops.append((asyncio.get_running_loop(), threading.get_ident()))
        await asyncio.sleep(0)
        return {"refunded": amount, "id": payment_id}

    async def main():
        out = await refund("pi_1", 500)
        return out, asyncio.get_running_loop(), threading.get_ident()

    out, loop, tid = run(main())
    assert out == {"refunded": 500, "id": "pi_1"}
    # the body ran as a coroutine on the caller's own loop and thread
    assert loops == [(loop, tid)]
    assert second_store.get_effect("refund:pi_1").state == EffectState.COMMITTED


def test_in_progress_for_a_concurrent_task_on_the_same_key(store, second_store):
    """A second task on the same loop meets the first one's live lease."""
    calls = []

    @ctrlrun.protect("mail.send", effect="mail:{to}", store=store)
    async def send(to, gate):
        calls.append(to)
        await gate.wait()
        return "sent"

    async def main():
        gate = asyncio.Event()
        first = asyncio.create_task(send("c@example.com", gate))
        while not calls:  # the first holder's body is running
            await asyncio.sleep(0.005)
        with pytest.raises(DuplicateEffect) as ei:
            await send("c@example.com", gate)
        gate.set()
        return await first, ei.value

    out, e = run(main())
    assert out == "sent"
    assert e.state == "in_progress"
    assert e.record.state == EffectState.EXECUTING
    assert calls == ["c@example.com"]
    assert second_store.get_effect("mail:c@example.com").state == EffectState.COMMITTED


# --------------------------------------------------------------------------------------------
# idempotency_token
# --------------------------------------------------------------------------------------------


def test_idempotency_token_of_concurrent_executors_is_their_own(store):
    got = {}

    @ctrlrun.protect("tok", effect="tok:{a}", store=store)
    async def f(a, first_in, release):
        before = ctrlrun.idempotency_token()
        first_in.set()
        await release.wait()  # the other executor runs meanwhile on the same loop
        got[a] = (before, ctrlrun.idempotency_token())
        return before

    async def main():
        in1, in2, release = asyncio.Event(), asyncio.Event(), asyncio.Event()
        t1 = asyncio.create_task(f("k1", in1, release))
        t2 = asyncio.create_task(f("k2", in2, release))
        await in1.wait()
        await in2.wait()
        release.set()
        out = await asyncio.gather(t1, t2)
        with pytest.raises(InvalidArgument):  # the caller's context was never touched
            ctrlrun.idempotency_token()
        return out

    out = run(main())
    assert got["k1"][0] == got["k1"][1] == out[0]
    assert got["k2"][0] == got["k2"][1] == out[1]
    assert out[0] != out[1]


def test_idempotency_token_is_reset_in_the_callers_task_after_an_executor_raises(store):
    @ctrlrun.protect("tok", effect="tok:{a}", store=store)
    async def f(a):
        ctrlrun.idempotency_token()
        raise ValueError("x")

    async def main():
        with pytest.raises(ValueError):
            await f("z")
        with pytest.raises(InvalidArgument):
            ctrlrun.idempotency_token()

    run(main())
    assert store.get_effect("tok:z").state == EffectState.AMBIGUOUS


# --------------------------------------------------------------------------------------------
# a coroutine is reserved when it is awaited, not when it is created
# --------------------------------------------------------------------------------------------


def test_calling_without_awaiting_reserves_nothing(store, second_store):
    calls = []

    @ctrlrun.protect("lazy", effect="lazy:{a}", store=store)
    async def f(a):
        calls.append(a)
        return "ran"

    coro = f("x")
    assert inspect.iscoroutine(coro)
    coro.close()  # never awaited
    assert calls == []
    assert store.list_effects() == []
    assert second_store.list_effects() == []

    # a bad value is not even looked at until the coroutine runs
    bad = f(None)
    bad.close()
    assert store.list_effects() == []

    # positive control: a created coroutine reserves only once it is awaited
    pending = f("x")
    assert second_store.list_effects() == []
    assert run(pending) == "ran"
    assert calls == ["x"]
    assert keys(second_store) == ["lazy:x"]
    assert second_store.get_effect("lazy:x").state == EffectState.COMMITTED
