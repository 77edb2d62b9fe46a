"""Approvals through the Agents SDK's human-in-the-loop, on SQLite and PostgreSQL, sync and
async tools: a tool protected with decision="approve" stops the run with interruptions; a
person's ``state.approve`` is recorded as the ctrlrun grant (bound to the arguments, used
once); a rejection through ``oa.reject`` as a denial the model is told of; a grant or denial
made in ctrlrun (``ctrlrun approve``) is honoured by the next call or carried into the paused
state by ``oa.apply_decisions``."""

from __future__ import annotations

import asyncio
import inspect

from agents import RunContextWrapper, function_tool
from agents.run_state import RunState

import ctrlrun
from ctrlrun.integrations import openai_agents as oa
from tests_py.integrations.test_openai_agents_support import agent, outputs, run, tool

ARGS = {"payment_id": "pi_1", "amount": 500}
SHOWN = {"payment_id": "pi_1", "amount": 500}  # what an approver sees: no run context


def refund_tool(mode, store, runs, order="above", **options):
    def refund(ctx: RunContextWrapper[dict], payment_id: str, amount: int) -> str:
        """Refund a payment."""
        runs.append(payment_id)
        return f"refunded {payment_id}"

    options.setdefault("decision", "approve")
    return tool(
        mode, order, "stripe.refund", refund, effect="refund:{payment_id}", store=store, **options
    )


def requests(store):
    return [(r.state.value, r.arguments, r.decided_by) for r in store.list_approvals()]


def test_a_person_approving_in_the_sdk_is_recorded_as_the_grant(store_url, mode):
    store = ctrlrun.open_store(store_url)
    approvers = (
        (None, "openai-agents"),
        ("ops-bot", "ops-bot"),
        (lambda c: c.context["user"], "alice"),
    )
    for n, (approver, by) in enumerate(approvers):
        runs: list = []
        t = refund_tool(mode, store, runs, approved_by=approver)
        args, shown = ({**ARGS, "payment_id": f"pi_{n}"},) * 2
        target = agent(t, [("refund", args, "call_1")], "refunded")
        paused = run(target, "refund", {"user": "alice"})
        (item,) = paused.interruptions
        assert item.tool_name == "refund" and runs == []
        assert requests(store)[n] == ("pending", shown, None)  # no run context shown

        state = paused.to_state()
        state.approve(item)
        resumed = run(target, state, {"user": "alice"})
        assert outputs(resumed) == [f"refunded pi_{n}"] and runs == [f"pi_{n}"]
        assert requests(store)[n] == ("used", shown, by)  # bound to the arguments, used once
        assert "tool call call_1" in (store.list_approvals()[n].note or "")

        # the same call again, in a new run: answered without asking anyone
        again = run(agent(t, [("refund", args, "call_2")], "ok"), "again", {"user": "alice"})
        assert not again.interruptions and runs == [f"pi_{n}"]
        assert outputs(again)[0].startswith(f"already done: refund:pi_{n} committed at ")
        assert len(store.list_approvals()) == n + 1
    store.close()


def test_a_rejection_is_a_denial_the_model_is_told_of(store_url, mode):
    store = ctrlrun.open_store(store_url)
    runs = []
    t = refund_tool(mode, store, runs)
    target = agent(t, [("refund", ARGS, "call_1")], "not refunded")
    paused = run(target, "refund pi_1")
    # the paused run kept as JSON (a person may answer hours later, in another process)
    saved = paused.to_state().to_json()
    state = asyncio.run(RunState.from_json(target, saved))
    (item,) = state.get_interruptions()
    record = oa.reject(state, item, by="dave", note="over the limit")
    assert record is not None and record.state.value == "denied"
    resumed = run(target, state)
    (said,) = outputs(resumed)
    assert said.startswith("denied by dave: ") and "over the limit" in said
    assert said.endswith("Do not retry") and runs == []
    assert requests(store) == [("denied", SHOWN, "dave")]

    # the model asking again with the same arguments: no person asked, the denial answers
    again = run(agent(t, [("refund", ARGS, "call_2")], "ok"), "again")
    assert not again.interruptions and outputs(again)[0].startswith("denied by dave: ")

    # the SDK's own reject says its own words; nothing runs, the ctrlrun request stays pending
    other = {"payment_id": "pi_2", "amount": 1}
    paused = run(agent(t, [("refund", other, "call_3")], "ok"), "refund pi_2")
    state = paused.to_state()
    state.reject(paused.interruptions[0])
    assert outputs(run(target, state)) == ["Tool execution was not approved."] and runs == []
    assert requests(store)[-1] == ("pending", other, None)
    store.close()


