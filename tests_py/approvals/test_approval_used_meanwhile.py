"""A call that waited for its approval and saw it granted may still lose the grant before its
second reservation: another caller uses the single-use grant first, or the grant's time runs
out. The call is then refused with ``ApprovalRequired`` (a new request to decide), its body never
runs. Sync and async executors, both backends.

The window is hit exactly, without sleeps: the store's clock is read once for the second
reservation's request, and that read is where the other caller (or the passing time) acts."""

from __future__ import annotations

import sys
import threading
import time
from datetime import timedelta
from typing import Callable, Optional

import pytest

import ctrlrun
from ctrlrun import ApprovalRequired, EffectState, NotExecuted
from ctrlrun.store.approvals import ApprovalState
from ctrlrun.testing import MovableClock

TTL = 600


class ActsAtTheReservation(MovableClock):
    """A store clock that, once armed, runs ``act`` the first time it is read to build a
    reservation request (``Call.reserve_request`` reads it through ``Store._now_us``), then
    reads as usual."""

    def __init__(self) -> None:
        super().__init__()
        self.act: Optional[Callable[[], None]] = None

    def __call__(self):
        act = self.act
        if act is not None and sys._getframe(2).f_code.co_name == "reserve_request":
            self.act = None
            act()
        return self.now


def approver(store, clock, act: Callable[[], None]) -> threading.Thread:
    """A person who grants the first pending request, arming ``act`` for the call's second
    reservation."""

    def decide() -> None:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            pending = store.list_approvals(state="pending")
            if pending:
                clock.act = act
                store.grant_approval(pending[0].request_id, by="ops:alice")
                return
            time.sleep(0.01)

    t = threading.Thread(target=decide, daemon=True)
    t.start()
    return t


@pytest.mark.parametrize("lost_by", ["used_by_another_call", "lapsed"])
def test_a_grant_lost_before_the_second_reservation_asks_again(mode, store_url, lost_by):
    clock = ActsAtTheReservation()
    runs: list = []
    store = ctrlrun.open_store(store_url, clock=clock)
    other = ctrlrun.open_store(store_url)  # another caller, on its own connection and clock
    try:

        @mode.protect(
            "pay.refund",
            effect="refund:{payment_id}",
            store=store,
            decision="approve",
            approval_ttl=timedelta(seconds=TTL),
            approval_timeout=30,
        )
        def refund(payment_id: str, amount: int) -> str:
            runs.append(("waiting call", payment_id))
            return "refunded"

        @ctrlrun.protect(
            "pay.refund",
            effect="refund:{payment_id}",
            store=other,
            decision="approve",
            approval_ttl=timedelta(seconds=TTL),
        )
        def refund_elsewhere(payment_id: str, amount: int) -> str:
            runs.append(("other call", payment_id))
            # provably not sent: the key stays open for a retry, the grant is used all the same
            raise NotExecuted("the provider declined the request before sending it")

        def act() -> None:
            if lost_by == "lapsed":
                clock.advance(TTL + 1)
            else:
                with pytest.raises(NotExecuted):
                    refund_elsewhere("pi_1", 500)

        person = approver(store, clock, act)
        with pytest.raises(ApprovalRequired) as info:
            mode.call(refund, "pi_1", 500)
        person.join(5)
        assert clock.act is None  # the window was hit
        assert ("waiting call", "pi_1") not in runs
        # a new request stands for the approver to decide; the first one is used or expired
        fresh = store.get_approval(info.value.request_id)
        assert fresh is not None and fresh.state is ApprovalState.PENDING
        first = [a for a in store.list_approvals() if a.request_id != fresh.request_id]
        want = ApprovalState.USED if lost_by == "used_by_another_call" else ApprovalState.EXPIRED
        assert [a.state for a in first] == [want]
        if lost_by == "used_by_another_call":
            assert runs == [("other call", "pi_1")]
            assert store.get_effect("refund:pi_1").state is EffectState.FAILED
        else:
            assert runs == [] and store.get_effect("refund:pi_1") is None
    finally:
        other.close()
        store.close()
