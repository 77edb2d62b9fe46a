"""``@ctrlrun.protect`` against a real SQLite file: reservation, outcomes, refusals, binding
and rendering of the effect key (SPEC §2-§5, §7, §8.1, §8.4)."""

from __future__ import annotations

import enum
import functools
import inspect
import re
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


def test_commit_returns_value_and_commits_row(store, second_store):
    calls = []

    @ctrlrun.protect("billing.refund", effect="refund:{payment_id}", store=store)
    def refund(payment_id, amount):
        calls.append((payment_id, amount))
        rec = store.get_effect(f"refund:{payment_id}")
        # the reservation landed and moved to executing before the body started
        assert rec is not None and rec.state == EffectState.EXECUTING
        return {"refunded": amount, "id": payment_id}

    out = refund("pi_1", 500)
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


def test_duplicate_of_committed_key_is_refused(store, second_store):
    calls = []

    @ctrlrun.protect("billing.refund", effect="refund:{payment_id}", store=store)
    def refund(payment_id):
        calls.append(payment_id)
        return "done"

    assert refund("pi_2") == "done"
    first = second_store.get_effect("refund:pi_2")

    with pytest.raises(DuplicateEffect) as ei:
        refund("pi_2")
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


def test_in_progress_when_the_executor_calls_itself_for_the_same_key(store, second_store):
    calls = []
    seen = {}

    @ctrlrun.protect("mail.send", effect="mail:{to}", store=store)
    def send(to):
        calls.append(to)
        seen["holder"] = store.get_effect(f"mail:{to}").action_id
        try:
            send(to)
        except DuplicateEffect as e:  # must not escape: that would make the outer ambiguous
            seen["inner"] = e
        return "sent"

    assert send("a@example.com") == "sent"
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


def test_in_progress_even_when_the_contender_reuses_the_holders_action_id(store, second_store):
    seen = {}

    @ctrlrun.protect("mail.send", effect="mail:{to}", store=store)
    def send(to):
        holder = store.get_effect(f"mail:{to}")
        seen["holder"] = holder.action_id
        try:
            second_store.reserve_effect(f"mail:{to}", holder.action_id, 60)
        except DuplicateEffect as e:
            seen["refusal"] = e
        except BaseException as e:  # anything else is a wrong answer
            seen["wrong"] = e
        return "sent"

    assert send("b@example.com") == "sent"
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


def test_not_executed_fails_the_row_and_a_retry_runs_as_attempt_2(store, second_store):
    ids = []
    mode = {"fail": True}

    @ctrlrun.protect("billing.charge", effect="charge:{order}", store=store)
    def charge(order):
        ids.append(store.get_effect(f"charge:{order}").action_id)
        if mode["fail"]:
            raise NotExecuted("card declined before anything was sent")
        return "charged"

    with pytest.raises(NotExecuted) as ei:
        charge("o1")
    assert "card declined" in str(ei.value)

    rec1 = second_store.get_effect("charge:o1")
    assert rec1.state == EffectState.FAILED
    assert rec1.attempt == 1
    assert rec1.action_id == ids[0]
    assert rec1.lease_expires_at is None
    assert rec1.error is not None and "card declined" in rec1.error

    mode["fail"] = False
    assert charge("o1") == "charged"
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
    "make_exc", [lambda: ValueError("boom"), lambda: KeyboardInterrupt("interrupted")],
    ids=["ValueError", "KeyboardInterrupt"],
)
def test_any_other_exception_makes_the_effect_ambiguous(store, second_store, make_exc):
    exc = make_exc()
    holder = []

    @ctrlrun.protect("ship.order", effect="ship:{order}", store=store)
    def ship(order):
        holder.append(store.get_effect(f"ship:{order}").action_id)
        raise exc

    with pytest.raises(type(exc)) as ei:
        ship("o9")
    assert ei.value is exc  # the executor's own exception, unchanged

    rec = second_store.get_effect("ship:o9")
    assert rec.state == EffectState.AMBIGUOUS
    assert rec.action_id == holder[0]
    assert rec.attempt == 1
    assert rec.lease_expires_at is None
    assert rec.error is not None and type(exc).__name__ in rec.error

    for _ in range(2):  # the blind retry is refused, every time
        with pytest.raises(AmbiguousEffect) as ai:
            ship("o9")
        a = ai.value
        assert a.effect_key == "ship:o9"
        assert a.action_id == holder[0]
        assert a.record.state == EffectState.AMBIGUOUS
        assert "ship:o9" in str(a)
        assert "resolve" in str(a).lower()
    assert len(holder) == 1
    assert second_store.get_effect("ship:o9") == rec


