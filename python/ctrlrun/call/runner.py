"""The synchronous driver of a protected call: the steps of :class:`.steps.Call`, in line
(reserve, run the executor in its context, record the outcome)."""

from __future__ import annotations

from typing import Any, Callable

from ctrlrun.call.approval import refusal, wait_for_decision
from ctrlrun.call.heartbeat import Heartbeat
from ctrlrun.call.steps import REFUSALS, Args, Call, Kwargs, through_body
from ctrlrun.errors import ApprovalNeeded
from ctrlrun.notify import hooks as notify


def run(call: Call, fn: Callable[..., Any], args: Args, kwargs: Kwargs, hb: bool = False) -> Any:
    """Reserve ``call``'s key, run ``fn`` (with a heartbeat when ``hb``), record its outcome."""
    store, spec = call.store, call.spec
    try:
        call.reserve()
        needed = False
    except ApprovalNeeded:
        needed = True
    if needed:
        # No grant in force: ask (or find the request that stands), wait if told to, and
        # reserve again once granted. (Outside the except block: the caller's traceback shows
        # the refusal alone.)
        assert spec is not None
        record = call.ask()
        if record.state.value == "pending" and spec.approval_timeout > 0:
            record = wait_for_decision(store, record.request_id, spec.approval_timeout)
        call.granted(record)
        try:
            call.reserve()
        except ApprovalNeeded:  # used by another call meanwhile
            raise refusal(call.ask()) from None
    call.enter()
    beat = Heartbeat(call).start() if hb else None
    try:
        result = fn(*args, **kwargs)
    except BaseException as exc:
        through_body(exc)
        if beat is not None:
            beat.stop()
        try:
            ending = call.raised(exc)
            call.record(ending)
        except REFUSALS as refused:
            raise through_body(call.refused(refused, exc))  # noqa: B904 - refused() chains
        notify.recorded(call, ending)  # effect.ambiguous, when the policy says where to
        raise
    finally:
        call.leave()
    if beat is not None:
        beat.stop()
    call.record(call.returned(result))
    return result
