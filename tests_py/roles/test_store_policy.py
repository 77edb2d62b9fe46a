"""The store's policy holds against an agent whose own policy says nothing (issue 45, item 2):
written by the owner with ``ctrlrun policy apply``, enforced by the PostgreSQL server."""

from __future__ import annotations

import os

import pytest

import ctrlrun
from ctrlrun import ActionDenied, ApprovalRequired, DuplicateEffect, StorePermissionDenied
from ctrlrun.store.policy import ActionRule
from tests_py.support.cli import assert_one_line_error, run_cli

POLICY = """\
schema: ctrlrun.policy/v2
actions:
  acme.wire:
    effect: "wire:{transfer_id}"
    decision: approve
    approvals: 2
  acme.purge:
    effect: "purge:{what}"
    decision: deny
"""


@pytest.fixture
def applied(duties, tmp_path):
    path = tmp_path / "ctrlrun.yaml"
    path.write_text(POLICY)
    proc = run_cli(
        "policy", "apply", str(path), env=dict(os.environ, CTRLRUN_STORE=duties.owner_url)
    )
    assert proc.returncode == 0, proc.stderr
    assert "acme.wire approve (2 approvers)" in proc.stdout
    return path


def wires(store, runs):
    @ctrlrun.protect("acme.wire", effect="wire:{transfer_id}", store=store)  # says nothing
    def wire(transfer_id: str, amount: int) -> str:
        runs.append(transfer_id)
        return "sent"

    return wire


def test_two_approvals_hold_against_an_agent_whose_policy_says_nothing(applied, agent, approver):
    runs: list = []
    wire = wires(agent, runs)
    with pytest.raises(ApprovalRequired) as asked:
        wire("t1", 10_000)
    request_id = asked.value.request_id
    assert agent.get_approval(request_id).approvals_needed == 2
    approver.grant_approval(request_id, by="alice")
    with pytest.raises(ApprovalRequired):  # one grant of two: still pending
        wire("t1", 10_000)
    approver.grant_approval(request_id, by="bob")
    assert wire("t1", 10_000) == "sent"
    with pytest.raises(DuplicateEffect):
        wire("t1", 10_000)
    assert runs == ["t1"]


def test_a_denied_action_never_runs(applied, agent, owner):
    runs: list = []

    @ctrlrun.protect("acme.purge", effect="purge:{what}", store=agent)
    def purge(what: str) -> None:
        runs.append(what)

    with pytest.raises(ActionDenied, match="store's policy"):
        purge("all")
    assert runs == [] and owner.get_effect("purge:all") is None


def test_the_server_refuses_a_reservation_that_skips_the_grant(applied, duties, owner):
    """Raw SQL as the agent: the reservation function itself checks the store's policy."""
    proc = duties.sql(
        duties.agent,
        "SELECT * FROM ctrlrun_reserve('wire:t9', 'executing', 'act_x', 1, NULL, 60, NULL, NULL, "
        "NULL, NULL, 'acme.wire', NULL, 'd', NULL, NULL, 'reservation', 'w')",
    )
    assert proc.returncode != 0 and "requires 2 approver(s)" in proc.stderr, proc.stderr
    assert owner.get_effect("wire:t9") is None


def test_only_the_owner_changes_the_store_policy(applied, duties, agent, approver, owner):
    for store in (agent, approver):
        with pytest.raises(StorePermissionDenied, match="owner"):
            store.apply_policy([ActionRule("acme.wire", "allow")])
    proc = duties.sql(duties.agent, "DELETE FROM ctrlrun_policy")
    assert proc.returncode != 0 and "permission denied" in proc.stderr
    env = dict(os.environ, CTRLRUN_STORE=duties.agent_url)
    assert_one_line_error(run_cli("policy", "apply", str(applied), env=env), "permission denied")
    assert [r.approvals for r in owner.policy() if r.action == "acme.wire"] == [2]