def test_lapsed_lease_turns_ambiguous_without_sleeping(clocked_store, clock, second_store):
    key = "ship:o10"
    holder = new_action_id()
    res = clocked_store.reserve_effect(key, holder, 10)
    assert res.action_id == holder
    assert res.attempt == 1
    assert res.lease_expires_at == clock.now + timedelta(seconds=10)

    calls = []

    @ctrlrun.protect("ship.order", effect="ship:{order}", store=clocked_store)
    def ship(order):
        calls.append(order)
        return "shipped"

    clock.advance(11)
    with pytest.raises(AmbiguousEffect) as ei:
        ship("o10")
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
        ship("o10")
    assert ei2.value.action_id == holder
    assert calls == []
    assert second_store.get_effect(key).state == EffectState.AMBIGUOUS


def test_lease_boundary_is_live_and_one_microsecond_later_lapsed(clocked_store, clock, second_store):
    key = "ship:o11"
    holder = new_action_id()
    clocked_store.reserve_effect(key, holder, timedelta(seconds=10))

    calls = []

    @ctrlrun.protect("ship.order", effect="ship:{order}", store=clocked_store)
    def ship(order):
        calls.append(order)
        return "shipped"

    clock.advance(10)  # exactly at lease_expires_at: still live
    with pytest.raises(DuplicateEffect) as ei:
        ship("o11")
    assert ei.value.state == "in_progress"
    assert second_store.get_effect(key).state == EffectState.RESERVED

    clock.advance(0.000001)
    with pytest.raises(AmbiguousEffect):
        ship("o11")
    assert calls == []
    assert second_store.get_effect(key).state == EffectState.AMBIGUOUS


# --------------------------------------------------------------------------------------------
# resolution by a person
# --------------------------------------------------------------------------------------------


def _make_ambiguous(store, key_value):
    ids = []
    mode = {"raise": True}

    @ctrlrun.protect("ship.order", effect="ship:{order}", store=store)
    def ship(order):
        ids.append(store.get_effect(f"ship:{order}").action_id)
        if mode["raise"]:
            raise ValueError("boom")
        return "shipped"

    with pytest.raises(ValueError):
        ship(key_value)
    assert store.get_effect(f"ship:{key_value}").state == EffectState.AMBIGUOUS
    return ship, ids, mode


def test_resolve_failed_lets_the_retry_run_as_attempt_2(store, second_store):
    ship, ids, mode = _make_ambiguous(store, "o20")
    before = second_store.get_effect("ship:o20")

    rec = store.resolve_effect("ship:o20", EffectState.FAILED, "ops:alice")
    assert rec.state == EffectState.FAILED
    assert rec.resolved_by == "ops:alice"
    assert rec.error is not None and "boom" in rec.error
    assert second_store.get_effect("ship:o20").state == EffectState.FAILED

    mode["raise"] = False
    assert ship("o20") == "shipped"
    assert len(ids) == 2 and ids[1] != ids[0]

    after = second_store.get_effect("ship:o20")
    assert after.state == EffectState.COMMITTED
    assert after.attempt == 2
    assert after.action_id == ids[1]
    assert after.resolved_by is None  # cleared by the renewal
    assert after.created_at == before.created_at
    assert after.result == "shipped"


def test_resolve_committed_then_the_retry_is_a_duplicate(store, second_store):
    ship, ids, mode = _make_ambiguous(store, "o21")
    rec = store.resolve_effect("ship:o21", "committed", "ops:bob")
    assert rec.state == EffectState.COMMITTED
    assert rec.resolved_by == "ops:bob"

    mode["raise"] = False
    with pytest.raises(DuplicateEffect) as ei:
        ship("o21")
    assert ei.value.state == "committed"
    assert ei.value.effect_key == "ship:o21"
    assert len(ids) == 1
    got = second_store.get_effect("ship:o21")
    assert got.state == EffectState.COMMITTED
    assert got.resolved_by == "ops:bob"
    assert got.attempt == 1


