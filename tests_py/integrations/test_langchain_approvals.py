"""Approvals through LangGraph's human-in-the-loop: a protected tool with ``decision="approve"``
pauses the graph with ``interrupt`` naming the ctrlrun request; ``Command(resume=...)`` records
the person's grant or denial in the store (edited arguments: a new request granted, the old one
denied, both recorded) and the call runs once; a grant made meanwhile with ``ctrlrun approve``
is honoured on resume. Every case on SQLite and PostgreSQL, with sync and async tools."""

from __future__ import annotations

import warnings
from typing import Any, List

import pytest
from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
from langchain_core.messages import AIMessage, ToolMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.errors import is_invalid_resume
from langgraph.types import Command
from pydantic import ValidationError

import ctrlrun
from tests_py.integrations.test_langchain_support import Agent, asks, call, make_tool, run_graph


def _refund_tool(store, mode, runs: List[Any], order: str = "above"):
    def refund(payment_id: str, amount: int) -> str:
        """Refund a payment."""
        runs.append((payment_id, amount))
        return f"refunded {amount} on {payment_id}"

    return make_tool(
        mode, order, "billing.refund", refund, effect="refund:{payment_id}", store=store,
        decision="approve",
    )  # fmt: skip


def _paused(store, mode, runs: List[Any], payment_id: str = "pi_1", order: str = "above"):
    """An agent whose first model turn asks for a refund that waits for approval, paused."""
    t = _refund_tool(store, mode, runs, order)
    args = {"payment_id": payment_id, "amount": 500}
    agent = Agent([t], [asks(call("refund", args, "call_1")), AIMessage("done")], checkpoint=True)
    (paused,) = agent.run(mode)["__interrupt__"]
    assert runs == [] and len(agent.seen) == 1
    return agent, paused.value


def _told(agent: Agent) -> ToolMessage:
    (told,) = agent.told()
    assert told.tool_call_id == "call_1"
    return told


@pytest.mark.parametrize("order", ("above", "below"))
def test_a_grant_through_resume_is_recorded_and_runs_once(store_url, mode, order):
    store = ctrlrun.open_store(store_url)
    runs: list = []
    agent, asked = _paused(store, mode, runs, order=order)
    rid = asked["request_id"]
    assert asked["ctrlrun"] == "approval_required" and asked["action"] == "billing.refund"
    assert asked["effect_key"] == "refund:pi_1" and asked["expires_at"].endswith("Z")
    assert asked["arguments"] == {"payment_id": "pi_1", "amount": 500}
    assert asked["text"].startswith(f"waiting for approval {rid}: ")
    assert asked["tool_call_id"] == ("call_1" if order == "above" else None)
    assert store.get_approval(rid).state.value == "pending"

    resumed = agent.run(mode, Command(resume={"approved": True, "by": "alice", "note": "ok"}))
    assert resumed["messages"][-1].content == "done"
    assert _told(agent).content == "refunded 500 on pi_1"
    assert runs == [("pi_1", 500)]
    record = store.get_approval(rid)
    assert (record.state.value, record.decided_by, record.note) == ("used", "alice", "ok")
    assert store.get_effect("refund:pi_1").approval_id == rid
    store.close()


def test_a_denial_through_resume_is_recorded_and_told(store_url, mode):
    store = ctrlrun.open_store(store_url)
    runs: list = []
    for payment_id, by in (("pi_1", None), ("pi_2", "bob")):
        agent, asked = _paused(store, mode, runs, payment_id)
        resume = {"approved": False} if by is None else {"approved": False, "by": by, "note": "no"}
        agent.run(mode, Command(resume=resume))
        told = _told(agent)
        who = by or "langgraph"  # no name given: the denial is recorded as LangGraph's
        assert told.status == "error" and told.content.startswith(f"denied by {who}: ")
        assert told.artifact["request_id"] == asked["request_id"] and runs == []
        record = store.get_approval(asked["request_id"])
        assert (record.state.value, record.decided_by) == ("denied", who)
        assert store.get_effect(f"refund:{payment_id}") is None
    store.close()


def test_edited_arguments_are_a_new_request_granted_by_the_same_person(store_url, mode):
    store = ctrlrun.open_store(store_url)
    runs: list = []
    agent, asked = _paused(store, mode, runs)
    old = asked["request_id"]
    agent.run(mode, Command(resume={"approved": True, "by": "alice", "args": {"amount": 200}}))
    assert _told(agent).content == "refunded 200 on pi_1"
    assert runs == [("pi_1", 200)]
    requests = _requests(store, "refund:pi_1")
    (new,) = set(requests) - {old}
    assert requests[new].arguments == {"payment_id": "pi_1", "amount": 200}
    assert (requests[new].state.value, requests[new].decided_by) == ("used", "alice")
    assert requests[new].note == f"edited from {old}"
    assert (requests[old].state.value, requests[old].decided_by) == ("denied", "alice")
    assert requests[old].note == f"edited: replaced by {new}"
    assert store.get_effect("refund:pi_1").approval_id == new
    store.close()


