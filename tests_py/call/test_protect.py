"""``@ctrlrun.protect`` against a real store, for ``def`` and ``async def`` executors alike (the
``mode`` fixture, tests_py/support/modes.py): reservation, outcomes, refusals, resolution, results,
the wrapper and ``idempotency_token`` (SPEC §2-§5, §8.1, §8.4). Binding and rendering of the
effect key are in test_protect_keys.py; what only coroutines do is in test_protect_async.py."""

from __future__ import annotations

import asyncio
import inspect
import json
import re
import sys
import uuid
from datetime import timedelta

import pytest

import ctrlrun
from ctrlrun import (
    AmbiguousEffect,
    DuplicateEffect,
    EffectKeyError,
    EffectState,
    InvalidArgument,
    NotExecuted,
)

ACT_RE = re.compile(r"^act_[0-9a-f]{32}$")


def new_action_id() -> str:
    return "act_" + uuid.uuid4().hex


def keys(store):
    return [r.effect_key for r in store.list_effects()]


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
    [lambda: ValueError("boom"), lambda: KeyboardInterrupt("interrupted"),
     lambda: SystemExit(3)],
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


# --------------------------------------------------------------------------------------------
# results (SPEC §8.4)
# --------------------------------------------------------------------------------------------


class _BadRepr:
    def __repr__(self):
        raise RuntimeError("repr is broken")


class _ExitingRepr:
    def __repr__(self):
        # Raises for ctrlrun's result encoding only: asyncio's task repr and pytest's reports
        # call repr too, and they are not what this case is about.
        if sys._getframe(1).f_globals.get("__name__") == "ctrlrun._records":
            raise SystemExit("repr exits")
        return "_ExitingRepr()"


class _BrokenDict(dict):
    """A dict subclass whose own methods raise something json does not expect."""

    def items(self):
        raise RuntimeError("items() is broken")

    def __iter__(self):
        raise RuntimeError("__iter__ is broken")

    def __repr__(self):
        return "_BrokenDict(...)"


@pytest.mark.parametrize(
    "make", [object, lambda: {1, 2}, lambda: float("nan"), lambda: {"s": {3}},
             lambda: b"raw", _BadRepr, _ExitingRepr, lambda: _BrokenDict(a=1)],
    ids=["object", "set", "nan", "nested-set", "bytes", "bad-repr", "repr-raises-SystemExit",
         "dict-whose-items-raise"],
)
def test_unserialisable_result_still_commits_and_caller_gets_the_object(
    mode, store, second_store, make
):
    value = make()

    @mode.protect("res", effect="res:{a}", store=store)
    def f(a):
        return value

    out = mode.call(f, "x")
    assert out is value
    rec = second_store.get_effect("res:x")
    assert rec.state == EffectState.COMMITTED
    assert rec.error is None
    assert rec.result is not None
    assert isinstance(rec.result, dict)
    stored = list(rec.result.values())
    assert len(stored) == 1 and isinstance(stored[0], str)
    if not isinstance(value, (_BadRepr, _ExitingRepr)):
        assert stored == [repr(value)]
    else:
        assert stored == [f"<unrepresentable {type(value).__qualname__}>"]


@pytest.mark.parametrize("value", [None, 0, "", False, [], {}, 0.0],
                         ids=["None", "zero", "empty-str", "False", "empty-list", "empty-dict",
                              "zero-float"])
def test_falsy_results_commit_and_are_stored(mode, store, second_store, value):
    calls = []

    @mode.protect("res", effect="res:{a}", store=store)
    def f(a):
        calls.append(a)
        return value

    out = mode.call(f, "y")
    assert out is value or out == value
    assert type(out) is type(value)
    rec = second_store.get_effect("res:y")
    assert rec.state == EffectState.COMMITTED
    assert rec.result == value
    assert type(rec.result) is type(value)

    with pytest.raises(DuplicateEffect):
        mode.call(f, "y")
    assert calls == ["y"]


def test_json_result_round_trips(mode, store, second_store):
    value = {"amount": 12.5, "items": [1, "two", None, True], "nested": {"k": "v"}}

    @mode.protect("res", effect="res:{a}", store=store)
    def f(a):
        return value

    assert mode.call(f, "z") is value
    assert second_store.get_effect("res:z").result == value