# --------------------------------------------------------------------------------------------
# binding the call
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "args, kwargs, expected_key, expected_body",
    [
        (("1", "2"), {}, "k/1/2/x", ("1", "2", "x")),  # positional + default
        (("1",), {"b": "2"}, "k/1/2/x", ("1", "2", "x")),  # keyword
        (("1", "2"), {"c": "y"}, "k/1/2/y", ("1", "2", "y")),  # keyword-only given
        (("p",), {"c": "q", "b": "r"}, "k/p/r/q", ("p", "r", "q")),  # keyword order irrelevant
    ],
    ids=["positional-default", "keyword", "keyword-only", "kw-order"],
)
def test_binding_gives_the_expected_key(store, args, kwargs, expected_key, expected_body):
    seen = []

    @ctrlrun.protect("bind", effect="k/{a}/{b}/{c}", store=store)
    def f(a, /, b, *, c="x"):
        seen.append((a, b, c))
        return [a, b, c]

    assert f(*args, **kwargs) == list(expected_body)
    assert seen == [expected_body]
    assert keys(store) == [expected_key]
    rec = store.get_effect(expected_key)
    assert rec.state == EffectState.COMMITTED
    assert rec.result == list(expected_body)


def test_binding_by_keyword_and_by_position_name_the_same_key(store):
    calls = []

    @ctrlrun.protect("bind", effect="inv:{customer}:{invoice}", store=store)
    def bill(customer, invoice, note="none"):
        calls.append(note)
        return note

    assert bill("c1", "i1") == "none"
    with pytest.raises(DuplicateEffect) as ei:
        bill(invoice="i1", customer="c1", note="other")
    assert ei.value.effect_key == "inv:c1:i1"
    assert calls == ["none"]
    assert keys(store) == ["inv:c1:i1"]


def test_default_value_fills_a_placeholder(store):
    @ctrlrun.protect("ship", effect="ship:{region}:{item}", store=store)
    def ship(item, region="eu"):
        return region

    assert ship("x") == "eu"
    assert ship("x", "us") == "us"
    assert ship("y", region="ap") == "ap"
    assert sorted(keys(store)) == ["ship:ap:y", "ship:eu:x", "ship:us:x"]


def test_positional_only_passed_by_keyword_is_a_type_error_and_writes_nothing(store):
    calls = []

    @ctrlrun.protect("bind", effect="k/{a}", store=store)
    def f(a, /):
        calls.append(a)

    with pytest.raises(TypeError):
        f(a="1")
    assert calls == []
    assert store.list_effects() == []


def test_repeated_placeholder_and_literal_template(store):
    @ctrlrun.protect("rep", effect="{a}-{a}", store=store)
    def rep(a):
        return a

    rep("z")
    assert keys(store) == ["z-z"]

    calls = []

    @ctrlrun.protect("lit", effect="maintenance:nightly", store=store)
    def nightly(day):
        calls.append(day)
        return day

    assert nightly("mon") == "mon"
    with pytest.raises(DuplicateEffect) as ei:
        nightly("tue")  # a template without placeholders is one literal key
    assert ei.value.effect_key == "maintenance:nightly"
    assert calls == ["mon"]


def test_keys_are_compared_byte_for_byte(store):
    calls = []

    @ctrlrun.protect("k", effect="k:{a}", store=store)
    def f(a):
        calls.append(a)
        return a

    for v in ["A", "a", " a", "a ", "é", "e\u0301"]:  # the last two are NFC/NFD of one text
        f(v)
    assert len(calls) == 6
    assert sorted(keys(store)) == sorted(["k:A", "k:a", "k: a", "k:a ", "k:é", "k:e\u0301"])


def _with_var_positional(a, *rest):
    pass


def _with_var_keyword(a, **extra):
    pass


def _with_both(a, *rest, **extra):
    pass


@pytest.mark.parametrize("fn", [_with_var_positional, _with_var_keyword, _with_both])
def test_star_args_and_star_kwargs_are_refused_at_decoration(store, fn):
    deco = ctrlrun.protect("star", effect="k:{a}", store=store)
    with pytest.raises(InvalidArgument) as ei:
        deco(fn)
    assert "*" in str(ei.value)
    assert store.list_effects() == []


def test_placeholder_naming_no_parameter_is_refused_at_decoration(store):
    calls = []

    def pay(invoice):
        calls.append(invoice)

    deco = ctrlrun.protect("pay", effect="pay:{invoice_id}", store=store)
    with pytest.raises(EffectKeyError) as ei:
        deco(pay)
    assert "invoice_id" in str(ei.value)
    assert calls == []
    assert store.list_effects() == []


# --------------------------------------------------------------------------------------------
# rendering values (SPEC §7)
# --------------------------------------------------------------------------------------------


