"""``@ctrlrun.protect``: binding the call and rendering the effect key (docs/spec.md §5, §7), for
``def`` and ``async def`` executors alike (the ``mode`` fixture, tests_py/support/modes.py)."""

from __future__ import annotations

import enum
import uuid

import pytest

import ctrlrun
from ctrlrun import DuplicateEffect, EffectKeyError, EffectState, InvalidArgument


def keys(store):
    return [r.effect_key for r in store.list_effects()]


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
def test_binding_gives_the_expected_key(mode, store, args, kwargs, expected_key, expected_body):
    seen = []

    @mode.protect("bind", effect="k/{a}/{b}/{c}", store=store)
    def f(a, /, b, *, c="x"):
        seen.append((a, b, c))
        return [a, b, c]

    assert mode.call(f, *args, **kwargs) == list(expected_body)
    assert seen == [expected_body]
    assert keys(store) == [expected_key]
    rec = store.get_effect(expected_key)
    assert rec.state == EffectState.COMMITTED
    assert rec.result == list(expected_body)


def test_binding_by_keyword_and_by_position_name_the_same_key(mode, store):
    calls = []

    @mode.protect("bind", effect="inv:{customer}:{invoice}", store=store)
    def bill(customer, invoice, note="none"):
        calls.append(note)
        return note

    assert mode.call(bill, "c1", "i1") == "none"
    with pytest.raises(DuplicateEffect) as ei:
        mode.call(bill, invoice="i1", customer="c1", note="other")
    assert ei.value.effect_key == "inv:c1:i1"
    assert calls == ["none"]
    assert keys(store) == ["inv:c1:i1"]


def test_default_value_fills_a_placeholder(mode, store):
    @mode.protect("ship", effect="ship:{region}:{item}", store=store)
    def ship(item, region="eu"):
        return region

    assert mode.call(ship, "x") == "eu"
    assert mode.call(ship, "x", "us") == "us"
    assert mode.call(ship, "y", region="ap") == "ap"
    assert sorted(keys(store)) == ["ship:ap:y", "ship:eu:x", "ship:us:x"]


def test_keyword_only_placeholder(mode, store):
    calls = []

    @mode.protect("kw", effect="kw:{order}:{mode}", store=store)
    def f(order, *, mode):
        calls.append((order, mode))
        return mode

    assert mode.call(f, "o", mode="fast") == "fast"
    with pytest.raises(DuplicateEffect):
        mode.call(f, mode="fast", order="o")
    with pytest.raises(TypeError):
        mode.call(f, "o", "fast")  # keyword-only given by position: refused before anything
    assert calls == [("o", "fast")]
    assert keys(store) == ["kw:o:fast"]


def test_positional_only_passed_by_keyword_is_a_type_error_and_writes_nothing(mode, store):
    calls = []

    @mode.protect("bind", effect="k/{a}", store=store)
    def f(a, /):
        calls.append(a)

    with pytest.raises(TypeError):
        mode.call(f, a="1")
    assert calls == []
    assert store.list_effects() == []

    mode.call(f, "1")  # by position it binds
    assert calls == ["1"]
    assert keys(store) == ["k/1"]


def test_call_with_a_bad_signature_raises_type_error_and_writes_nothing(mode, store):
    calls = []

    @mode.protect("sig", effect="sig:{a}", store=store)
    def f(a, b=1):
        calls.append(a)

    with pytest.raises(TypeError):
        mode.call(f, "x", bogus=1)
    with pytest.raises(TypeError):
        mode.call(f)
    with pytest.raises(TypeError):
        mode.call(f, "x", 2, 3)
    assert calls == []
    assert store.list_effects() == []


def test_repeated_placeholder_and_literal_template(mode, store):
    @mode.protect("rep", effect="{a}-{a}", store=store)
    def rep(a):
        return a

    mode.call(rep, "z")
    assert keys(store) == ["z-z"]

    calls = []

    @mode.protect("lit", effect="maintenance:nightly", store=store)
    def nightly(day):
        calls.append(day)
        return day

    assert mode.call(nightly, "mon") == "mon"
    with pytest.raises(DuplicateEffect) as ei:
        mode.call(nightly, "tue")  # a template without placeholders is one literal key
    assert ei.value.effect_key == "maintenance:nightly"
    assert calls == ["mon"]


def test_keys_are_compared_byte_for_byte(mode, store):
    calls = []

    @mode.protect("k", effect="k:{a}", store=store)
    def f(a):
        calls.append(a)
        return a

    for v in ["A", "a", " a", "a ", "é", "e\u0301"]:  # the last two are NFC/NFD of one text
        mode.call(f, v)
    assert len(calls) == 6
    assert sorted(keys(store)) == sorted(["k:A", "k:a", "k: a", "k:a ", "k:é", "k:e\u0301"])


def _with_var_positional(a, *rest):
    pass


def _with_var_keyword(a, **extra):
    pass


def _with_both(a, *rest, **extra):
    pass


