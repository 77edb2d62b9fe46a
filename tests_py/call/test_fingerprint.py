"""The canonical form of a protected call's arguments and their digests (``ctrlrun.call.fingerprint``):
every supported type's form, equal and different values, unsupported values left out, and
hostile values (cycles, deep nesting, raising properties) refused without escaping. The
``Fingerprint`` of a call and ``differing_fields``: test_fingerprint_binding.py."""

from __future__ import annotations

import dataclasses
import datetime
import enum
import hashlib
import uuid
from decimal import Decimal
from typing import Any, Dict

import pytest

from ctrlrun.call.fingerprint import (
    Unfingerprintable,
    canonical,
    canonical_json,
    digest_text,
    fingerprint,
)
from tests_py.support.digests import DIGEST


class Color(enum.Enum):
    RED = 1


class Size(enum.Enum):
    SMALL = 1


class Level(enum.IntEnum):
    LOW = 1


class Mode(str, enum.Enum):
    FAST = "fast"


class MyInt(int):
    pass


class MyStr(str):
    def __str__(self) -> str:
        return "overridden"


@dataclasses.dataclass
class Point:
    x: int
    y: int


@dataclasses.dataclass
class Vector:
    x: int
    y: int


@dataclasses.dataclass
class Order:
    item: str
    tags: list


class FakeModel:
    """Quacks like a pydantic v2 model without importing pydantic."""

    model_fields = {"name": None, "qty": None}

    def __init__(self, name: str, qty: Any) -> None:
        self.name = name
        self.qty = qty

    def model_dump(self, mode: str = "python") -> Dict[str, Any]:
        assert mode == "python"
        return {"name": self.name, "qty": self.qty}


class BrokenModel(FakeModel):
    def model_dump(self, mode: str = "python") -> Dict[str, Any]:
        raise RuntimeError("secret-value-in-message")


def digest_of(value: Any) -> str:
    return digest_text(canonical_json(value))


# --- the canonical form of each supported type ---------------------------------------------


@pytest.mark.parametrize(
    "value, expected",
    [
        (None, None),
        (True, True),
        (False, False),
        ("pi_1", "pi_1"),
        ("", ""),
        (500, 500),
        (-3, -3),
        (10**30, 10**30),
        (1.5, 1.5),
        (-0.0, 0.0),
        (b"\x00\xffab", {"$bytes": "AP9hYg=="}),
        (bytearray(b"hi"), {"$bytes": "aGk="}),
        (
            uuid.UUID("12345678-1234-5678-1234-567812345678"),
            {"$uuid": "12345678-1234-5678-1234-567812345678"},
        ),
        (Decimal("12.50"), {"$decimal": "12.5"}),
        (Decimal("100"), {"$decimal": "100"}),
        (Decimal("1E+2"), {"$decimal": "100"}),
        (Decimal("-0.00"), {"$decimal": "0"}),
        (Decimal("0.0010"), {"$decimal": "0.001"}),
        (Decimal("-7.250"), {"$decimal": "-7.25"}),
        (datetime.datetime(2024, 5, 1, 12, 30), {"$datetime": "2024-05-01T12:30:00"}),
        (
            datetime.datetime(2024, 5, 1, 12, 30, tzinfo=datetime.timezone.utc),
            {"$datetime": "2024-05-01T12:30:00+00:00"},
        ),
        (datetime.date(2024, 5, 1), {"$date": "2024-05-01"}),
        (Color.RED, {"$enum": f"{__name__}.Color.RED"}),
        (Level.LOW, {"$enum": f"{__name__}.Level.LOW"}),
        (Mode.FAST, {"$enum": f"{__name__}.Mode.FAST"}),
        ([1, "a", None], [1, "a", None]),
        ((1, (2, 3)), [1, [2, 3]]),
        ({"b": 1, "a": [True]}, {"b": 1, "a": [True]}),
        ({}, {}),
        ({"$decimal": "1", "$$x": 2, "a$": 3}, {"$$decimal": "1", "$$$x": 2, "a$": 3}),
    ],
)
def test_canonical_form_of_supported_types(value: Any, expected: Any) -> None:
    assert canonical(value) == expected
    assert type(canonical(value)) is type(expected)


def test_subclasses_of_int_and_str_become_plain() -> None:
    assert type(canonical(MyInt(5))) is int and canonical(MyInt(5)) == 5
    assert type(canonical(MyStr("abc"))) is str and canonical(MyStr("abc")) == "abc"
    assert canonical({MyStr("k"): 1}) == {"k": 1}


def test_dataclass_form() -> None:
    assert canonical(Order("book", [Point(1, 2)])) == {
        "$dataclass": f"{__name__}.Order",
        "fields": {
            "item": "book",
            "tags": [{"$dataclass": f"{__name__}.Point", "fields": {"x": 1, "y": 2}}],
        },
    }