class Color(str, enum.Enum):
    RED = "red"


class Prio(enum.IntEnum):
    HIGH = 3


class Plain(enum.Enum):
    FIVE = 5
    NAME = "named"


class Weird(enum.Enum):
    FLOAT = 1.5
    EMPTY = ""
    TUPLE = (1, 2)
    NONE = None
    BOOL = True


UID = uuid.UUID("12345678-1234-5678-1234-567812345678")
UID_UPPER = uuid.UUID("ABCDEF01-ABCD-4BCD-8BCD-ABCDEF012345")


@pytest.mark.parametrize(
    "value, rendered",
    [
        ("pi_1", "pi_1"),
        ("ünïcødé ✓", "ünïcødé ✓"),
        (42, "42"),
        (0, "0"),
        (-7, "-7"),
        (10**30, "1" + "0" * 30),
        (UID, "12345678-1234-5678-1234-567812345678"),
        (UID_UPPER, "abcdef01-abcd-4bcd-8bcd-abcdef012345"),
        (Color.RED, "red"),
        (Prio.HIGH, "3"),
        (Plain.FIVE, "5"),
        (Plain.NAME, "named"),
    ],
    ids=["str", "unicode", "int", "zero", "negative", "bigint", "uuid", "uuid-upper",
         "str-enum", "int-enum", "plain-enum-int", "plain-enum-str"],
)
def test_accepted_values_render_as_spec_says(store, value, rendered):
    seen = []

    @ctrlrun.protect("render", effect="k:{v}", store=store)
    def f(v):
        seen.append(v)
        return "ok"

    assert f(value) == "ok"
    assert seen == [value]
    assert keys(store) == [f"k:{rendered}"]
    assert store.get_effect(f"k:{rendered}").state == EffectState.COMMITTED


@pytest.mark.parametrize(
    "value, type_name",
    [
        (None, "NoneType"),
        ("", None),
        (True, "bool"),
        (False, "bool"),
        (1.5, "float"),
        (2.0, "float"),
        (["a"], "list"),
        ({"a": 1}, "dict"),
        (("a",), "tuple"),
        (b"abc", "bytes"),
        (object(), "object"),
        (Weird.FLOAT, "Weird"),
        (Weird.EMPTY, "Weird"),
        (Weird.TUPLE, "Weird"),
        (Weird.NONE, "Weird"),
        (Weird.BOOL, "Weird"),
    ],
    ids=["None", "empty-str", "True", "False", "float", "float-integral", "list", "dict",
         "tuple", "bytes", "object", "enum-float", "enum-empty", "enum-tuple", "enum-none",
         "enum-bool"],
)
def test_refused_values_raise_effect_key_error_before_anything_happens(
    store, value, type_name
):
    calls = []

    @ctrlrun.protect("render", effect="k:{order_ref}", store=store)
    def f(order_ref):
        calls.append(order_ref)
        return "ran"

    with pytest.raises(EffectKeyError) as ei:
        f(value)
    msg = str(ei.value)
    assert "order_ref" in msg
    if type_name is not None:
        assert type_name in msg
    assert calls == []
    assert store.list_effects() == []


def test_executor_mutating_its_arguments_does_not_move_the_key(store, second_store):
    order = uuid.UUID("00000000-0000-4000-8000-000000000abc")
    original = str(order)
    lines = ["a"]
    meta = {"n": 1}

    @ctrlrun.protect("ship", effect="ship:{order_id}:{customer}", store=store)
    def ship(order_id, customer, lines, meta):
        lines.append("added")
        meta["n"] = 2
        meta["customer"] = "someone-else"
        # rewrite the UUID in place (UUID blocks setattr, object.__setattr__ does not)
        object.__setattr__(order_id, "int", 0xFFFF)
        return len(lines)

    assert ship(order, "c1", lines, meta) == 2
    assert str(order) != original  # the argument really moved
    assert keys(second_store) == [f"ship:{original}:c1"]
    rec = second_store.get_effect(f"ship:{original}:c1")
    assert rec.state == EffectState.COMMITTED
    assert rec.result == 2

    # the same consequence, proposed again with the original values: refused
    with pytest.raises(DuplicateEffect) as ei:
        ship(uuid.UUID(original), "c1", ["a"], {"n": 1})
    assert ei.value.effect_key == f"ship:{original}:c1"
    assert lines == ["a", "added"]


