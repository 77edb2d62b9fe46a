"""What each duty can do on PostgreSQL (docs/roles.md): the agent's approved call reserves, runs
once and commits; the approver decides and resolves, through the API and the CLI; the owner's
`ctrlrun store roles` refuses roles the server could not keep apart."""

from __future__ import annotations

import os

import pytest

import ctrlrun
from ctrlrun import ApprovalRequired, DuplicateEffect, StorePermissionDenied
from tests_py.support.cli import assert_one_line_error, run_cli


def refunds(store, runs):
    @ctrlrun.protect("acme.refund", effect="refund:{payment_id}", store=store, decision="approve")
    def refund(payment_id: str, amount: int) -> dict:
        runs.append((payment_id, amount))
        return {"refunded": amount}

    return refund


def test_the_agents_approved_call_reserves_runs_once_and_commits(agent, approver, owner):
    runs: list = []
    refund = refunds(agent, runs)
    with pytest.raises(ApprovalRequired) as asked:
        refund("pi_1", 500)
    granted = approver.grant_approval(asked.value.request_id, by="ops:alice")
    assert granted.state.value == "granted"
    assert refund("pi_1", 500) == {"refunded": 500}
    with pytest.raises(DuplicateEffect):
        refund("pi_1", 500)
    assert runs == [("pi_1", 500)]
    rec = owner.get_effect("refund:pi_1")
    assert (rec.state.value, rec.approval_id) == ("committed", asked.value.request_id)
    assert owner.get_approval(asked.value.request_id).state.value == "used"
    assert owner.verify_receipts().ok


def test_the_approver_resolves_and_a_retry_runs(agent, approver, owner):
    agent.reserve_effect("mail:1", "act_" + "a" * 32, 60)
    agent.begin_execution("mail:1", "act_" + "a" * 32)
    agent.mark_ambiguous("mail:1", "act_" + "a" * 32, "timeout")
    rec = approver.resolve_effect("mail:1", "failed", "ops:alice")
    assert (rec.state.value, rec.resolved_by) == ("failed", "ops:alice")
    assert agent.reserve_effect("mail:1", "act_" + "b" * 32, 60).attempt == 2
    assert owner.verify_receipts().ok


def test_the_approver_cannot_reserve_or_manage_accounts(approver, owner):
    with pytest.raises(StorePermissionDenied, match="agent duty"):
        approver.reserve_effect("mail:2", "act_" + "a" * 32, 60)
    assert owner.get_effect("mail:2") is None
    with pytest.raises(StorePermissionDenied, match="owner"):
        approver.add_approver("mallory", "x" * 20)


def test_the_cli_decides_and_resolves_with_approver_credentials(duties, agent, owner):
    runs: list = []
    with pytest.raises(ApprovalRequired) as asked:
        refunds(agent, runs)("pi_9", 900)
    env = dict(os.environ, CTRLRUN_STORE=duties.approver_url)
    proc = run_cli("approve", asked.value.request_id, "--by", "alice", env=env)
    assert proc.returncode == 0, proc.stderr
    assert owner.get_approval(asked.value.request_id).state.value == "granted"
    agent.reserve_effect("mail:3", "act_" + "a" * 32, 60)
    agent.mark_ambiguous("mail:3", "act_" + "a" * 32, "timeout")
    proc = run_cli("resolve", "mail:3", "--committed", "--by", "alice", env=env)
    assert proc.returncode == 0, proc.stderr
    assert owner.get_effect("mail:3").state.value == "committed"


def test_a_role_with_the_old_table_privileges_is_refused_naming_store_roles(duties, owner):
    """The privileges earlier docs recommended (SELECT, INSERT, UPDATE on the tables) give no
    EXECUTE on the duty functions: the first reservation says how to set the roles."""
    duties.pg.psql(
        f'GRANT SELECT, INSERT, UPDATE ON ALL TABLES IN SCHEMA "{duties.schema}" '
        f"TO {duties.approver.name}"
    )
    legacy = ctrlrun.open_store(duties.approver_url)
    try:
        with pytest.raises(StorePermissionDenied, match="ctrlrun store roles"):
            legacy.reserve_effect("mail:4", "act_" + "a" * 32, 60)
    finally:
        legacy.close()


def roles_cli(owner_url: str, *args: str):
    return run_cli("store", "roles", *args, env=dict(os.environ, CTRLRUN_STORE=owner_url))


def test_store_roles_refuses_roles_it_cannot_keep_apart(duties, pg):
    a, p = duties.agent.name, duties.approver.name
    url = duties.owner_url
    assert_one_line_error(roles_cli(url, "--agent", a, "--approver", a), "same role")
    assert_one_line_error(
        roles_cli(url, "--agent", "nobody_xyz", "--approver", p), "no such role", "CREATE ROLE"
    )
    assert_one_line_error(roles_cli(url, "--agent", pg.user, "--approver", p), "superuser")
    pg.psql(f"ALTER ROLE {a} CREATEROLE")
    assert_one_line_error(roles_cli(url, "--agent", a, "--approver", p), "CREATEROLE")
    pg.psql(f"ALTER ROLE {a} NOCREATEROLE; GRANT pg_write_all_data TO {a}")
    assert_one_line_error(roles_cli(url, "--agent", a, "--approver", p), "pg_write_all_data")
    pg.psql(f"REVOKE pg_write_all_data FROM {a}")
    pg.psql(f"GRANT {p} TO {a}")
    assert_one_line_error(roles_cli(url, "--agent", a, "--approver", p), "member of --approver")
    pg.psql(f"REVOKE {p} FROM {a}")
    assert_one_line_error(
        roles_cli("sqlite:///x.db", "--agent", a, "--approver", p), "SQLite store has no roles"
    )
    # not the owner: the agent's own URL cannot hand out duties
    line = assert_one_line_error(
        roles_cli(duties.agent_url, "--agent", a, "--approver", p), "owner's URL"
    )
    assert duties.agent.password not in line


def test_store_roles_print_shows_the_sql_and_changes_nothing(duties):
    proc = roles_cli(
        "postgresql://owner@h/db?schema=s", "--agent", "a", "--approver", "p", "--print"
    )
    assert proc.returncode == 0, proc.stderr
    assert 'GRANT EXECUTE ON FUNCTION "s".ctrlrun_decide(' in proc.stdout
    assert 'REVOKE ALL ON ALL TABLES IN SCHEMA "s" FROM "a";' in proc.stdout
    assert 'GRANT SELECT ON "s".ctrlrun_approvers TO "p";' in proc.stdout
    assert 'GRANT SELECT ON "s".ctrlrun_approvers TO "a";' not in proc.stdout
    # no table privilege but SELECT; the duties recorded for later migrations
    grants = [ln for ln in proc.stdout.splitlines() if ln.startswith("GRANT ")]
    assert all(ln.startswith(("GRANT USAGE", "GRANT SELECT", "GRANT EXECUTE")) for ln in grants)
    assert "VALUES ('duty:a', 'agent')" in proc.stdout
