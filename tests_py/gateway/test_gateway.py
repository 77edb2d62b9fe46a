"""The MCP gateway end to end: a real MCP client (the SDK's ``ClientSession`` over stdio)
talks to ``ctrlrun gateway`` in its own process, which starts a real upstream MCP server
(tests_py/support/mcp_upstream.py); the upstream logs every execution to a file. Both backends."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Optional

import anyio
import pytest
from mcp.client.session import ClientSession

import ctrlrun
from tests_py.support.gateway_rig import POLICY, Rig, ctrl


def test_a_reserved_tool_runs_once_and_the_retry_is_told_it_is_done(rig, store):
    first, again = rig.calls(
        ("refund", {"payment_id": "pi_1", "amount": 500}),
        ("refund", {"payment_id": "pi_1", "amount": 500}),
    )
    assert not first.is_error and first.structured_content == {"refunded": 500}
    assert rig.runs() == [["refund", {"amount": 500, "payment_id": "pi_1"}]]
    info = ctrl(again)
    assert (info["refused"], info["effect_key"]) == ("committed", "refund:pi_1")
    assert again.content[0].text.startswith("already done: refund:pi_1 committed at ")
    assert again.content[0].text.endswith("; do not retry")
    # a new gateway process (another session) sees the same store
    (later,) = rig.calls(("refund", {"payment_id": "pi_1", "amount": 500}))
    assert ctrl(later)["refused"] == "committed" and len(rig.runs()) == 1
    rec = store.get_effect("refund:pi_1")
    assert rec.state.value == "committed" and rec.action == "mcp.acme.refund"
    assert rec.result["structuredContent"] == {"refunded": 500}
    assert [r.kind for r in store.list_receipts("refund:pi_1")] == ["reservation", "outcome"]
    # other arguments on the same key are a conflict, named
    (other,) = rig.calls(("refund", {"payment_id": "pi_1", "amount": 5000}))
    assert ctrl(other)["refused"] == "conflict" and ctrl(other)["fields"] == ["amount"]
    assert len(rig.runs()) == 1


def test_tools_without_a_template_are_forwarded_unreserved(rig, store):
    async def body(s):
        listed = await s.list_tools()
        a = await s.call_tool("lookup", {"payment_id": "pi_1"})
        b = await s.call_tool("lookup", {"payment_id": "pi_1"})
        return listed, a, b

    listed, a, b = rig.session(body)
    assert {t.name for t in listed.tools} == {
        "refund",
        "lookup",
        "flaky",
        "slow",
        "die",
        "ask",
        "confirm",
        "roots",
        "chatty",
    }
    assert a.content[0].text == b.content[0].text == "payment pi_1 is settled"
    assert store.list_effects() == []


def test_an_unresolvable_template_refuses_before_anything_is_sent(rig, store):
    missing, bad = rig.calls(
        ("refund", {"amount": 5}), ("refund", {"payment_id": 1.5, "amount": 5})
    )
    assert ctrl(missing)["refused"] == "invalid" and "payment_id" in missing.content[0].text
    assert ctrl(bad)["refused"] == "invalid" and "float" in bad.content[0].text
    assert rig.runs() == [] and store.list_effects() == []


def test_a_denied_action_is_refused(tmp_path, store_url, store):
    rig = Rig(tmp_path, store_url, POLICY + "  mcp.acme.lookup:\n    decision: deny\n")
    (r,) = rig.calls(("lookup", {"payment_id": "pi_1"}))
    assert ctrl(r)["refused"] == "denied" and "denied" in r.content[0].text


def test_an_approve_action_runs_once_after_a_person_approves(tmp_path, store_url, store):
    rig = Rig(
        tmp_path,
        store_url,
        POLICY.replace(
            '    effect: "refund:{payment_id}"\n',
            '    effect: "refund:{payment_id}"\n    decision: approve\n',
        ),
    )
    (asked,) = rig.calls(("refund", {"payment_id": "pi_7", "amount": 70}))
    info = ctrl(asked)
    assert info["refused"] == "approval_required" and info["request_id"].startswith("apr_")
    # what the approver decides on, every argument (the gateway binds them all)
    assert info["arguments"] == {"payment_id": "pi_7", "amount": 70}
    assert info["not_bound"] == []
    assert f"ctrlrun approve {info['request_id']} --by NAME" in asked.content[0].text
    assert rig.runs() == []
    ok = subprocess.run(
        [
            sys.executable,
            "-m",
            "ctrlrun",
            "approve",
            info["request_id"],
            "--by",
            "ops:alice",
            "--store",
            store_url,
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert ok.returncode == 0, ok.stderr
    ran, again = rig.calls(
        ("refund", {"payment_id": "pi_7", "amount": 70}),
        ("refund", {"payment_id": "pi_7", "amount": 70}),
    )
    assert not ran.is_error and ctrl(again)["refused"] == "committed"
    assert len(rig.runs()) == 1
    assert store.get_approval(info["request_id"]).state.value == "used"
    kinds = [(r.chain, r.kind) for r in store.list_receipts("refund:pi_7")]
    assert ("approval", "consumed") in kinds and ("effect", "outcome") in kinds


def test_the_gateways_requests_name_who_asked_who_never_grants_them(tmp_path, store_url, store):
    rig = Rig(
        tmp_path,
        store_url,
        POLICY.replace(
            '    effect: "refund:{payment_id}"\n',
            '    effect: "refund:{payment_id}"\n    decision: approve\n    approvals: 2\n',
        ),
        options=["--requested-by", "support-agent"],
    )
    (asked,) = rig.calls(("refund", {"payment_id": "pi_8", "amount": 80}))
    request_id = ctrl(asked)["request_id"]
    record = store.get_approval(request_id)
    assert (record.requested_by, record.approvals_needed) == ("support-agent", 2)

    def approve(by: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "ctrlrun", "approve", request_id, "--by", by],
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, "CTRLRUN_STORE": store_url},
        )

    own = approve("support-agent")
    assert own.returncode == 2 and "cannot grant it" in own.stderr
    assert approve("ops:alice").returncode == 0
    (still,) = rig.calls(("refund", {"payment_id": "pi_8", "amount": 80}))
    assert ctrl(still)["refused"] == "approval_required" and rig.runs() == []
    assert approve("ops:bob").returncode == 0
    (ran,) = rig.calls(("refund", {"payment_id": "pi_8", "amount": 80}))
    assert not ran.is_error and len(rig.runs()) == 1
    assert store.get_approval(request_id).granted_by == ("ops:alice", "ops:bob")


def test_a_tool_error_is_ambiguous_unless_the_policy_says_failed(tmp_path, store_url, store):
    rig = Rig(tmp_path, store_url, POLICY)
    err, again = rig.calls(("flaky", {"payment_id": "p"}), ("flaky", {"payment_id": "p"}))
    assert err.content[0].text == "card declined"  # the upstream's own error, passed on
    assert ctrl(err)["outcome"] == "ambiguous"
    assert ctrl(again)["refused"] == "ambiguous" and len(rig.runs()) == 1
    assert store.get_effect("flaky:p").state.value == "ambiguous"
    (tmp_path / "x").mkdir()
    rig2 = Rig(
        tmp_path / "x",
        store_url,
        POLICY.replace(
            '    effect: "flaky:{payment_id}"\n',
            '    effect: "flaky:{payment_id}"\n    on_tool_error: failed\n',
        ),
    )
    first, retry = rig2.calls(("flaky", {"payment_id": "q"}), ("flaky", {"payment_id": "q"}))
    assert ctrl(first)["outcome"] == "failed" and ctrl(retry)["outcome"] == "failed"
    assert len(rig2.runs()) == 2  # a provable failure lets the retry run
    assert store.get_effect("flaky:q").state.value == "failed"


def test_a_call_with_no_answer_in_time_is_ambiguous(rig, store):
    slow, again = rig.calls(
        ("slow", {"payment_id": "s", "seconds": 5}), ("slow", {"payment_id": "s", "seconds": 5})
    )
    assert ctrl(slow)["outcome"] == "ambiguous" and "no answer" in slow.content[0].text
    assert ctrl(again)["refused"] == "ambiguous"
    assert len(rig.runs()) == 1 and store.get_effect("slow:s").state.value == "ambiguous"


def test_a_call_the_agent_cancels_in_flight_ends_ambiguous(rig, store):
    async def body(s):
        with anyio.move_on_after(0.4):  # the client gives up and sends notifications/cancelled
            await s.call_tool("slow", {"payment_id": "c", "seconds": 0.9})
        await anyio.sleep(1.5)  # the gateway records the outcome
        return await s.call_tool("slow", {"payment_id": "c", "seconds": 0.9})

    again = rig.session(body)
    assert store.get_effect("slow:c").state.value == "ambiguous"
    assert ctrl(again)["refused"] == "ambiguous"
    assert len(rig.runs()) == 1


def test_an_upstream_that_dies_mid_call_is_ambiguous_then_calls_are_failed(rig, store):
    died, after = rig.calls(
        ("die", {"payment_id": "d"}), ("refund", {"payment_id": "pi_9", "amount": 9})
    )
    assert ctrl(died)["outcome"] == "ambiguous"
    assert store.get_effect("die:d").state.value == "ambiguous"
    # the upstream is gone: the next call is never sent, so it is failed and may run later
    assert ctrl(after)["outcome"] == "failed" and "was not sent" in after.content[0].text
    assert store.get_effect("refund:pi_9").state.value == "failed"
    assert [r[0] for r in rig.runs()] == ["die"]


@pytest.mark.parametrize(
    "upstream,why",
    [
        (["--", sys.executable, "-c", "import sys; sys.exit(3)"], "Connection closed"),
        # a process that runs and never answers the handshake: bounded by the call timeout
        (["--call-timeout", "1", "--", sys.executable, "-c", "import time; time.sleep(600)"], ""),
    ],
)
def test_an_upstream_that_never_started_is_served_and_every_call_is_failed_unsent(
    tmp_path, store_url, store, upstream, why
):
    rig = Rig(tmp_path, store_url, POLICY, upstream=upstream)

    async def body(s: ClientSession) -> list:
        listed = (await s.list_tools()).tools
        return [listed] + [
            await s.call_tool(name, args)
            for name, args in (
                ("refund", {"payment_id": "pi_n", "amount": 1}),
                ("refund", {"payment_id": "pi_n", "amount": 1}),
                ("lookup", {"payment_id": "pi_n"}),
            )
        ]

    listed, first, again, unreserved = rig.session(body)
    assert listed == []
    for result in (first, again):  # never sent, so failed; the retry may run (and is failed)
        assert ctrl(result)["outcome"] == "failed" and "never started" in result.content[0].text
    rec = store.get_effect("refund:pi_n")
    assert rec.state.value == "failed" and rec.attempt == 2
    assert ctrl(unreserved)["refused"] == "upstream"
    assert "did not start" in rig.stderr.read_text() and why in rig.stderr.read_text()
    assert "Traceback" not in rig.stderr.read_text()


def test_the_upstreams_progress_reaches_the_agent_through_the_gateway(rig, store):
    seen: list = []

    async def progress(done: float, total: Optional[float], message: Optional[str]) -> None:
        seen.append((done, total, message))

    async def body(s: ClientSession) -> list:
        return [
            await s.call_tool(
                name, {"payment_id": f"p{name}", "seconds": 0.1}, progress_callback=progress
            )
            for name in ("slow", "lookup")
        ]

    reserved, _ = rig.session(body)
    assert not reserved.is_error
    assert seen == [(0.5, 1.0, "halfway")]  # from the reserved call; lookup reports none
    assert store.get_effect("slow:pslow").state.value == "committed"


def test_replay_gives_a_committed_duplicate_the_stored_answer(tmp_path, store_url, store):
    rig = Rig(
        tmp_path,
        store_url,
        POLICY.replace(
            'effect: "refund:{payment_id}"', 'effect: "refund:{payment_id}"\n    replay: true'
        ),
    )
    first, again, other = rig.calls(
        ("refund", {"payment_id": "pi_r", "amount": 7}),
        ("refund", {"payment_id": "pi_r", "amount": 7}),
        ("refund", {"payment_id": "pi_r", "amount": 8}),
    )
    assert not first.is_error and not again.is_error
    assert again.structured_content == first.structured_content == {"refunded": 7}
    assert again.content[0].text == "refunded 7"
    assert ctrl(other)["refused"] == "conflict"  # other arguments are never replayed
    assert len(rig.runs()) == 1


@pytest.mark.parametrize("replay", [False, True])
def test_the_gateway_and_a_decorated_worker_share_reservations(tmp_path, store_url, store, replay):
    policy = (
        POLICY.replace(
            'effect: "refund:{payment_id}"', 'effect: "refund:{payment_id}"\n    replay: true'
        )
        if replay
        else POLICY
    )
    rig = Rig(tmp_path, store_url, policy)

    @ctrlrun.protect("mcp.acme.refund", effect="refund:{payment_id}", store=store)
    def refund(payment_id: str, amount: int) -> dict:
        return {"refunded": amount, "by": "worker"}

    assert refund("pi_w", 10) == {"refunded": 10, "by": "worker"}
    (r,) = rig.calls(("refund", {"payment_id": "pi_w", "amount": 10}))
    # with replay too: what the worker stored is not a tool's answer, so the agent is told
    # it is done (never "sent, no answer")
    assert ctrl(r)["refused"] == "committed" and rig.runs() == [], r
    assert "already done" in r.content[0].text, r