def test_an_approval_helper_records_the_persons_name(store_url, mode):
    store = ctrlrun.open_store(store_url)
    runs = []
    t = refund_tool(mode, store, runs)
    target = agent(t, [("refund", ARGS, "call_1")], "refunded")
    state = run(target, "go").to_state()
    record = oa.approve(state, state.get_interruptions()[0], by="erin", note="checked")
    assert record is not None and record.state.value == "granted" and record.decided_by == "erin"
    assert outputs(run(target, state)) == ["refunded pi_1"] and runs == ["pi_1"]
    assert requests(store) == [("used", SHOWN, "erin")]
    store.close()


def test_a_decision_made_in_ctrlrun_is_honoured(store_url, mode):
    store = ctrlrun.open_store(store_url)
    runs = []
    t = refund_tool(mode, store, runs)
    target = agent(t, [("refund", ARGS, "call_1")], "refunded")
    state = run(target, "go").to_state()
    (pending,) = store.list_approvals()
    store.grant_approval(pending.request_id, by="carol")  # as `ctrlrun approve ID --by carol`
    assert oa.apply_decisions(state) == []  # no interruption left for a person
    assert outputs(run(target, state)) == ["refunded pi_1"] and runs == ["pi_1"]
    assert requests(store) == [("used", SHOWN, "carol")]

    # a grant made before the call: the run is not interrupted at all
    other = {"payment_id": "pi_2", "amount": 7}
    paused = run(agent(t, [("refund", other, "call_2")], "ok"), "go")
    store.grant_approval(store.list_approvals("pending")[-1].request_id, by="carol")
    fresh = run(agent(t, [("refund", other, "call_3")], "ok"), "go")
    assert not fresh.interruptions and outputs(fresh) == ["refunded pi_2"]
    assert paused.interruptions and runs == ["pi_1", "pi_2"]

    # a denial made in ctrlrun: the paused call is rejected, the model told "denied"
    third = {"payment_id": "pi_3", "amount": 1}
    target = agent(t, [("refund", third, "call_4")], "ok")
    state = run(target, "go").to_state()
    store.deny_approval(store.list_approvals("pending")[-1].request_id, by="frank")
    assert oa.apply_decisions(state) == []
    assert outputs(run(target, state))[0].startswith("denied by frank: ")
    assert runs == ["pi_1", "pi_2"]

    # a paused call whose key another run did meanwhile (granted, used): let through, and
    # answered "already done" without a person
    fourth = {"payment_id": "pi_4", "amount": 1}
    target = agent(t, [("refund", fourth, "call_6")], "ok")
    state = run(target, "go").to_state()
    store.grant_approval(store.list_approvals("pending")[-1].request_id, by="carol")
    assert outputs(run(agent(t, [("refund", fourth, "call_7")], "ok"), "go")) == ["refunded pi_4"]
    assert oa.apply_decisions(state) == []
    assert outputs(run(target, state))[0].startswith("already done: refund:pi_4 committed")
    assert runs == ["pi_1", "pi_2", "pi_4"]
    store.close()


def test_identical_calls_awaiting_approval_run_once(store_url, mode):
    store = ctrlrun.open_store(store_url)
    runs = []
    t = refund_tool(mode, store, runs)
    target = agent(t, [("refund", ARGS, "call_1"), ("refund", ARGS, "call_2")], "ok")
    paused = run(target, "refund twice")
    assert len(paused.interruptions) == 2 and len(store.list_approvals()) == 1  # one request
    state = paused.to_state()
    for item in state.get_interruptions():
        state.approve(item)
    said = outputs(run(target, state))
    assert runs == ["pi_1"] and "refunded pi_1" in said
    (twin,) = [s for s in said if s != "refunded pi_1"]
    assert twin.startswith(("in progress: refund:pi_1", "already done: refund:pi_1"))
    row = store.get_effect("refund:pi_1")
    assert row is not None and row.state.value == "committed"
    # one grant, used by the call that ran; the twin (refused) left no grant behind
    decided = [r for r in requests(store) if r[0] != "pending"]
    assert decided == [("used", SHOWN, "openai-agents")]
    store.close()


