"""What a process holding the agent's credentials cannot do on PostgreSQL (docs/roles.md): the
server refuses every decision, account change and direct write, through the Store API and
through raw SQL, and nothing is written."""

from __future__ import annotations

import os

import pytest

import ctrlrun
from ctrlrun import AmbiguousEffect, ApprovalRequired, StorePermissionDenied
from tests_py.support.cli import assert_one_line_error, run_cli

KEY = "refund:pi_1"
ACT = "act_" + "a" * 32


def ask(store, payment: str = "pi_1") -> str:
    """A pending request for the refund, asked by the agent."""

    @ctrlrun.protect("acme.refund", effect="refund:{payment_id}", store=store, decision="approve")
    def refund(payment_id: str, amount: int) -> str:
        return "refunded"

    with pytest.raises(ApprovalRequired) as info:
        refund(payment, 500)
    return info.value.request_id


def an_ambiguous_effect(agent) -> None:
    agent.reserve_effect(KEY, ACT, 60)
    agent.begin_execution(KEY, ACT)
    agent.mark_ambiguous(KEY, ACT, "the bank timed out")


def test_the_agent_cannot_grant_or_deny_and_nothing_is_written(agent, owner):
    request_id = ask(agent)
    for decide in (agent.grant_approval, agent.deny_approval):
        with pytest.raises(StorePermissionDenied) as info:
            decide(request_id, by="ops:alice")
        message = str(info.value)
        assert "permission denied for function ctrlrun_" in message
        assert "approver duty" in message and "docs/roles.md" in message
    assert owner.get_approval(request_id).state.value == "pending"
    assert [r.kind for r in owner.list_receipts(KEY)] == ["requested"]


def test_the_agent_cannot_resolve_its_own_ambiguous_effect(agent, owner):
    an_ambiguous_effect(agent)
    for outcome in ("failed", "committed"):
        with pytest.raises(StorePermissionDenied) as info:
            agent.resolve_effect(KEY, outcome, "ops:alice")
        assert "ctrlrun_resolve" in str(info.value)
    assert owner.get_effect(KEY).state.value == "ambiguous"
    with pytest.raises(AmbiguousEffect):  # so a retry stays refused
        agent.reserve_effect(KEY, "act_" + "b" * 32, 60)


def test_the_agent_cannot_fail_an_ambiguous_effect_by_a_late_outcome(agent, owner):
    """The late report of the same attempt is noted; the row stays for a person."""
    an_ambiguous_effect(agent)
    rec = agent.fail_effect(KEY, ACT, "nothing ran, honest", attempt=1)
    assert rec.state.value == "ambiguous" and "a person may resolve it" in rec.error
    assert owner.get_effect(KEY).state.value == "ambiguous"


def test_the_agent_cannot_add_or_reset_console_accounts(duties, owner):
    env = dict(os.environ, CTRLRUN_STORE=duties.agent_url)
    added = run_cli("approvers", "add", "mallory", env=env)
    assert_one_line_error(added, "permission denied", "owner")
    assert owner.list_approvers() == []
    ok = run_cli("approvers", "add", "alice", env=dict(os.environ, CTRLRUN_STORE=duties.owner_url))
    assert ok.returncode == 0, ok.stderr
    reset = run_cli("approvers", "reset", "alice", env=env)
    assert_one_line_error(reset, "permission denied")
    assert duties.sql(duties.agent, "SELECT secret_hash FROM ctrlrun_approvers").returncode != 0


@pytest.mark.parametrize("command", ["approve", "deny"])
def test_the_cli_refuses_a_decision_under_agent_credentials_in_one_line(duties, agent, command):
    request_id = ask(agent)
    env = dict(os.environ, CTRLRUN_STORE=duties.agent_url)
    proc = run_cli(command, request_id, "--by", "alice", env=env)
    line = assert_one_line_error(proc, "permission denied", "approver duty")
    assert duties.agent.password not in line


def test_the_cli_refuses_a_resolution_under_agent_credentials_in_one_line(duties, agent):
    an_ambiguous_effect(agent)
    env = dict(os.environ, CTRLRUN_STORE=duties.agent_url)
    proc = run_cli("resolve", KEY, "--failed", "--by", "alice", env=env)
    assert_one_line_error(proc, "permission denied", "approver duty")


