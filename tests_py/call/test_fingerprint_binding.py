"""The ``Fingerprint`` of a protected call's arguments (``ctrlrun.call.fingerprint``): its shape and
stable digest, what exclusion binds and shows, and ``differing_fields``. The canonical form of
each value: test_fingerprint.py."""

from __future__ import annotations

import hashlib
from decimal import Decimal

import pytest

from ctrlrun.call.fingerprint import Fingerprint, differing_fields, digest_text, fingerprint
from tests_py.support.digests import DIGEST

# --- fingerprint -----------------------------------------------------------------------------


def test_fingerprint_shape_and_stable_digest() -> None:
    fp = fingerprint({"payment_id": "pi_1", "amount": 500})
    assert isinstance(fp, Fingerprint)
    text = '{"amount":500,"payment_id":"pi_1"}'
    expected = "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()
    assert fp.digest == expected
    # the same value, as a literal, so a change to the canonical form cannot go unnoticed
    assert fp.digest == "sha256:19abd39052477232765e9f88444260caf22d211bfe08f5827637635c7709c1e6"
    assert fp.fields == {
        "payment_id": "sha256:" + hashlib.sha256(b'"pi_1"').hexdigest(),
        "amount": "sha256:" + hashlib.sha256(b"500").hexdigest(),
    }
    assert fp.arguments == {"payment_id": "pi_1", "amount": 500}
    assert fp.left_out == ()
    for d in [fp.digest, *fp.fields.values()]:
        assert DIGEST.match(d), d


def test_fingerprint_is_frozen() -> None:
    fp = fingerprint({"a": 1})
    with pytest.raises(AttributeError):
        fp.digest = "x"  # type: ignore[misc]
    assert not hasattr(fp, "__dict__")


def test_no_arguments_still_have_a_digest() -> None:
    fp = fingerprint({})
    assert fp.digest == "sha256:" + hashlib.sha256(b"{}").hexdigest()
    assert fp.fields == {} and fp.arguments == {} and fp.left_out == ()


def test_argument_order_does_not_matter() -> None:
    assert fingerprint({"a": 1, "b": 2}).digest == fingerprint({"b": 2, "a": 1}).digest


def test_varargs_and_kwargs_arrive_under_their_parameter_names() -> None:
    fp = fingerprint({"args": (1, 2), "kwargs": {"k": "v"}})
    assert fp.arguments == {"args": [1, 2], "kwargs": {"k": "v"}}
    assert fp.digest == digest_text('{"args":[1,2],"kwargs":{"k":"v"}}')


def test_exclude_removes_argument_from_the_binding_but_not_from_what_is_shown() -> None:
    fp = fingerprint(
        {"payment_id": "pi_1", "amount": 500, "request_id": "r-9"}, exclude=["request_id"]
    )
    assert fp.digest == fingerprint({"payment_id": "pi_1", "amount": 500}).digest
    assert "request_id" not in fp.fields
    assert fp.arguments["request_id"] == "r-9" and fp.not_bound == ("request_id",)
    assert fp.left_out == ()


def test_exclude_of_unfingerprintable_argument_shows_its_type() -> None:
    fp = fingerprint({"a": 1, "client": object()}, exclude=("client",))
    assert fp.left_out == ()
    assert fp.arguments == {"a": 1, "client": {"$unfingerprinted": "builtins.object"}}
    assert fp.not_bound == ("client",)


def test_exclude_of_absent_name_is_harmless() -> None:
    assert fingerprint({"a": 1}, exclude={"zzz"}).digest == fingerprint({"a": 1}).digest


def test_arguments_are_detached_from_the_callers_values() -> None:
    tags = ["a"]
    fp = fingerprint({"tags": tags})
    tags.append("b")
    assert fp.arguments == {"tags": ["a"]}


def test_digest_differs_when_any_argument_differs() -> None:
    base = fingerprint({"payment_id": "pi_1", "amount": 500})
    assert base.digest != fingerprint({"payment_id": "pi_1", "amount": 501}).digest
    assert base.digest != fingerprint({"payment_id": "pi_1", "amount": 500, "x": None}).digest


# --- differing_fields ------------------------------------------------------------------------


def test_differing_fields_names_changed_added_and_removed() -> None:
    stored = fingerprint({"payment_id": "pi_1", "amount": 500, "note": "a", "gone": 1}).fields
    now = fingerprint({"payment_id": "pi_1", "amount": 900, "note": "a", "added": 2}).fields
    assert differing_fields(stored, now) == ["added", "amount", "gone"]
    assert differing_fields(now, stored) == ["added", "amount", "gone"]


def test_differing_fields_of_equal_fingerprints_is_empty() -> None:
    fields = fingerprint({"a": [1], "b": Decimal("1.0")}).fields
    assert differing_fields(fields, fingerprint({"b": Decimal("1"), "a": (1,)}).fields) == []
    assert differing_fields({}, {}) == []


def test_differing_fields_never_returns_values() -> None:
    stored = fingerprint({"card": "4242424242424242"}).fields
    now = fingerprint({"card": "4000000000000002"}).fields
    assert differing_fields(stored, now) == ["card"]
