"""ctrlrun approvals through real smolagents agent loops (a scripted ``Model``, no API key), on
SQLite and PostgreSQL: a call that needs a person is told "waiting for approval <id>" before its
body runs and the run goes on; once a person grants the request, a later call with the same
arguments runs once; a denial is told as such. What smolagents adds to a run (``additional_args``,
the state values it substitutes, a Tool's ``self``) is never part of a call's identity."""

from __future__ import annotations

import re
from typing import Any, Tuple

import pytest

from ctrlrun.store.approvals import ApprovalState
from tests_py.integrations.test_smolagents import (
    CASES,
    Shop,
    call,
    no_retry_invitation,
    observations,
    refund,
)
from tests_py.support.modes import Mode

pytestmark = pytest.mark.filterwarnings("ignore:Function 'refund' has decorators other than @tool")

WAITING = re.compile(
    r"^waiting for approval (apr_[0-9a-f]{32}): stripe\.refund runs once a person "
)


@pytest.fixture(params=CASES, ids=[f"{h}-{m}" for h, m in CASES])
def how_mode(request: Any) -> Tuple[str, Any]:
    how, mode = request.param
    return how, Mode(mode)


def waiting_for(told: str) -> str:
    found = WAITING.match(told)
    assert found, told
    return found.group(1)


def test_approval_is_asked_before_the_body_and_the_grant_runs_once(how_mode, store, caplog):
    how, mode = how_mode
    shop = Shop(how, mode, store, decision="approve")
    first = shop.agent([refund("c1")], [refund("c2")])
    assert first.run("refund pi_1") == "finished"  # the run goes on
    asked, again = observations(first)[:2]
    rid = waiting_for(asked)
    assert waiting_for(again) == rid  # the same request stands for the same arguments
    assert "ctrlrun approve " + rid in asked and "call again with the same arguments" in asked
    assert shop.runs == []
    assert store.get_effect("refund:pi_1") is None  # nothing reserved
    request = store.get_approval(rid)
    assert request.state is ApprovalState.PENDING
    assert request.arguments == {"payment_id": "pi_1", "amount": 500}  # no `self`, nothing else

    store.grant_approval(rid, "ops:alice")
    later = shop.agent([refund("c1")], [refund("c2")])
    later.run("refund pi_1 now")
    ran, refused = observations(later)[:2]
    assert ran == "refunded 500 on pi_1"
    assert refused.startswith("already done: refund:pi_1 committed at ")
    assert shop.runs == [("pi_1", 500)]
    assert store.get_approval(rid).used_at is not None
    no_retry_invitation(shop, caplog)


def test_a_denial_is_told_and_nothing_runs(store, caplog):
    shop = Shop("above", Mode("sync"), store, decision="approve")
    first = shop.agent([refund("c1")])
    first.run("refund pi_1")
    rid = waiting_for(observations(first)[0])
    store.deny_approval(rid, "ops:bob", "not this customer")
    later = shop.agent([refund("c1")])
    later.run("refund pi_1 now")
    told = observations(later)[0]
    assert told.startswith("denied by ops:bob: ") and told.endswith("Do not retry")
    assert shop.runs == []
    no_retry_invitation(shop, caplog)


def test_parallel_twins_wait_for_one_request_and_run_once_granted(store, caplog):
    shop = Shop("under", Mode("sync"), store, seconds=0.3, decision="approve")
    first = shop.agent([refund("c1"), refund("c2")])
    first.run("refund pi_1")
    asked = observations(first)[0].split("\n")
    assert len(asked) == 2 and waiting_for(asked[0]) == waiting_for(asked[1])
    store.grant_approval(waiting_for(asked[0]), "ops:alice")
    later = shop.agent([refund("c3"), refund("c4")])
    later.run("refund pi_1 now")
    told = observations(later)[0].split("\n")
    assert "refunded 500 on pi_1" in told
    assert any(t.startswith("in progress: refund:pi_1") for t in told), told
    assert shop.runs == [("pi_1", 500)]
    no_retry_invitation(shop, caplog)


def test_additional_args_are_never_part_of_a_call(store):
    """A run's ``additional_args`` (which smolagents keeps in the agent's state and names in the
    task) change nothing of a call's key, fingerprint or approval: a second run with other
    ones is told "already done", never "conflict"."""
    shop = Shop("above", Mode("sync"), store, decision="approve")
    first = shop.agent([refund("c1")])
    first.run("refund pi_1", additional_args={"note": "first", "customer": {"id": "cus_1"}})
    rid = waiting_for(observations(first)[0])
    assert store.get_approval(rid).arguments == {"payment_id": "pi_1", "amount": 500}
    store.grant_approval(rid, "ops:alice")
    second = shop.agent([refund("c1")])
    second.run("refund pi_1", additional_args={"note": "second"})
    assert observations(second)[0] == "refunded 500 on pi_1"
    third = shop.agent([refund("c1")])
    third.run("refund pi_1", additional_args={"note": "third", "extra": [1, 2]})
    assert observations(third)[0].startswith("already done: refund:pi_1 committed at ")
    assert shop.runs == [("pi_1", 500)]


def test_a_state_value_the_model_names_is_the_argument(store):
    """smolagents substitutes a value of the agent's state for an argument the model names it
    by: that value is the call's argument (what is reserved, what an approver is shown)."""
    shop = Shop("above", Mode("sync"), store, decision="approve")
    agent = shop.agent([call("refund", "c1", payment_id="the_payment", amount=500)])
    agent.run("refund the payment", additional_args={"the_payment": "pi_7"})
    rid = waiting_for(observations(agent)[0])
    request = store.get_approval(rid)
    assert request.effect_key == "refund:pi_7"
    assert request.arguments == {"payment_id": "pi_7", "amount": 500}


def test_a_method_protected_without_approval_keeps_self_out_of_the_fingerprint(store):
    shop = Shop("forward", Mode("sync"), store)
    shop.agent([refund("c1")]).run("refund")
    other = Shop("forward", Mode("sync"), store)  # another instance: the same call
    agent = other.agent([refund("c1")])
    agent.run("refund again")
    assert observations(agent)[0].startswith("already done: refund:pi_1 committed at ")