def test_duck_typed_model_form() -> None:
    model = FakeModel("widget", Decimal("2.0"))
    assert canonical(model) == {
        "$model": f"{__name__}.FakeModel",
        "fields": {"name": "widget", "qty": {"$decimal": "2"}},
    }
    with pytest.raises(Unfingerprintable):
        canonical(FakeModel)  # the class itself is not a model instance
    with pytest.raises(Unfingerprintable):
        canonical(Point)  # nor is a dataclass type


def test_canonical_json_is_compact_sorted_and_keeps_non_ascii() -> None:
    assert canonical_json({"b": 1, "a": "é", "c": [1.0, None]}) == '{"a":"é","b":1,"c":[1.0,null]}'


def test_decimal_keeps_precision_beyond_the_default_context() -> None:
    long_a = Decimal("1.000000000000000000000000000000000001")
    assert canonical(long_a) == {"$decimal": "1.000000000000000000000000000000000001"}
    assert digest_of(long_a) != digest_of(Decimal("1"))


def test_decimal_with_huge_exponent_is_written_with_an_exponent() -> None:
    assert canonical(Decimal("1E+100")) == {"$decimal": "1" + "0" * 100}
    assert canonical(Decimal("1E+1000")) == {"$decimal": "1E+1000"}
    assert canonical(Decimal("10E+999")) == {"$decimal": "1E+1000"}
    assert canonical(Decimal("-25E-1000")) == {"$decimal": "-25E-1000"}
    assert canonical(Decimal("1E-50")) == {"$decimal": "0." + "0" * 49 + "1"}


# --- equal things, equal digests -------------------------------------------------------------


@pytest.mark.parametrize(
    "a, b",
    [
        ([1, 2, 3], (1, 2, 3)),
        ({"a": 1, "b": 2}, {"b": 2, "a": 1}),
        (Decimal("1.0"), Decimal("1.00")),
        (Decimal("1"), Decimal("1.00")),
        (Decimal("100"), Decimal("1E+2")),
        (Decimal("0"), Decimal("-0.000")),
        (MyInt(7), 7),
        (MyStr("x"), "x"),
        (0.0, -0.0),
        ({"k": [Point(1, 2)]}, {"k": (Point(1, 2),)}),
    ],
)
def test_equal_values_give_equal_digests(a: Any, b: Any) -> None:
    assert digest_of(a) == digest_of(b)


@pytest.mark.parametrize(
    "a, b",
    [
        (True, 1),
        (False, 0),
        (1, 1.0),
        ("1", 1),
        (None, "null"),
        (b"ab", "ab"),
        (Decimal("1"), 1),
        (Decimal("1.5"), "1.5"),
        (
            datetime.datetime(2024, 5, 1, 12, 0),
            datetime.datetime(2024, 5, 1, 12, 0, tzinfo=datetime.timezone.utc),
        ),
        (datetime.date(2024, 5, 1), datetime.datetime(2024, 5, 1)),
        (Color.RED, Size.SMALL),
        (Level.LOW, 1),
        (Mode.FAST, "fast"),
        (Point(1, 2), Vector(1, 2)),
        (Point(1, 2), {"x": 1, "y": 2}),
        (Decimal("1"), {"$decimal": "1"}),
        (uuid.UUID(int=0), {"$uuid": str(uuid.UUID(int=0))}),
        (b"ab", {"$bytes": "YWI="}),
        (Point(1, 2), {"$dataclass": f"{__name__}.Point", "fields": {"x": 1, "y": 2}}),
        ({"$x": 1}, {"$$x": 1}),
        ([1, 2], [2, 1]),
        ("\ud800", "\ufffd"),
        ("\ud800\udc00", "\U00010000"),
    ],
)
def test_different_values_give_different_digests(a: Any, b: Any) -> None:
    assert digest_of(a) != digest_of(b)


# --- unsupported values ----------------------------------------------------------------------


def test_non_finite_numbers_are_unfingerprintable() -> None:
    for value in (
        float("nan"),
        float("inf"),
        float("-inf"),
        Decimal("NaN"),
        Decimal("sNaN"),
        Decimal("Infinity"),
        Decimal("-Infinity"),
    ):
        with pytest.raises(Unfingerprintable):
            canonical(value)