@pytest.mark.parametrize(
    "value",
    [None, 0, -7, 10**40, "", "plain", 'q"uo\\te\nnew\u2028line\U0001f600', True, False, 1.25,
     [1, "a"], {"k": None}],
    ids=repr,
)
def test_the_stored_result_is_the_json_of_the_returned_value(mode, store, value):
    @mode.protect("t", effect="json:{n}", store=store)
    def act(n: int):
        return value

    assert mode.call(act, 1) == value
    stored = store.get_effect("json:1").result
    assert stored == json.loads(json.dumps(value))


def test_a_result_too_big_to_print_is_stored_as_unserializable_and_the_call_still_commits(
    mode, store
):
    big = 10**5000  # past Python's int-to-text digit limit

    @mode.protect("t", effect="big:{n}", store=store)
    def act(n: int):
        return big

    assert mode.call(act, 1) == big
    rec = store.get_effect("big:1")
    assert rec.state is EffectState.COMMITTED
    assert isinstance(rec.result, dict) and "int" in str(rec.result)


# --------------------------------------------------------------------------------------------
# the wrapper
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("effect", ["w:{a}", None], ids=["reserved", "unreserved"])
def test_wraps_metadata_is_kept(mode, store, effect):
    def original(a: str, b: int = 1) -> str:
        """Refund a payment."""
        return a

    executor = mode.executor(original)
    wrapped = ctrlrun.protect("meta", effect=effect, store=store)(executor)
    assert wrapped.__name__ == "original"
    assert wrapped.__doc__ == "Refund a payment."
    assert wrapped.__wrapped__ is executor
    assert wrapped.__qualname__ == original.__qualname__
    assert wrapped.__module__ == original.__module__
    assert wrapped.__annotations__ == original.__annotations__
    assert inspect.signature(wrapped) == inspect.signature(original)
    assert wrapped is not executor
    # the wrapper is a coroutine function exactly when the executor is one
    assert inspect.iscoroutinefunction(wrapped) is mode.is_async
    assert asyncio.iscoroutinefunction(wrapped) is mode.is_async
    if mode.is_async:
        coro = wrapped("q")
        assert inspect.iscoroutine(coro)
        assert asyncio.run(coro) == "q"
    else:
        assert wrapped("q") == "q"
    if effect is None:
        assert store.list_effects() == []
    else:
        assert keys(store) == ["w:q"]


class Payer:
    def __init__(self, name):
        self.name = name
        self.paid = []


def _make_payer_class(mode, store):
    class P(Payer):
        @mode.protect("pay", effect="pay:{invoice}", store=store)
        def pay(self, invoice, amount):
            self.paid.append((invoice, amount))
            return f"{self.name}:{amount}"

    return P


def test_protected_method_binds_self(mode, store, second_store):
    P = _make_payer_class(mode, store)
    a, b = P("a"), P("b")
    assert inspect.iscoroutinefunction(P.pay) is mode.is_async

    assert mode.call(a.pay, "inv1", 5) == "a:5"
    assert a.paid == [("inv1", 5)]

    with pytest.raises(DuplicateEffect) as ei:
        mode.call(b.pay, "inv1", 5)
    assert ei.value.effect_key == "pay:inv1"
    assert b.paid == []

    assert mode.call(b.pay, invoice="inv2", amount=7) == "b:7"
    assert b.paid == [("inv2", 7)]
    assert sorted(keys(second_store)) == ["pay:inv1", "pay:inv2"]
    assert second_store.get_effect("pay:inv1").result == "a:5"


def test_template_on_self_is_refused_at_call_time(mode, store):
    class Q:
        @mode.protect("q", effect="q:{self}", store=store)
        def go(self):
            raise AssertionError("must not run")

    with pytest.raises(EffectKeyError) as ei:
        mode.call(Q().go)
    assert "self" in str(ei.value)
    assert store.list_effects() == []


# --------------------------------------------------------------------------------------------
# idempotency_token
# --------------------------------------------------------------------------------------------


