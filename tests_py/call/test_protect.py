"""``@ctrlrun.protect`` against a real store, for ``def`` and ``async def`` executors alike (the
``mode`` fixture, tests_py/support/modes.py): reservation, outcomes, refusals and resolution
(docs/spec.md §2-§5, §8.1). Results, the wrapper and ``idempotency_token`` are in test_protect_wrapper.py;
binding and rendering of the effect key in test_protect_keys.py; what only coroutines do in
test_protect_async.py."""

from __future__ import annotations

import re
import uuid
from datetime import timedelta

import pytest

from ctrlrun import AmbiguousEffect, DuplicateEffect, EffectState, NotExecuted
from tests_py.support.stores import keys

ACT_RE = re.compile(r"^act_[0-9a-f]{32}$")


def new_action_id() -> str:
    return "act_" + uuid.uuid4().hex


# --------------------------------------------------------------------------------------------
# commit, duplicate, in progress
# --------------------------------------------------------------------------------------------


def test_commit_returns_value_and_commits_row(mode, store, second_store):
    calls = []

    @mode.protect("billing.refund", effect="refund:{payment_id}", store=store)
    def refund(payment_id, amount):
        calls.append((payment_id, amount))
        rec = store.get_effect(f"refund:{payment_id}")
        # the reservation landed and moved to executing before the body started
        assert rec is not None and rec.state == EffectState.EXECUTING
        return {"refunded": amount, "id": payment_id}

    out = mode.call(refund, "pi_1", 500)
    assert out == {"refunded": 500, "id": "pi_1"}
    assert calls == [("pi_1", 500)]

    rec = second_store.get_effect("refund:pi_1")
    assert rec is not None
    assert rec.effect_key == "refund:pi_1"
    assert rec.state == EffectState.COMMITTED
    assert rec.state == "committed"
    assert rec.result == {"refunded": 500, "id": "pi_1"}
    assert rec.attempt == 1
    assert ACT_RE.match(rec.action_id)
    assert rec.lease_expires_at is None
    assert rec.error is None
    assert rec.resolved_by is None
    assert rec.created_at.utcoffset() == timedelta(0)
    assert rec.updated_at >= rec.created_at
    assert keys(second_store) == ["refund:pi_1"]


def test_duplicate_of_committed_key_is_refused(mode, store, second_store):
    calls = []

    @mode.protect("billing.refund", effect="refund:{payment_id}", store=store)
    def refund(payment_id):
        calls.append(payment_id)
        return "done"

    assert mode.call(refund, "pi_2") == "done"
    first = second_store.get_effect("refund:pi_2")

    with pytest.raises(DuplicateEffect) as ei:
        mode.call(refund, "pi_2")
    e = ei.value
    assert e.state == "committed"
    assert e.effect_key == "refund:pi_2"
    assert e.record is not None
    assert e.record.state == EffectState.COMMITTED
    assert e.record.action_id == first.action_id
    assert "refund:pi_2" in str(e)
    assert calls == ["pi_2"]

    # the refusal wrote nothing
    assert second_store.get_effect("refund:pi_2") == first


def test_in_progress_when_the_executor_calls_itself_for_the_same_key(mode, store, second_store):
    calls = []
    seen = {}

    @mode.protect("mail.send", effect="mail:{to}", store=store)
    async def send(to):
        calls.append(to)
        seen["holder"] = store.get_effect(f"mail:{to}").action_id
        try:
            await mode.awaitable(send(to))
        except DuplicateEffect as e:  # must not escape: that would make the outer ambiguous
            seen["inner"] = e
        return "sent"

    assert mode.call(send, "a@example.com") == "sent"
    assert calls == ["a@example.com"]  # the nested call never ran the body

    inner = seen["inner"]
    assert inner.state == "in_progress"
    assert inner.effect_key == "mail:a@example.com"
    assert inner.record.state in (EffectState.RESERVED, EffectState.EXECUTING)
    assert inner.record.action_id == seen["holder"]

    rec = second_store.get_effect("mail:a@example.com")
    assert rec.state == EffectState.COMMITTED
    assert rec.action_id == seen["holder"]
    assert rec.attempt == 1
    assert rec.result == "sent"