def test_a_grant_made_meanwhile_is_honoured_on_resume(store_url, mode):
    store = ctrlrun.open_store(store_url)
    runs: list = []
    agent, asked = _paused(store, mode, runs)
    store.grant_approval(asked["request_id"], by="ops:carol")  # `ctrlrun approve ID --by ...`
    agent.run(mode, Command(resume={}))  # a resume value that decides nothing
    assert _told(agent).content == "refunded 500 on pi_1" and runs == [("pi_1", 500)]
    assert store.get_approval(asked["request_id"]).decided_by == "ops:carol"

    runs.clear()
    agent, asked = _paused(store, mode, runs, "pi_2")  # nothing decided: it still waits
    agent.run(mode, Command(resume={"approved": True, "by": "eve", "request_id": "apr_other"}))
    told = _told(agent)  # a decision naming another request decides nothing for this one
    assert told.status == "error" and told.artifact["request_id"] == asked["request_id"]
    assert told.content.startswith(f"waiting for approval {asked['request_id']}: ")
    assert store.get_approval(asked["request_id"]).state.value == "pending" and runs == []
    store.close()


def test_a_malformed_resume_is_refused_and_can_be_answered_again(store_url, mode):
    store = ctrlrun.open_store(store_url)
    runs: list = []
    agent, asked = _paused(store, mode, runs)
    bad = (
        {"approved": True},  # a grant names its approver
        {"approved": "yes", "by": "alice"},
        {"approved": False, "by": " "},
        {"approved": False, "args": {"amount": 1}},  # an edit is a grant
        {"approved": True, "by": "alice", "args": {"currency": "EUR"}},  # no such argument
        {"approve": True},
        "yes",
    )
    for value in bad:  # refused by interrupt itself: nothing recorded, asked again
        with pytest.raises(ValidationError) as info:
            agent.run(mode, Command(resume=value))
        assert is_invalid_resume(info.value)
    assert store.get_approval(asked["request_id"]).state.value == "pending" and runs == []
    agent.run(mode, Command(resume={"approved": True, "by": "alice"}))
    assert _told(agent).content == "refunded 500 on pi_1"
    store.close()


def test_without_a_checkpointer_the_model_is_told_it_waits(store_url, mode):
    store = ctrlrun.open_store(store_url)
    runs: list = []
    t = _refund_tool(store, mode, runs)
    args = {"payment_id": "pi_1", "amount": 500}
    agent = Agent([t], [asks(call("refund", args, "call_1")), AIMessage("done")])
    agent.run(mode)  # a graph that cannot be resumed does not pause
    told = _told(agent)
    assert told.status == "error" and told.content.startswith("waiting for approval apr_")
    assert runs == []
    store.close()


class _Scripted(FakeMessagesListChatModel):
    """The fake chat model, accepting the tools an agent binds."""

    def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
        return self


def test_several_approvals_in_one_turn_are_resumed_each_by_its_interrupt(store_url, mode):
    from langgraph.prebuilt import create_react_agent  # deprecated for langchain.agents

    store = ctrlrun.open_store(store_url)
    runs: list = []
    t = _refund_tool(store, mode, runs)
    turn = asks(
        call("refund", {"payment_id": "pi_1", "amount": 1}, "c1"),
        call("refund", {"payment_id": "pi_2", "amount": 2}, "c2"),
    )
    model = _Scripted(responses=[turn, AIMessage("done")])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        graph = create_react_agent(model, [t], checkpointer=InMemorySaver())  # a task per call
    config = {"configurable": {"thread_id": "t"}}
    paused = run_graph(mode, graph, None, config)["__interrupt__"]
    by_key = {p.value["effect_key"]: p for p in paused}
    assert set(by_key) == {"refund:pi_1", "refund:pi_2"}
    out = run_graph(
        mode,
        graph,
        Command(
            resume={
                by_key["refund:pi_1"].id: {"approved": True, "by": "alice"},
                by_key["refund:pi_2"].id: {"approved": False, "by": "alice", "note": "too much"},
            }
        ),
        config,
    )
    told = {m.tool_call_id: m for m in out["messages"] if isinstance(m, ToolMessage)}
    assert told["c1"].content == "refunded 1 on pi_1" and told["c1"].status == "success"
    assert told["c2"].status == "error" and told["c2"].content.startswith("denied by alice: ")
    assert runs == [("pi_1", 1)]
    store.close()


def _requests(store, key: str):
    return {a.request_id: a for a in store.list_approvals() if a.effect_key == key}
