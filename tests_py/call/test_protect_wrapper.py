"""``@ctrlrun.protect`` against a real store, for ``def`` and ``async def`` executors alike (the
``mode`` fixture, tests_py/support/modes.py): results, the wrapper, ``idempotency_token``, calls
that never reach the store and where the store comes from (docs/spec.md §3, §8.4). Reservation, outcomes,
refusals and resolution are in test_protect.py."""

from __future__ import annotations

import asyncio
import inspect
import json
import sys

import pytest

import ctrlrun
from ctrlrun import DuplicateEffect, EffectKeyError, EffectState, InvalidArgument, NotExecuted
from tests_py.support.stores import keys

# --------------------------------------------------------------------------------------------
# results (docs/spec.md §8.4)
# --------------------------------------------------------------------------------------------


class _BadRepr:
    def __repr__(self):
        raise RuntimeError("repr is broken")


class _ExitingRepr:
    def __repr__(self):
        # Raises for ctrlrun's result encoding only: asyncio's task repr and pytest's reports
        # call repr too, and they are not what this case is about.
        if sys._getframe(1).f_globals.get("__name__") == "ctrlrun.store.records":
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
    "make",
    [
        object,
        lambda: {1, 2},
        lambda: float("nan"),
        lambda: {"s": {3}},
        lambda: b"raw",
        _BadRepr,
        _ExitingRepr,
        lambda: _BrokenDict(a=1),
    ],
    ids=[
        "object",
        "set",
        "nan",
        "nested-set",
        "bytes",
        "bad-repr",
        "repr-raises-SystemExit",
        "dict-whose-items-raise",
    ],
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


@pytest.mark.parametrize(
    "value",
    [None, 0, "", False, [], {}, 0.0],
    ids=["None", "zero", "empty-str", "False", "empty-list", "empty-dict", "zero-float"],
)
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
    [
        None,
        0,
        -7,
        10**40,
        "",
        "plain",
        'q"uo\\te\nnew\u2028line\U0001f600',
        True,
        False,
        1.25,
        [1, "a"],
        {"k": None},
    ],
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