def test_in_progress_even_when_the_contender_reuses_the_holders_action_id(
    mode, store, second_store
):
    seen = {}

    @mode.protect("mail.send", effect="mail:{to}", store=store)
    async def send(to):
        holder = store.get_effect(f"mail:{to}")
        seen["holder"] = holder.action_id
        try:
            await mode.to_thread(second_store.reserve_effect, f"mail:{to}", holder.action_id, 60)
        except DuplicateEffect as e:
            seen["refusal"] = e
        except BaseException as e:  # anything else is a wrong answer
            seen["wrong"] = e
        return "sent"

    assert mode.call(send, "b@example.com") == "sent"
    assert "wrong" not in seen, seen.get("wrong")
    assert "refusal" in seen, "a reservation under the holder's own action id was granted"
    e = seen["refusal"]
    assert e.state == "in_progress"
    assert e.effect_key == "mail:b@example.com"
    assert e.record.action_id == seen["holder"]

    rec = second_store.get_effect("mail:b@example.com")
    assert rec.state == EffectState.COMMITTED
    assert rec.attempt == 1
    assert rec.action_id == seen["holder"]


def test_same_action_id_on_a_reserved_row_is_in_progress_too(store, second_store):
    holder = new_action_id()
    first = store.reserve_effect("r:same", holder, 60)
    with pytest.raises(DuplicateEffect) as ei:
        second_store.reserve_effect("r:same", holder, 60)
    assert ei.value.state == "in_progress"
    assert ei.value.record.action_id == holder
    assert second_store.get_effect("r:same") == first.record  # nothing written


# --------------------------------------------------------------------------------------------
# NotExecuted and other exceptions
# --------------------------------------------------------------------------------------------


def test_not_executed_fails_the_row_and_a_retry_runs_as_attempt_2(mode, store, second_store):
    ids = []
    fail = {"now": True}

    @mode.protect("billing.charge", effect="charge:{order}", store=store)
    def charge(order):
        ids.append(store.get_effect(f"charge:{order}").action_id)
        if fail["now"]:
            raise NotExecuted("card declined before anything was sent")
        return "charged"

    with pytest.raises(NotExecuted) as ei:
        mode.call(charge, "o1")
    assert "card declined" in str(ei.value)

    rec1 = second_store.get_effect("charge:o1")
    assert rec1.state == EffectState.FAILED
    assert rec1.attempt == 1
    assert rec1.action_id == ids[0]
    assert rec1.lease_expires_at is None
    assert rec1.error is not None and "card declined" in rec1.error

    fail["now"] = False
    assert mode.call(charge, "o1") == "charged"
    assert len(ids) == 2
    assert ids[1] != ids[0]
    assert ACT_RE.match(ids[1])

    rec2 = second_store.get_effect("charge:o1")
    assert rec2.state == EffectState.COMMITTED
    assert rec2.attempt == 2
    assert rec2.action_id == ids[1]
    assert rec2.created_at == rec1.created_at
    assert rec2.result == "charged"
    assert rec2.error is None


@pytest.mark.parametrize(
    "make_exc",
    [lambda: ValueError("boom"), lambda: KeyboardInterrupt("interrupted"), lambda: SystemExit(3)],
    ids=["ValueError", "KeyboardInterrupt", "SystemExit"],
)
def test_any_other_exception_makes_the_effect_ambiguous(mode, store, second_store, make_exc):
    exc = make_exc()
    holder = []

    @mode.protect("ship.order", effect="ship:{order}", store=store)
    def ship(order):
        holder.append(store.get_effect(f"ship:{order}").action_id)
        raise exc

    with pytest.raises(type(exc)) as ei:
        mode.call(ship, "o9")
    assert ei.value is exc  # the executor's own exception, unchanged

    rec = second_store.get_effect("ship:o9")
    assert rec.state == EffectState.AMBIGUOUS
    assert rec.action_id == holder[0]
    assert rec.attempt == 1
    assert rec.lease_expires_at is None
    assert rec.error is not None and type(exc).__name__ in rec.error

    for _ in range(2):  # the blind retry is refused, every time
        with pytest.raises(AmbiguousEffect) as ai:
            mode.call(ship, "o9")
        a = ai.value
        assert a.effect_key == "ship:o9"
        assert a.action_id == holder[0]
        assert a.record.state == EffectState.AMBIGUOUS
        assert "ship:o9" in str(a)
        assert "resolve" in str(a).lower()
    assert len(holder) == 1
    assert second_store.get_effect("ship:o9") == rec