# --------------------------------------------------------------------------------------------
# results (SPEC §8.4)
# --------------------------------------------------------------------------------------------


class _BadRepr:
    def __repr__(self):
        raise RuntimeError("repr is broken")


@pytest.mark.parametrize(
    "make", [object, lambda: {1, 2}, lambda: float("nan"), lambda: {"s": {3}},
             lambda: b"raw", _BadRepr],
    ids=["object", "set", "nan", "nested-set", "bytes", "bad-repr"],
)
def test_unserialisable_result_still_commits_and_caller_gets_the_object(
    store, second_store, make
):
    value = make()

    @ctrlrun.protect("res", effect="res:{a}", store=store)
    def f(a):
        return value

    out = f("x")
    assert out is value
    rec = second_store.get_effect("res:x")
    assert rec.state == EffectState.COMMITTED
    assert rec.error is None
    assert rec.result is not None
    assert isinstance(rec.result, dict)
    stored = list(rec.result.values())
    assert len(stored) == 1 and isinstance(stored[0], str)
    if not isinstance(value, _BadRepr):
        assert stored == [repr(value)]


@pytest.mark.parametrize("value", [None, 0, "", False, [], {}, 0.0],
                         ids=["None", "zero", "empty-str", "False", "empty-list", "empty-dict",
                              "zero-float"])
def test_falsy_results_commit_and_are_stored(store, second_store, value):
    @ctrlrun.protect("res", effect="res:{a}", store=store)
    def f(a):
        return value

    out = f("y")
    assert out is value or out == value
    rec = second_store.get_effect("res:y")
    assert rec.state == EffectState.COMMITTED
    assert rec.result == value
    assert type(rec.result) is type(value)

    with pytest.raises(DuplicateEffect):
        f("y")


def test_json_result_round_trips(store, second_store):
    value = {"amount": 12.5, "items": [1, "two", None, True], "nested": {"k": "v"}}

    @ctrlrun.protect("res", effect="res:{a}", store=store)
    def f(a):
        return value

    assert f("z") is value
    assert second_store.get_effect("res:z").result == value


# --------------------------------------------------------------------------------------------
# the wrapper
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("effect", ["w:{a}", None], ids=["reserved", "unreserved"])
def test_wraps_metadata_is_kept(store, effect):
    def original(a: str, b: int = 1) -> str:
        """Refund a payment."""
        return a

    wrapped = ctrlrun.protect("meta", effect=effect, store=store)(original)
    assert wrapped.__name__ == "original"
    assert wrapped.__doc__ == "Refund a payment."
    assert wrapped.__wrapped__ is original
    assert wrapped.__qualname__ == original.__qualname__
    assert wrapped.__module__ == original.__module__
    assert wrapped.__annotations__ == original.__annotations__
    assert inspect.signature(wrapped) == inspect.signature(original)
    assert wrapped is not original
    assert wrapped("q") == "q"


class Payer:
    def __init__(self, name):
        self.name = name
        self.paid = []


def _make_payer_class(store):
    class P(Payer):
        @ctrlrun.protect("pay", effect="pay:{invoice}", store=store)
        def pay(self, invoice, amount):
            self.paid.append((invoice, amount))
            return f"{self.name}:{amount}"

    return P


def test_protected_method_binds_self(store, second_store):
    P = _make_payer_class(store)
    a, b = P("a"), P("b")

    assert a.pay("inv1", 5) == "a:5"
    assert a.paid == [("inv1", 5)]

    with pytest.raises(DuplicateEffect) as ei:
        b.pay("inv1", 5)
    assert ei.value.effect_key == "pay:inv1"
    assert b.paid == []

    assert b.pay(invoice="inv2", amount=7) == "b:7"
    assert b.paid == [("inv2", 7)]
    assert sorted(keys(second_store)) == ["pay:inv1", "pay:inv2"]
    assert second_store.get_effect("pay:inv1").result == "a:5"


def test_template_on_self_is_refused_at_call_time(store):
    class Q:
        @ctrlrun.protect("q", effect="q:{self}", store=store)
        def go(self):
            raise AssertionError("must not run")

    with pytest.raises(EffectKeyError) as ei:
        Q().go()
    assert "self" in str(ei.value)
    assert store.list_effects() == []


# --------------------------------------------------------------------------------------------
# idempotency_token
# --------------------------------------------------------------------------------------------