def test_a_renewal_under_another_action_name_does_not_escape_the_rule(duties, agent, owner):
    """A failed key of an action the store's policy then rules: renewing it under no action
    (or another) through the agent's own function is refused by the server."""

    @ctrlrun.protect("acme.wire", effect="wire:{transfer_id}", store=agent)
    def wire(transfer_id: str) -> str:
        raise ctrlrun.NotExecuted("the bank was down")

    with pytest.raises(ctrlrun.NotExecuted):
        wire("t5")
    failed = owner.get_effect("wire:t5")
    assert (failed.state.value, failed.action) == ("failed", "acme.wire")
    owner.apply_policy([ActionRule("acme.wire", "approve", 2)])
    proc = duties.sql(
        duties.agent,
        "SELECT ctrlrun_cas('wire:t5', 'executing', 'act_z', 2, 0, 0, 9999999999999999, NULL, "
        f"NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, 'failed', '{failed.action_id}', 1, "
        "'reservation', 'w')",
    )
    assert proc.returncode != 0 and "requires 2 approver(s) of acme.wire" in proc.stderr, (
        proc.stderr
    )
    assert owner.get_effect("wire:t5") == failed


def test_a_grant_pays_for_one_attempt_even_if_never_marked_used(applied, duties, agent, owner):
    """Raw SQL as the agent: reserve with a grant and skip marking it used, fail, then renew
    with the same grant: the server refuses the second attempt."""
    runs: list = []
    with pytest.raises(ApprovalRequired) as asked:
        wires(agent, runs)("t6", 10)
    rid = asked.value.request_id
    approver_store = ctrlrun.open_store(duties.approver_url)
    try:
        approver_store.grant_approval(rid, by="alice")
        approver_store.grant_approval(rid, by="bob")
    finally:
        approver_store.close()
    digest = owner.get_approval(rid).args_digest
    reserve = (
        "SELECT r_state FROM ctrlrun_reserve('wire:t6', 'executing', 'act_1', 1, NULL, "
        f"60000000, NULL, NULL, NULL, NULL, 'acme.wire', NULL, '{digest}', NULL, '{rid}', "
        "'reservation', 'w')"
    )
    assert duties.sql(duties.agent, reserve).returncode == 0
    fail = (
        "SELECT r_state FROM ctrlrun_transition('failed', ARRAY['executing'], true, NULL, "
        "'NotExecuted: lie', 'wire:t6', 'act_1', 1, NULL, 'outcome', 'w')"
    )
    assert duties.sql(duties.agent, fail).returncode == 0
    renew = duties.sql(
        duties.agent,
        "SELECT ctrlrun_cas('wire:t6', 'executing', 'act_2', 2, 0, 0, 9999999999999999, NULL, "
        f"NULL, NULL, NULL, 'acme.wire', NULL, '{digest}', NULL, '{rid}', 'failed', 'act_1', 1, "
        "'reservation', 'w')",
    )
    assert renew.returncode != 0 and "requires 2 approver(s)" in renew.stderr, renew.stderr
    assert (owner.get_effect("wire:t6").state.value, owner.get_effect("wire:t6").attempt) == (
        "failed",
        1,
    )


def test_one_name_twice_is_not_two_approvers(applied, duties, agent, owner):
    """Raw SQL as the approver: a decision listing one name twice does not pay for a rule of
    two distinct approvers."""
    runs: list = []
    with pytest.raises(ApprovalRequired) as asked:
        wires(agent, runs)("t7", 10)
    rid = asked.value.request_id
    decide = duties.sql(
        duties.approver,
        "SELECT ctrlrun_decide('granted', 9999999999999999, 1, 'alice', NULL, NULL, NULL, "
        f"'{rid}', 'pending', 1, 'granted', 'console', E'alice\\nalice')",
    )
    assert decide.returncode == 0, decide.stderr
    with pytest.raises(ApprovalRequired):
        wires(agent, runs)("t7", 10)
    assert runs == [] and owner.get_effect("wire:t7") is None
