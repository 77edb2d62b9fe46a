"""The console and the gateway under the duties apart (docs/roles.md), as real processes over a
real PostgreSQL server: ``ctrlrun console`` with the approver's credentials decides and
resolves through its forms; with the agent's it refuses to serve at all, the server having
refused it the accounts; ``ctrlrun gateway`` with the agent's credentials reserves, forwards
once and refuses the duplicate. Each URL goes in ``CTRLRUN_STORE``, never on a command line,
since it holds a password."""

from __future__ import annotations

import os
from contextlib import contextmanager
from typing import Iterator, List, Tuple

import anyio
import httpx2 as httpx
import pytest
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

from ctrlrun import ActionRule, ApprovalRequired, DuplicateEffect
from ctrlrun.console import accounts
from ctrlrun.console.pages import effect_url
from tests_py.console.rig import Console, csrf_in
from tests_py.console.test_console_cli import _listening, _serve, _stop
from tests_py.roles.test_agent_refused import KEY, an_ambiguous_effect, ask
from tests_py.roles.test_duties_work import refunds
from tests_py.support.cli import assert_one_line_error, free_port, run_cli
from tests_py.support.gateway_rig import POLICY, ctrl, gateway_command

ACCOUNT = "alice"


def add_account(duties, name: str = ACCOUNT) -> str:
    """A console account added by the owner (``ctrlrun approvers add``): its secret."""
    proc = run_cli("approvers", "add", name, env=dict(os.environ, CTRLRUN_STORE=duties.owner_url))
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip().splitlines()[-1]


@pytest.fixture
def console(duties, monkeypatch) -> Iterator[Tuple[str, str]]:
    """``ctrlrun console`` in its own process with the approver's URL in ``CTRLRUN_STORE``,
    and an account the owner added: the console's address and the account's secret."""
    secret = add_account(duties)
    monkeypatch.setenv("CTRLRUN_STORE", duties.approver_url)
    proc = _serve("--listen", f"127.0.0.1:{free_port()}")
    try:
        url = _listening(proc)
        yield url, secret
    finally:
        err = _stop(proc)
    assert "Traceback" not in err and duties.approver.password not in err, err


@contextmanager
def signed_in(url: str, name: str, secret: str) -> Iterator[httpx.Client]:
    """An HTTP client signed in to the console as ``name`` (the sign-in form's CSRF token and
    cookie, then the session cookie)."""
    with httpx.Client(base_url=url, timeout=30, follow_redirects=False) as http:
        token = csrf_in(http.get("/signin").text)
        r = http.post("/signin", data={"csrf": token, "account": name, "secret": secret})
        assert r.status_code == 303, (r.status_code, r.text)
        assert "ctrlrun_session" in http.cookies
        yield http


def test_the_console_as_the_approver_grants_and_the_agents_call_runs_once(console, agent, owner):
    url, secret = console
    runs: list = []
    refund = refunds(agent, runs)
    with pytest.raises(ApprovalRequired) as asked:
        refund("pi_1", 500)
    request_id = asked.value.request_id
    with signed_in(url, ACCOUNT, secret) as http:
        listed = http.get("/approvals")
        assert listed.status_code == 200 and request_id in listed.text
        page = http.get(f"/approvals/{request_id}")
        assert page.status_code == 200 and "acme.refund" in page.text
        form = {"csrf": csrf_in(page.text), "note": "customer called"}
        r = http.post(f"/approvals/{request_id}/grant", data=form)
        assert r.status_code == 303, r.text
        assert r.headers["location"] == f"/approvals/{request_id}?done=granted"
        done = http.get(r.headers["location"])
        assert done.status_code == 200 and "You granted this request." in done.text
    granted = owner.get_approval(request_id)
    assert (granted.state.value, granted.decided_by, granted.note) == (
        "granted",
        ACCOUNT,
        "customer called",
    )
    assert refund("pi_1", 500) == {"refunded": 500}
    with pytest.raises(DuplicateEffect):
        refund("pi_1", 500)
    assert runs == [("pi_1", 500)]
    rec = owner.get_effect("refund:pi_1")
    assert (rec.state.value, rec.approval_id) == ("committed", request_id)
    assert owner.get_approval(request_id).state.value == "used"
    assert owner.verify_receipts().ok


def test_the_console_as_the_approver_resolves_an_ambiguous_effect(console, agent, owner):
    url, secret = console
    an_ambiguous_effect(agent)
    page_url = effect_url(KEY)
    with signed_in(url, ACCOUNT, secret) as http:
        assert KEY in http.get("/effects").text
        page = http.get(page_url)
        assert page.status_code == 200 and "the bank timed out" in page.text
        form = {"csrf": csrf_in(page.text), "outcome": "failed", "note": "the bank says no"}
        r = http.post(page_url + "/resolve", data=form)
        assert r.status_code == 303, r.text
        assert r.headers["location"] == page_url + "?done=resolved"
    rec = owner.get_effect(KEY)
    assert (rec.state.value, rec.resolved_by) == ("failed", ACCOUNT)
    assert owner.list_receipts(KEY)[-1].kind == "resolution"
    assert owner.verify_receipts().ok
    # and the agent's retry may run: a new attempt
    assert agent.reserve_effect(KEY, "act_" + "c" * 32, 60).attempt == 2