def test_idempotency_token_is_stable_per_attempt_and_changes_on_renewal(mode, store):
    tokens = []
    fail = {"now": True}

    @mode.protect("tok", effect="tok:{a}", store=store)
    async def f(a):
        t1 = ctrlrun.idempotency_token()
        await mode.pause()  # across a suspension point
        t2 = ctrlrun.idempotency_token()
        t3 = await mode.to_thread(ctrlrun.idempotency_token)  # the context is copied
        tokens.append((t1, t2, t3))
        if fail["now"]:
            raise NotExecuted("nothing sent")
        return t1

    with pytest.raises(NotExecuted):
        mode.call(f, "x")
    fail["now"] = False
    out = mode.call(f, "x")

    (a1, a2, a3), (b1, b2, b3) = tokens
    assert isinstance(a1, str) and a1
    assert a1 == a2 == a3
    assert b1 == b2 == b3
    assert a1 != b1
    assert out == b1
    assert store.get_effect("tok:x").attempt == 2

    # a different key gives a different token
    assert mode.call(f, "y") not in (a1, b1)

    # outside an executor, and after executors have ended, there is none
    with pytest.raises(InvalidArgument):
        ctrlrun.idempotency_token()


def test_idempotency_token_outside_an_executor_raises():
    with pytest.raises(InvalidArgument):
        ctrlrun.idempotency_token()


def test_idempotency_token_is_reset_after_an_executor_raises(mode, store):
    @mode.protect("tok", effect="tok:{a}", store=store)
    def f(a):
        ctrlrun.idempotency_token()
        raise ValueError("x")

    with pytest.raises(ValueError):
        mode.call(f, "z")
    with pytest.raises(InvalidArgument):
        ctrlrun.idempotency_token()
    assert store.get_effect("tok:z").state == EffectState.AMBIGUOUS


# --------------------------------------------------------------------------------------------
# calls that never reach the store, and where the store comes from
# --------------------------------------------------------------------------------------------


def test_generator_functions_are_refused_at_decoration(store):
    def gen(a):
        yield a

    async def agen(a):
        yield a

    deco = ctrlrun.protect("gen", effect="g:{a}", store=store)
    with pytest.raises(InvalidArgument):
        deco(gen)
    with pytest.raises(InvalidArgument) as ei:
        deco(agen)
    assert "generator" in str(ei.value)
    for fn in (gen, agen):
        with pytest.raises(InvalidArgument):  # without a template too
            ctrlrun.protect("gen", store=store)(fn)
    assert store.list_effects() == []


def test_without_effect_the_call_runs_unreserved_every_time(mode, store):
    calls = []

    @mode.protect("free", store=store)
    def f(a):
        calls.append(a)
        return len(calls)

    assert [mode.call(f, "same"), mode.call(f, "same"), mode.call(f, "same")] == [1, 2, 3]
    assert calls == ["same"] * 3
    assert store.list_effects() == []

    def g(a):
        raise ValueError(a)

    for given in (store, None):  # the store named, and the default store
        protected = mode.protect("free", store=given)(g)
        for _ in range(2):  # no reservation, so no ambiguity either
            with pytest.raises(ValueError):
                mode.call(protected, "v")
    assert store.list_effects() == []
    assert ctrlrun.default_store().list_effects() == []


def test_store_given_as_a_url(mode, tmp_path):
    path = tmp_path / "by_url.db"

    @mode.protect("url", effect="u:{a}", store=f"sqlite:///{path}")
    def f(a):
        return a

    assert mode.call(f, "1") == "1"
    with ctrlrun.open_store(f"sqlite:///{path}") as s:
        rec = s.get_effect("u:1")
        assert rec is not None and rec.state == EffectState.COMMITTED


def test_default_store_is_looked_up_at_call_time(mode, tmp_path):
    @mode.protect("dflt", effect="d:{a}")
    def f(a):
        return a

    path = tmp_path / "swapped.db"
    with ctrlrun.open_store(f"sqlite:///{path}") as swapped:
        previous = ctrlrun.set_default_store(swapped)
        try:
            assert mode.call(f, "1") == "1"
        finally:
            ctrlrun.set_default_store(previous)
        assert keys(swapped) == ["d:1"]
    assert ctrlrun.default_store().list_effects() == []
