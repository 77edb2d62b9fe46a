"""The synchronous driver of a protected call: the steps of :class:`._steps.Call`, in line
(reserve, run the executor in its context, record the outcome)."""

from __future__ import annotations

from typing import Any, Callable, Tuple

from ._steps import REFUSALS, Call
from ._store import Store


def run(
    store: Store,
    key: str,
    lease_us: int,
    fn: Callable[..., Any],
    args: Tuple[Any, ...],
    kwargs: dict,
) -> Any:
    call = Call(store, key, lease_us)
    call.reserve()
    call.enter()
    try:
        result = fn(*args, **kwargs)
    except BaseException as exc:
        try:
            call.record(call.raised(exc))
        except REFUSALS as refusal:
            raise call.refused(refusal, exc)
        raise
    finally:
        call.leave()
    call.record(call.returned(result))
    return result