# Raw SQL as the agent role: no direct write, and no function call that decides.
RAW = {
    "insert an effect": "INSERT INTO ctrlrun_effects (key_digest, effect_key, state, action_id, "
    "attempt, created_at, updated_at) VALUES ('\\x00', 'x', 'committed', 'a', 1, 0, 0)",
    "resolve by UPDATE": "UPDATE ctrlrun_effects SET state = 'failed'",
    "grant by UPDATE": "UPDATE ctrlrun_approvals SET state = 'granted'",
    "delete receipts": "DELETE FROM ctrlrun_receipts",
    "truncate": "TRUNCATE ctrlrun_effects",
    "add an account": "INSERT INTO ctrlrun_approvers VALUES ('m', 'h', 0, 0)",
    "loosen the schema": "DROP TRIGGER ctrlrun_effects_receipt_insert ON ctrlrun_effects",
    "call the approver's decide": "SELECT ctrlrun_decide('granted', 0, 0, 'alice', NULL, NULL, "
    "NULL, 'apr_x', 'pending', 0, 'granted', 'w', 'alice')",
    "call the approver's resolve": "SELECT ctrlrun_resolve('refund:pi_1', 'failed', 'a', 1, 0, 0, "
    "NULL, NULL, 'e', 'alice', NULL, NULL, NULL, NULL, NULL, NULL, 'ambiguous', 'a', 1, "
    "'resolution', 'w')",
}
GUARDED = {
    "fail an ambiguous effect through the agent's compare-and-set": (
        "SELECT ctrlrun_cas('refund:pi_1', 'failed', 'a', 1, 0, 0, NULL, NULL, 'e', NULL, NULL, "
        "NULL, NULL, NULL, NULL, NULL, 'ambiguous', 'a', 1, 'late_outcome', 'w')",
        "from ambiguous to failed",
    ),
    "fail an ambiguous effect through the transition": (
        "SELECT * FROM ctrlrun_transition('failed', ARRAY['ambiguous'], true, NULL, 'e', "
        "'refund:pi_1', 'a', 1, NULL, 'outcome', 'w')",
        "from any of {ambiguous} to failed",
    ),
    "insert a committed row": (
        "SELECT * FROM ctrlrun_insert('k', 'committed', 'a', 1, NULL, 60, NULL, NULL, NULL, "
        "NULL, NULL, NULL, NULL, NULL, NULL, 'reservation', 'w')",
        "first attempt",
    ),
    "ask for a request already granted": (
        "SELECT ctrlrun_ask('apr_y', 'acme.refund', 'd', 'k', '{}', 'granted', 0, 60, 60, 0, "
        "'alice', NULL, NULL, NULL, 0, 'requested', 'w', NULL, 1, 'alice')",
        "pending and undecided",
    ),
    "insert a row with no state": (
        "SELECT * FROM ctrlrun_insert('k', NULL, 'a', 1, NULL, 60, NULL, NULL, NULL, "
        "NULL, NULL, NULL, NULL, NULL, NULL, 'reservation', 'w')",
        "first attempt",
    ),
    "write an effect to no state through the compare-and-set": (
        "SELECT ctrlrun_cas('refund:pi_1', NULL, 'a', 1, 0, 0, NULL, NULL, 'e', NULL, NULL, "
        "NULL, NULL, NULL, NULL, NULL, 'ambiguous', 'a', 1, 'late_outcome', 'w')",
        "from ambiguous to <NULL>",
    ),
    "move a request to no state": (
        "SELECT ctrlrun_settle_request(NULL, 0, 0, NULL, NULL, NULL, NULL, 'apr_x', "
        "'pending', 0, 'expired', 'w', NULL)",
        "from pending to <NULL>",
    ),
    "fail an ambiguous effect through an outcome batch": (
        "SELECT * FROM ctrlrun_transition_many(ARRAY['executing', 'failed'], "
        "ARRAY['reserved', 'ambiguous'], ARRAY[true, true], ARRAY[NULL, NULL]::text[], "
        "ARRAY[NULL, 'e'], ARRAY['other:1', 'refund:pi_1'], ARRAY['a', 'a'], "
        "ARRAY[1, 1]::int8[], ARRAY['begin', 'outcome'], 'w')",
        "from any of {reserved,ambiguous} to {executing,failed}",
    ),
    "insert a committed row through a reservation batch": (
        "SELECT * FROM ctrlrun_reserve_many(ARRAY['k2', 'k'], ARRAY['executing', 'committed'], "
        "ARRAY['a', 'a'], ARRAY[60, 60]::int8[], ARRAY['t2', 't'], ARRAY[NULL, NULL]::text[], "
        "ARRAY[NULL, NULL]::text[], ARRAY[NULL, NULL]::text[], ARRAY[NULL, NULL]::text[], 'w')",
        "first attempt (reserved or executing); states {executing,committed}",
    ),
    "grant through the agent's request step": (
        "SELECT ctrlrun_settle_request('granted', 0, 0, 'alice', NULL, NULL, NULL, 'apr_x', "
        "'pending', 0, 'granted', 'w', 'alice')",
        "from pending to granted",
    ),
}


@pytest.mark.parametrize("what", sorted(RAW))
def test_raw_sql_as_the_agent_is_refused_by_the_server(duties, agent, owner, what):
    an_ambiguous_effect(agent)
    before = (owner.get_effect(KEY), owner.list_receipts())
    proc = duties.sql(duties.agent, RAW[what])
    assert proc.returncode != 0
    assert "permission denied" in proc.stderr or "must be owner" in proc.stderr, proc.stderr
    assert (owner.get_effect(KEY), owner.list_receipts()) == before


@pytest.mark.parametrize("what", sorted(GUARDED))
def test_the_agent_functions_refuse_a_step_that_is_not_the_agents(duties, agent, owner, what):
    an_ambiguous_effect(agent)
    request_id = ask(agent, "pi_2")
    before = (owner.get_effect(KEY), owner.list_receipts(), owner.get_approval(request_id))
    sql, says = GUARDED[what]
    proc = duties.sql(duties.agent, sql.replace("apr_x", request_id))
    assert proc.returncode != 0
    assert "ctrlrun: " in proc.stderr and says in proc.stderr, proc.stderr
    after = (owner.get_effect(KEY), owner.list_receipts(), owner.get_approval(request_id))
    assert after == before