def test_lapsed_lease_turns_ambiguous_without_sleeping(mode, clocked_store, clock, second_store):
    key = "ship:o10"
    holder = new_action_id()
    res = clocked_store.reserve_effect(key, holder, 10)
    assert res.action_id == holder
    assert res.attempt == 1
    assert res.lease_expires_at == clock.now + timedelta(seconds=10)

    calls = []

    @mode.protect("ship.order", effect="ship:{order}", store=clocked_store)
    def ship(order):
        calls.append(order)
        return "shipped"

    clock.advance(5)  # still live: in progress, nothing written
    with pytest.raises(DuplicateEffect) as live:
        mode.call(ship, "o10")
    assert live.value.state == "in_progress"
    assert second_store.get_effect(key).state == EffectState.RESERVED

    clock.advance(6)
    with pytest.raises(AmbiguousEffect) as ei:
        mode.call(ship, "o10")
    assert ei.value.effect_key == key
    assert ei.value.action_id == holder
    assert calls == []

    # the ambiguous state was committed before raising: another handle sees it
    rec = second_store.get_effect(key)
    assert rec.state == EffectState.AMBIGUOUS
    assert rec.action_id == holder
    assert rec.lease_expires_at is None
    assert rec.error is not None and "laps" in rec.error.lower()

    with pytest.raises(AmbiguousEffect) as ei2:
        mode.call(ship, "o10")
    assert ei2.value.action_id == holder
    assert calls == []
    assert second_store.get_effect(key).state == EffectState.AMBIGUOUS


def test_lease_boundary_is_live_and_one_microsecond_later_lapsed(
    mode, clocked_store, clock, second_store
):
    key = "ship:o11"
    holder = new_action_id()
    clocked_store.reserve_effect(key, holder, timedelta(seconds=10))

    calls = []

    @mode.protect("ship.order", effect="ship:{order}", store=clocked_store)
    def ship(order):
        calls.append(order)
        return "shipped"

    clock.advance(10)  # exactly at lease_expires_at: still live
    with pytest.raises(DuplicateEffect) as ei:
        mode.call(ship, "o11")
    assert ei.value.state == "in_progress"
    assert second_store.get_effect(key).state == EffectState.RESERVED

    clock.advance(0.000001)
    with pytest.raises(AmbiguousEffect):
        mode.call(ship, "o11")
    assert calls == []
    assert second_store.get_effect(key).state == EffectState.AMBIGUOUS


# --------------------------------------------------------------------------------------------
# resolution by a person
# --------------------------------------------------------------------------------------------


def _make_ambiguous(mode, store, key_value):
    ids = []
    fail = {"raise": True}

    @mode.protect("ship.order", effect="ship:{order}", store=store)
    def ship(order):
        ids.append(store.get_effect(f"ship:{order}").action_id)
        if fail["raise"]:
            raise ValueError("boom")
        return "shipped"

    with pytest.raises(ValueError):
        mode.call(ship, key_value)
    assert store.get_effect(f"ship:{key_value}").state == EffectState.AMBIGUOUS
    return ship, ids, fail


def test_resolve_failed_lets_the_retry_run_as_attempt_2(mode, store, second_store):
    ship, ids, fail = _make_ambiguous(mode, store, "o20")
    before = second_store.get_effect("ship:o20")

    fail["raise"] = False
    with pytest.raises(AmbiguousEffect):  # unresolved: still refused
        mode.call(ship, "o20")
    assert len(ids) == 1

    rec = store.resolve_effect("ship:o20", EffectState.FAILED, "ops:alice")
    assert rec.state == EffectState.FAILED
    assert rec.resolved_by == "ops:alice"
    assert rec.error is not None and "boom" in rec.error
    assert second_store.get_effect("ship:o20").state == EffectState.FAILED

    assert mode.call(ship, "o20") == "shipped"
    assert len(ids) == 2 and ids[1] != ids[0]

    after = second_store.get_effect("ship:o20")
    assert after.state == EffectState.COMMITTED
    assert after.attempt == 2
    assert after.action_id == ids[1]
    assert after.resolved_by is None  # cleared by the renewal
    assert after.created_at == before.created_at
    assert after.result == "shipped"


def test_resolve_committed_then_the_retry_is_a_duplicate(mode, store, second_store):
    ship, ids, fail = _make_ambiguous(mode, store, "o21")
    rec = store.resolve_effect("ship:o21", "committed", "ops:bob")
    assert rec.state == EffectState.COMMITTED
    assert rec.resolved_by == "ops:bob"

    fail["raise"] = False
    with pytest.raises(DuplicateEffect) as ei:
        mode.call(ship, "o21")
    assert ei.value.state == "committed"
    assert ei.value.effect_key == "ship:o21"
    assert len(ids) == 1
    got = second_store.get_effect("ship:o21")
    assert got.state == EffectState.COMMITTED
    assert got.resolved_by == "ops:bob"
    assert got.attempt == 1
