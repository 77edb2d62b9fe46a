"""Approvals through CrewAI's before_tool_call hook: before a protected tool with
decision="approve" runs, the Approvals hook shows its pending request to a person (``ask``);
the answer is recorded in ctrlrun, then the call runs once, or the model is told "denied" (or
"waiting", when nobody decided). A decision made with the store stands; a call whose key is done
asks nobody. SQLite and PostgreSQL, sync and async tools, each way of making the tool."""

from __future__ import annotations

from typing import Any, Iterator, List

import pytest

import ctrlrun
from ctrlrun.integrations import crewai as cc
from tests_py.integrations.crewai_support import call  # (sets the env first)
from tests_py.integrations.test_crewai import HOWS, Shop


class Person:
    """An ``ask``: records what it was shown, answers with the next of ``answers``."""

    def __init__(self, *answers: Any) -> None:
        self.answers = list(answers)
        self.shown: List[Any] = []

    def __call__(self, context: Any, record: Any) -> Any:
        self.shown.append((context.tool_name, record.request_id, record.arguments))
        return self.answers.pop(0)


@pytest.fixture
def hooked() -> Iterator[Any]:
    hooks: List[cc.Approvals] = []

    def install(person: Person, **kwargs: Any) -> cc.Approvals:
        hooks.append(cc.Approvals(person, **kwargs).register())
        return hooks[-1]

    yield install
    for hook in hooks:
        hook.unregister()


@pytest.mark.parametrize("how", HOWS)
def test_the_hook_asks_before_the_body_and_the_granted_call_runs_once(store_url, mode, how, hooked):
    store = ctrlrun.open_store(store_url)
    shop = Shop(how, mode, store, decision="approve")
    person = Person({"approved": True, "by": "ops:al"})
    hooked(person)
    shop.run([call("refund", "c1", payment_id="pi_1", amount=5)])
    assert shop.told("c1") == "refunded pi_1 5" and shop.runs == [("pi_1", 5)]
    ((tool_name, rid, shown),) = person.shown
    assert tool_name == "refund" and shown == {"payment_id": "pi_1", "amount": 5}
    record = store.get_approval(rid)
    assert record is not None and record.state.value == "used" and record.decided_by == "ops:al"
    assert "CrewAI before_tool_call hook" in (record.note or "")
    row = store.get_effect("refund:pi_1")
    assert row is not None and row.state.value == "committed" and row.approval_id == rid
    # asked again: already done, nobody is asked
    shop.run([call("refund", "c2", payment_id="pi_1", amount=5)])
    assert shop.told("c2").startswith("already done: refund:pi_1 committed")
    assert len(person.shown) == 1 and shop.runs == [("pi_1", 5)]
    store.close()


def test_a_denial_is_recorded_and_the_model_told(store_url, mode, hooked):
    store = ctrlrun.open_store(store_url)
    shop = Shop("above", mode, store, decision="approve")
    hooked(Person("no"), approver="ops:bo")
    shop.run([call("refund", "c1", payment_id="pi_1", amount=5)])
    told = shop.told("c1")
    assert told.startswith("denied by ops:bo: ") and told.endswith("Do not retry")
    assert shop.runs == [] and store.get_effect("refund:pi_1") is None
    store.close()


def test_no_answer_leaves_it_pending_and_a_grant_with_the_store_stands(store_url, mode, hooked):
    store = ctrlrun.open_store(store_url)
    shop = Shop("under", mode, store, decision="approve")
    person = Person(None, "no")
    hooked(person)
    shop.run([call("refund", "c1", payment_id="pi_1", amount=5)])
    told = shop.told("c1")
    assert told.startswith("waiting for approval apr_") and shop.runs == []
    rid = person.shown[0][1]
    assert rid in told and store.get_approval(rid).state.value == "pending"  # type: ignore[union-attr]
    store.grant_approval(rid, "ops:cy", None)  # as `ctrlrun approve` does
    shop.run([call("refund", "c2", payment_id="pi_1", amount=5)])
    assert shop.told("c2") == "refunded pi_1 5" and shop.runs == [("pi_1", 5)]
    assert len(person.shown) == 1  # granted already: nobody asked again
    store.close()
