"""What a committed call stores as its result: JSON as it is, dataclasses and pydantic models as
their JSON form, other values through ``result_encoder``, the rest as a marked repr. The
caller always gets the function's own return value. Both backends, sync and async."""

from __future__ import annotations

import dataclasses
import decimal
from typing import Any

import pydantic
import pytest

import ctrlrun
from ctrlrun import InvalidArgument


@dataclasses.dataclass
class Line:
    sku: str
    qty: int


@dataclasses.dataclass
class Order:
    order_id: str
    lines: list


class Receipt(pydantic.BaseModel):
    receipt_id: str
    total: decimal.Decimal


def test_dataclasses_and_pydantic_models_are_stored_as_their_json_form(mode, store):
    @mode.protect("shop.order", effect="order:{n}", store=store)
    def place(n: int) -> Any:
        if n == 1:
            return Order("o1", [Line("a", 2)])
        return {"receipt": Receipt(receipt_id="r2", total=decimal.Decimal("9.50"))}

    returned = mode.call(place, 1)
    assert isinstance(returned, Order)  # the caller gets the object itself
    assert store.get_effect("order:1").result == {
        "order_id": "o1",
        "lines": [{"sku": "a", "qty": 2}],
    }
    mode.call(place, 2)
    assert store.get_effect("order:2").result == {"receipt": {"receipt_id": "r2", "total": "9.50"}}


def test_a_result_encoder_stores_what_is_not_json_and_the_rest_is_a_marked_repr(mode, store):
    @mode.protect("pay.total", effect="total:{n}", store=store, result_encoder=str)
    def total(n: int) -> Any:
        return {"amount": decimal.Decimal("12.30"), "n": n}

    @mode.protect("pay.raw", effect="raw:{n}", store=store)
    def raw(n: int) -> Any:
        return decimal.Decimal("1.5")

    assert mode.call(total, 1) == {"amount": decimal.Decimal("12.30"), "n": 1}
    assert store.get_effect("total:1").result == {"amount": "12.30", "n": 1}
    mode.call(raw, 1)
    assert store.get_effect("raw:1").result == {"__ctrlrun_unserializable__": "Decimal('1.5')"}


def test_a_result_encoder_must_be_callable():
    with pytest.raises(InvalidArgument, match="result_encoder must be callable"):
        ctrlrun.protect("a.b", effect="k:{x}", result_encoder="str")  # type: ignore[arg-type]
