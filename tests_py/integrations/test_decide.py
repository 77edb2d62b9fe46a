"""The one rule by which every integration records a decision made through its framework
(``ctrlrun.integrations._common.decide``): grant or deny a pending request; a decision made
meanwhile (or an expiry) stands and is returned; a decision the store refuses while the request
is still pending (a name it cannot keep, the asker granting their own request) is raised."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest

import ctrlrun
from ctrlrun.errors import InvalidArgument
from ctrlrun.integrations._common import adecide, decide, protected
from ctrlrun.store.approvals import ApprovalRecord, ApprovalState
from ctrlrun.testing import MovableClock


def pending(store, requested_by=None, payment_id="pi_1") -> ApprovalRecord:
    """A request for ``refund(payment_id)``, written pending."""

    @ctrlrun.protect(
        "r",
        effect="refund:{payment_id}",
        store=store,
        decision="approve",
        requested_by=requested_by,
        approval_ttl=timedelta(minutes=10),
    )
    def refund(payment_id: str) -> str:
        return "ok"

    about = protected(refund)
    assert about is not None
    record = about.approval(payment_id)
    assert record is not None and record.state is ApprovalState.PENDING
    return record


@pytest.mark.parametrize("grant", [True, False])
def test_a_pending_request_is_decided(store, grant):
    record = pending(store)
    now = decide(store, record, grant, "ops:alice", "checked")
    assert now is not None and now.decided_by == "ops:alice" and now.note == "checked"
    assert now.state is (ApprovalState.GRANTED if grant else ApprovalState.DENIED)
    assert store.get_approval(record.request_id) == now


@pytest.mark.parametrize("by_id", [False, True])
def test_a_decision_made_meanwhile_stands(store, by_id):
    record = pending(store)  # read pending; a person denies it before the framework's grant
    store.deny_approval(record.request_id, by="ops:bob", note="no")
    now = decide(store, record.request_id if by_id else record, True, "ops:alice", None)
    assert now is not None and now.state is ApprovalState.DENIED and now.decided_by == "ops:bob"
    assert store.get_approval(record.request_id) == now


def test_a_request_read_pending_and_decided_meanwhile_is_returned_as_it_stands(store):
    record = pending(store)
    granted = store.grant_approval(record.request_id, by="ops:bob")
    now = decide(store, record, False, "ops:alice", None)  # the stale record says pending
    assert now == granted


def test_a_request_expired_meanwhile_stands(store_url):
    clock = MovableClock()
    store = ctrlrun.open_store(store_url, clock=clock)
    try:
        record = pending(store)
        clock.advance(timedelta(minutes=11))
        now = decide(store, record, True, "ops:alice", None)
        assert now is not None and now.state is ApprovalState.EXPIRED and now.decided_by is None
    finally:
        store.close()


def test_a_decision_the_store_refuses_while_pending_is_raised(store):
    record = pending(store, requested_by="agent:refunds")
    with pytest.raises(InvalidArgument, match="cannot grant it"):
        decide(store, record, True, "agent:refunds", None)  # the asker granting their own
    with pytest.raises(InvalidArgument):
        decide(store, record, False, "ops:\nalice", None)  # a name no store keeps
    assert store.get_approval(record.request_id).state is ApprovalState.PENDING  # type: ignore[union-attr]


def test_no_request_is_none(store):
    assert decide(store, None, True, "ops:alice", None) is None
    assert decide(store, "apr_" + "0" * 32, True, "ops:alice", None) is None


def test_the_async_form_is_the_same_rule(store):
    record = pending(store)
    store.deny_approval(record.request_id, by="ops:bob")
    now = asyncio.run(adecide(store, record, True, "ops:alice", None))
    assert now is not None and now.state is ApprovalState.DENIED and now.decided_by == "ops:bob"
    other = pending(store, requested_by="agent:refunds", payment_id="pi_2")
    with pytest.raises(InvalidArgument, match="cannot grant it"):
        asyncio.run(adecide(store, other, True, "agent:refunds", None))
    granted = asyncio.run(adecide(store, other, True, "ops:alice", None))
    assert granted is not None and granted.state is ApprovalState.GRANTED