def test_idempotency_token_is_stable_per_attempt_and_changes_on_renewal(store):
    tokens = []
    mode = {"fail": True}

    @ctrlrun.protect("tok", effect="tok:{a}", store=store)
    def f(a):
        t1 = ctrlrun.idempotency_token()
        t2 = ctrlrun.idempotency_token()
        tokens.append((t1, t2))
        if mode["fail"]:
            raise NotExecuted("nothing sent")
        return t1

    with pytest.raises(NotExecuted):
        f("x")
    mode["fail"] = False
    out = f("x")

    (a1, a2), (b1, b2) = tokens
    assert isinstance(a1, str) and a1
    assert a1 == a2
    assert b1 == b2
    assert a1 != b1
    assert out == b1
    assert store.get_effect("tok:x").attempt == 2

    # a different key gives a different token
    assert f("y") not in (a1, b1)

    # outside an executor, and after executors have ended, there is none
    with pytest.raises(InvalidArgument):
        ctrlrun.idempotency_token()


def test_idempotency_token_outside_an_executor_raises():
    with pytest.raises(InvalidArgument):
        ctrlrun.idempotency_token()


def test_idempotency_token_is_reset_after_an_executor_raises(store):
    @ctrlrun.protect("tok", effect="tok:{a}", store=store)
    def f(a):
        ctrlrun.idempotency_token()
        raise ValueError("x")

    with pytest.raises(ValueError):
        f("z")
    with pytest.raises(InvalidArgument):
        ctrlrun.idempotency_token()


# --------------------------------------------------------------------------------------------
# calls that never reach the store
# --------------------------------------------------------------------------------------------


def test_call_with_a_bad_signature_raises_type_error_and_writes_nothing(store):
    calls = []

    @ctrlrun.protect("sig", effect="sig:{a}", store=store)
    def f(a, b=1):
        calls.append(a)

    with pytest.raises(TypeError):
        f("x", bogus=1)
    with pytest.raises(TypeError):
        f()
    with pytest.raises(TypeError):
        f("x", 2, 3)
    assert calls == []
    assert store.list_effects() == []


def test_generator_functions_are_refused_at_decoration(store):
    def gen(a):
        yield a

    async def agen(a):
        yield a

    deco = ctrlrun.protect("gen", effect="g:{a}", store=store)
    with pytest.raises(InvalidArgument):
        deco(gen)
    with pytest.raises(InvalidArgument):
        deco(agen)
    assert store.list_effects() == []


def test_without_effect_the_call_runs_unreserved_every_time(store, tmp_path):
    calls = []

    @ctrlrun.protect("free", store=store)
    def f(a):
        calls.append(a)
        return len(calls)

    assert [f("same"), f("same"), f("same")] == [1, 2, 3]
    assert calls == ["same"] * 3
    assert store.list_effects() == []

    @ctrlrun.protect("free")
    def g(a):
        raise ValueError(a)

    for _ in range(2):  # no reservation, so no ambiguity either
        with pytest.raises(ValueError):
            g("v")
    assert store.list_effects() == []
    assert ctrlrun.default_store().list_effects() == []


def test_store_given_as_a_url(tmp_path):
    path = tmp_path / "by_url.db"

    @ctrlrun.protect("url", effect="u:{a}", store=f"sqlite:///{path}")
    def f(a):
        return a

    assert f("1") == "1"
    with ctrlrun.open_store(f"sqlite:///{path}") as s:
        rec = s.get_effect("u:1")
        assert rec is not None and rec.state == EffectState.COMMITTED


@pytest.mark.parametrize(
    "value",
    [None, 0, -7, 10**40, "", "plain", 'q"uo\\te\nnew\u2028line\U0001f600', True, False, 1.25,
     [1, "a"], {"k": None}],
    ids=repr,
)
def test_the_stored_result_is_the_json_of_the_returned_value(store, value):
    import json

    @ctrlrun.protect("t", effect="json:{n}", store=store)
    def act(n: int):
        return value

    assert act(1) == value
    stored = store.get_effect("json:1").result
    assert stored == json.loads(json.dumps(value))


def test_a_result_too_big_to_print_is_stored_as_unserializable_and_the_call_still_commits(store):
    big = 10**5000  # past Python's int-to-text digit limit

    @ctrlrun.protect("t", effect="big:{n}", store=store)
    def act(n: int):
        return big

    assert act(1) == big
    rec = store.get_effect("big:1")
    assert rec.state is EffectState.COMMITTED
    assert isinstance(rec.result, dict) and "int" in str(rec.result)