@pytest.mark.parametrize("fn", [_with_var_positional, _with_var_keyword, _with_both])
def test_star_args_and_star_kwargs_are_refused_at_decoration(mode, store, fn):
    deco = ctrlrun.protect("star", effect="k:{a}", store=store)
    with pytest.raises(InvalidArgument) as ei:
        deco(mode.executor(fn))
    assert "*" in str(ei.value)
    assert store.list_effects() == []


def test_placeholder_naming_no_parameter_is_refused_at_decoration(mode, store):
    calls = []

    def pay(invoice):
        calls.append(invoice)

    deco = ctrlrun.protect("pay", effect="pay:{invoice_id}", store=store)
    with pytest.raises(EffectKeyError) as ei:
        deco(mode.executor(pay))
    assert "invoice_id" in str(ei.value)
    assert calls == []
    assert store.list_effects() == []


# --------------------------------------------------------------------------------------------
# rendering values (docs/spec.md §7)
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
    ids=[
        "str",
        "unicode",
        "int",
        "zero",
        "negative",
        "bigint",
        "uuid",
        "uuid-upper",
        "str-enum",
        "int-enum",
        "plain-enum-int",
        "plain-enum-str",
    ],
)
def test_accepted_values_render_as_spec_says(mode, store, value, rendered):
    seen = []

    @mode.protect("render", effect="k:{v}", store=store)
    def f(v):
        seen.append(v)
        return "ok"

    assert mode.call(f, value) == "ok"
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
    ids=[
        "None",
        "empty-str",
        "True",
        "False",
        "float",
        "float-integral",
        "list",
        "dict",
        "tuple",
        "bytes",
        "object",
        "enum-float",
        "enum-empty",
        "enum-tuple",
        "enum-none",
        "enum-bool",
    ],
)
def test_refused_values_raise_effect_key_error_before_anything_happens(
    mode, store, value, type_name
):
    calls = []

    @mode.protect("render", effect="k:{order_ref}", store=store)
    def f(order_ref):
        calls.append(order_ref)
        return "ran"

    with pytest.raises(EffectKeyError) as ei:
        mode.call(f, value)
    msg = str(ei.value)
    assert "order_ref" in msg
    if type_name is not None:
        assert type_name in msg
    assert calls == []
    assert store.list_effects() == []


def test_executor_mutating_its_arguments_does_not_move_the_key(mode, store, second_store):
    order = uuid.UUID("00000000-0000-4000-8000-000000000abc")
    original = str(order)
    lines = ["a"]
    meta = {"n": 1}

    @mode.protect("ship", effect="ship:{order_id}:{customer}", store=store)
    def ship(order_id, customer, lines, meta):
        lines.append("added")
        meta["n"] = 2
        meta["customer"] = "someone-else"
        # rewrite the UUID in place (UUID blocks setattr, object.__setattr__ does not)
        object.__setattr__(order_id, "int", 0xFFFF)
        return len(lines)

    assert mode.call(ship, order, "c1", lines, meta) == 2
    assert str(order) != original  # the argument really moved
    assert keys(second_store) == [f"ship:{original}:c1"]
    rec = second_store.get_effect(f"ship:{original}:c1")
    assert rec.state == EffectState.COMMITTED
    assert rec.result == 2

    # the same consequence, proposed again with the original values: refused
    with pytest.raises(DuplicateEffect) as ei:
        mode.call(ship, uuid.UUID(original), "c1", ["a"], {"n": 1})
    assert ei.value.effect_key == f"ship:{original}:c1"
    assert lines == ["a", "added"]


def test_the_fast_binding_agrees_with_signature_bind_on_every_call_shape():
    """KeyBinder binds well-formed calls without inspect.Signature.bind (it costs more than the
    rest of the binding); every call, well-formed or not, must bind exactly as bind does."""
    import inspect
    import itertools

    from ctrlrun import _core
    from ctrlrun.call.binding import KeyBinder

    def f1(a, b, /, c, d=4, *, e, g=7): ...
    def f2(a, b=2): ...
    def f3(*, a, b=2): ...
    def f4(a, /): ...

    shapes = [(), (1,), (1, 2), (1, 2, 3), (1, 2, 3, 4), (1, 2, 3, 4, 5)]
    kws = [
        {},
        {"a": 1},
        {"b": 2},
        {"c": 3},
        {"e": 5},
        {"c": 3, "e": 5},
        {"d": 4, "e": 5, "g": 6},
        {"zz": 1},
        {"a": 1, "b": 2},
        {"e": 5, "c": 3, "d": 9},
    ]
    for fn in (f1, f2, f3, f4):
        binder = KeyBinder(_core.Template("k:{a}"), fn, "x")
        sig = inspect.signature(fn)
        for args, kwargs in itertools.product(shapes, kws):
            try:
                want = dict(sig.bind(*args, **kwargs).arguments)
            except TypeError as exc:
                with pytest.raises(TypeError) as got:
                    binder._bind(args, dict(kwargs))
                assert str(got.value) == str(exc), (fn.__name__, args, kwargs)
                continue
            assert dict(binder._bind(args, dict(kwargs))) == want, (fn.__name__, args, kwargs)