def test_under_function_tool_an_approval_is_asked_in_the_tools_answer(store_url, mode):
    """Under @function_tool the SDK is not told to pause: the tool answers "waiting for
    approval <id>"; the SDK's own needs_approval=True still records the person's grant."""
    store = ctrlrun.open_store(store_url)
    runs = []
    t = refund_tool(mode, store, runs, order="under")
    assert t.needs_approval is False
    said = outputs(run(agent(t, [("refund", ARGS, "call_1")], "ok"), "go"))
    (record,) = store.list_approvals()
    assert said == [said[0]] and said[0].startswith(f"waiting for approval {record.request_id}: ")
    store.grant_approval(record.request_id, by="carol")
    assert outputs(run(agent(t, [("refund", ARGS, "call_2")], "ok"), "go")) == ["refunded pi_1"]

    def pay(order: str) -> str:
        """Pay an order."""
        runs.append(order)
        return f"paid {order}"

    paying = function_tool(
        oa.protect("pay", effect="pay:{order}", store=store, decision="approve")(
            mode.executor(pay)
        ),
        needs_approval=True,
    )
    target = agent(paying, [("pay", {"order": "o1"}, "call_3")], "ok")
    state = run(target, "go").to_state()
    state.approve(state.get_interruptions()[0])
    assert outputs(run(target, state)) == ["paid o1"] and runs == ["pi_1", "o1"]
    (paid,) = [r for r in store.list_approvals() if r.action == "pay"]
    assert paid.state.value == "used" and paid.decided_by == "openai-agents"
    store.close()


def test_the_sdk_cannot_edit_arguments_on_approval():
    """Documented: an approval in the SDK approves the call as the model made it (edited
    arguments would be a new call, and a new ctrlrun request). A tripwire for a new SDK."""
    assert list(inspect.signature(RunState.approve).parameters) == [
        "self",
        "approval_item",
        "always_approve",
    ]


def test_the_policy_and_the_tools_own_needs_approval(store_url, mode, tmp_path, monkeypatch):
    """An action the policy file says ``approve`` gets the SDK's needs_approval too; a tool's
    own needs_approval still asks whenever it says so, even with a ctrlrun grant in force."""
    store = ctrlrun.open_store(store_url)
    policy = tmp_path / "ctrlrun.yaml"
    policy.write_text(
        "schema: ctrlrun.policy/v2\nactions:\n  stripe.refund:\n    decision: approve\n"
    )
    monkeypatch.setenv("CTRLRUN_CONFIG", str(policy))
    runs: list = []
    t = refund_tool(mode, store, runs, decision="allow")
    assert run(agent(t, [("refund", ARGS, "call_1")], "ok"), "go").interruptions

    async def large(ctx, params, call_id) -> bool:  # the application's own rule
        return params["amount"] > 1000

    def pay(order: str, amount: int) -> str:
        """Pay an order."""
        runs.append(order)
        return f"paid {order}"

    paying = oa.protect("pay", effect="pay:{order}", store=store, decision="approve")(
        function_tool(mode.executor(pay), needs_approval=large)
    )
    for order, amount, asked in (("small", 5, False), ("big", 5000, True)):
        args = {"order": order, "amount": amount}
        assert run(agent(paying, [("pay", args, "c1")], "ok"), "go").interruptions
        store.grant_approval(store.list_approvals("pending")[-1].request_id, by="carol")
        target = agent(paying, [("pay", args, "c2")], "ok")
        result = run(target, "go")
        assert bool(result.interruptions) is asked
        if asked:  # the grant made in ctrlrun answers the application's own question too
            state = result.to_state()
            assert oa.apply_decisions(state) == []
            result = run(target, state)
        assert outputs(result) == [f"paid {order}"]
    assert runs == ["small", "big"]
    store.close()


def test_the_grant_is_bound_to_the_arguments_the_call_runs_with(store_url, mode):
    """The model's JSON (an int for a float parameter) is validated before anything is bound:
    the SDK pauses such a call by itself, and the person's grant is recorded for the
    arguments the function is given (10.0), the ones its reservation uses."""
    store = ctrlrun.open_store(store_url)
    runs: list = []

    def refund(payment_id: str, amount: float) -> str:
        """Refund a payment."""
        runs.append((payment_id, amount))
        return f"refunded {payment_id}"

    t = tool(
        mode,
        "above",
        "stripe.refund",
        refund,
        effect="refund:{payment_id}",
        store=store,
        decision="approve",
    )
    target = agent(t, [("refund", {"payment_id": "pi_9", "amount": 10}, "call_1")], "ok")
    paused = run(target, "refund")
    (item,) = paused.interruptions
    state = paused.to_state()
    state.approve(item)
    resumed = run(target, state)
    assert outputs(resumed) == ["refunded pi_9"] and runs == [("pi_9", 10.0)]
    assert requests(store) == [("used", {"payment_id": "pi_9", "amount": 10.0}, "openai-agents")]
    store.close()