def test_the_console_refuses_to_serve_with_the_agents_credentials(duties, agent, owner):
    """The agent role may not read the console's accounts: the server refuses the console's
    first read, and the console stops before it serves, in one line, no password in it."""
    add_account(duties)
    request_id = ask(agent)
    before = (owner.list_receipts(), owner.list_effects())
    env = dict(os.environ, CTRLRUN_STORE=duties.agent_url)
    proc = run_cli("console", "--listen", f"127.0.0.1:{free_port()}", env=env, timeout=60)
    line = assert_one_line_error(proc, "permission denied for table ctrlrun_approvers")
    assert duties.agent.password not in line, line
    assert owner.get_approval(request_id).state.value == "pending"
    assert (owner.list_receipts(), owner.list_effects()) == before


def test_a_console_over_the_agents_store_cannot_sign_anyone_in(duties, agent, owner):
    """Were the start-up check gone, the console app served over the agent's store still signs
    nobody in (the account cannot be read): nobody can reach a decision form, nothing is
    written. The app is served in the test process here (tests_py/console/rig.py), since the
    command itself refuses to start."""
    secret = add_account(duties)
    request_id = ask(agent)
    served = Console(agent)
    try:
        with httpx.Client(base_url=served.url, timeout=30, follow_redirects=False) as http:
            token = csrf_in(http.get("/signin").text)
            r = http.post("/signin", data={"csrf": token, "account": ACCOUNT, "secret": secret})
            assert r.status_code == 503 and "could not be used" in r.text, r.text
            assert "ctrlrun_session" not in http.cookies
            assert duties.agent.password not in r.text
            forged = http.post(f"/approvals/{request_id}/grant", data={"csrf": token})
            assert forged.status_code == 403 and "Sign in first" in forged.text
    finally:
        served.stop()
    assert accounts.listed(owner)[0].name == ACCOUNT
    assert owner.get_approval(request_id).state.value == "pending"
    assert [r.kind for r in owner.list_receipts()] == ["requested"]


def gateway_calls(tmp_path, store_url: str, *calls: Tuple[str, dict]) -> List:
    """``calls`` through ``ctrlrun gateway`` (its own process, a real MCP client on stdio) in
    front of the test upstream (tests_py/support/mcp_upstream.py), with ``store_url`` in
    ``CTRLRUN_STORE``; the stderr of the gateway goes to tmp_path/gateway.err."""
    policy = tmp_path / "ctrlrun.yaml"
    policy.write_text(POLICY)
    argv, env = gateway_command(tmp_path, "--policy", str(policy))
    env["CTRLRUN_STORE"] = store_url
    params = StdioServerParameters(command=argv[0], args=argv[1:], env=env, cwd=str(tmp_path))

    async def main() -> List:
        with open(tmp_path / "gateway.err", "a") as err:
            async with stdio_client(params, errlog=err) as (r, w):
                async with ClientSession(r, w) as s:
                    with anyio.fail_after(120):
                        await s.initialize()
                        return [await s.call_tool(name, args) for name, args in calls]

    return anyio.run(main)


def upstream_runs(tmp_path) -> List[str]:
    log = tmp_path / "upstream.log"
    return log.read_text().splitlines() if log.exists() else []


def test_the_gateway_as_the_agent_forwards_once_and_refuses_the_duplicate(tmp_path, duties, owner):
    call = ("refund", {"payment_id": "pi_7", "amount": 700})
    first, again = gateway_calls(tmp_path, duties.agent_url, call, call)
    assert not first.is_error and first.structured_content == {"refunded": 700}, first
    info = ctrl(again)
    assert (info["refused"], info["effect_key"]) == ("committed", "refund:pi_7")
    assert upstream_runs(tmp_path) == ['["refund", {"amount": 700, "payment_id": "pi_7"}]']
    rec = owner.get_effect("refund:pi_7")
    assert (rec.state.value, rec.action) == ("committed", "mcp.acme.refund")
    assert rec.result["structuredContent"] == {"refunded": 700}
    assert [r.kind for r in owner.list_receipts("refund:pi_7")] == ["reservation", "outcome"]
    # a new gateway process, the same store: still refused, never forwarded
    (later,) = gateway_calls(tmp_path, duties.agent_url, call)
    assert ctrl(later)["refused"] == "committed" and len(upstream_runs(tmp_path)) == 1
    assert owner.verify_receipts().ok
    err = (tmp_path / "gateway.err").read_text()
    assert duties.agent.password not in err and "Traceback" not in err, err


def test_the_gateway_meets_the_stores_policy_as_the_decorator_does(
    tmp_path, duties, owner, approver
):
    """The gateway's own policy says nothing of approval; the store's says 2 approvers: the
    call is answered as needing approval, and forwarded once only after two grants."""
    owner.apply_policy([ActionRule("mcp.acme.refund", "approve", 2)])
    call = ("refund", {"payment_id": "pi_8", "amount": 800})
    (first,) = gateway_calls(tmp_path, duties.agent_url, call)
    info = ctrl(first)
    assert info["refused"] == "approval_required" and upstream_runs(tmp_path) == []
    request_id = info["request_id"]
    assert owner.get_approval(request_id).approvals_needed == 2
    approver.grant_approval(request_id, by="alice")
    (pending,) = gateway_calls(tmp_path, duties.agent_url, call)
    assert ctrl(pending)["refused"] == "approval_required" and upstream_runs(tmp_path) == []
    approver.grant_approval(request_id, by="bob")
    done, again = gateway_calls(tmp_path, duties.agent_url, call, call)
    assert not done.is_error and done.structured_content == {"refunded": 800}, done
    assert ctrl(again)["refused"] == "committed" and len(upstream_runs(tmp_path)) == 1