@pytest.mark.parametrize(
    "value, type_name",
    [
        ({1, 2}, "builtins.set"),
        (frozenset(), "builtins.frozenset"),
        (object(), "builtins.object"),
        (lambda: 1, "builtins.function"),
        (float("nan"), "builtins.float"),
        (float("inf"), "builtins.float"),
        (Decimal("NaN"), "decimal.Decimal"),
        ({1: "a"}, "builtins.dict"),
        ({Mode.FAST: "a"}, "builtins.dict"),
        ([1, 2, {3}], "builtins.list"),
        ({"a": [Point(1, object())]}, "builtins.dict"),
        (datetime.time(12, 0), "datetime.time"),
        (datetime.timedelta(1), "datetime.timedelta"),
        (memoryview(b"x"), "builtins.memoryview"),
    ],
)
def test_unsupported_argument_is_left_out(value: Any, type_name: str) -> None:
    with pytest.raises(Unfingerprintable):
        canonical(value)
    fp = fingerprint({"payment_id": "pi_1", "bad": value})
    assert fp.left_out == ("bad",)
    assert set(fp.fields) == {"payment_id"}
    assert fp.arguments == {"payment_id": "pi_1", "bad": {"$unfingerprinted": type_name}}
    assert fp.digest == fingerprint({"payment_id": "pi_1"}).digest


def test_left_out_is_sorted() -> None:
    fp = fingerprint({"z": set(), "a": object(), "m": 1})
    assert fp.left_out == ("a", "z")
    assert list(fp.fields) == ["m"]


def test_huge_int_beyond_the_int_to_text_limit_is_left_out() -> None:
    huge = 10**5000
    try:
        str(huge)
    except ValueError:  # the interpreter's int-to-text limit applies (3.11+ default)
        with pytest.raises(Unfingerprintable):
            canonical_json(huge)
        assert fingerprint({"n": huge}).left_out == ("n",)
    else:
        assert fingerprint({"n": huge}).left_out == ()


# --- hostile values --------------------------------------------------------------------------


def test_cyclic_list_is_left_out() -> None:
    cyclic: list = [1]
    cyclic.append(cyclic)
    with pytest.raises(Unfingerprintable, match="cyclic"):
        canonical(cyclic)
    assert fingerprint({"c": cyclic}).left_out == ("c",)


def test_cyclic_dict_is_left_out() -> None:
    cyclic: dict = {}
    cyclic["self"] = [cyclic]
    assert fingerprint({"c": cyclic}).left_out == ("c",)


def test_shared_but_acyclic_value_is_fine() -> None:
    shared = [1, 2]
    assert canonical([shared, shared]) == [[1, 2], [1, 2]]


def test_deeply_nested_list_is_left_out_without_recursion_error() -> None:
    deep: list = []
    for _ in range(10_000):
        deep = [deep]
    with pytest.raises(Unfingerprintable, match="deeper"):
        canonical(deep)
    assert fingerprint({"d": deep}).left_out == ("d",)


def test_nesting_within_the_limit_is_fine() -> None:
    nested: list = []
    for _ in range(50):
        nested = [nested]
    assert fingerprint({"d": nested}).left_out == ()


def test_exponential_shared_structure_is_refused() -> None:
    node: list = [0]
    for _ in range(60):  # 2**60 leaves if walked naively
        node = [node, node]
    with pytest.raises(Unfingerprintable):
        canonical(node)


def test_dataclass_with_raising_property_is_left_out() -> None:
    @dataclasses.dataclass
    class Lazy:
        value: int

    lazy = Lazy(1)
    del lazy.value  # reading the field now raises AttributeError

    class Computed(Point):  # field "x" of Point, read through a property that raises
        @property  # type: ignore[override]
        def x(self) -> int:
            raise RuntimeError("secret")

        @x.setter
        def x(self, value: int) -> None:
            self._x = value

    for value in (lazy, Computed(1, 2)):
        with pytest.raises(Unfingerprintable) as info:
            canonical(value)
        assert "secret" not in str(info.value)
        assert fingerprint({"v": value}).left_out == ("v",)


def test_model_dump_that_raises_is_left_out() -> None:
    with pytest.raises(Unfingerprintable) as info:
        canonical(BrokenModel("a", 1))
    assert "secret-value-in-message" not in str(info.value)
    fp = fingerprint({"m": BrokenModel("a", 1)})
    assert fp.left_out == ("m",)
    assert fp.arguments == {"m": {"$unfingerprinted": f"{__name__}.BrokenModel"}}


def test_model_dump_returning_unsupported_value_is_left_out() -> None:
    assert fingerprint({"m": FakeModel("a", {1, 2})}).left_out == ("m",)


def test_keyboard_interrupt_is_not_swallowed() -> None:
    class Interrupting(FakeModel):
        def model_dump(self, mode: str = "python") -> Dict[str, Any]:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        canonical(Interrupting("a", 1))


def test_lone_surrogates_do_not_crash() -> None:
    fp = fingerprint({"s": "\ud800", "k": {"\udfff": "x"}})
    assert fp.left_out == ()
    assert DIGEST.match(fp.fields["s"])
    assert canonical_json("\ud800") == '"\ud800"'
    assert digest_text("\ud800") == "sha256:" + hashlib.sha256(b"\xed\xa0\x80").hexdigest()
