"""Schema version 8 to 9 (the duty functions): every row and receipt chain kept, the functions
brought to SECURITY DEFINER with EXECUTE taken from PUBLIC."""

from __future__ import annotations

from datetime import timedelta

import pytest

import ctrlrun
from ctrlrun.call.approval import ask
from tests_py.support.stores import SCHEMA_VERSION

NEW_IN_9 = [
    "ctrlrun_cas",
    "ctrlrun_resolve",
    "ctrlrun_ask",
    "ctrlrun_settle_request",
    "ctrlrun_decide",
    "ctrlrun_hold_effect",
    "ctrlrun_lock_request",
]
HOT = ["ctrlrun_insert", "ctrlrun_reserve", "ctrlrun_transition"]


def as_version_8(pg, schema: str) -> None:
    """What a store of version 8 had: the hot functions run as their caller and anyone may
    call them; none of version 9's functions."""
    sql = [f'SET search_path = "{schema}"']
    sql += [f"DROP FUNCTION {name}" for name in NEW_IN_9]
    sql += [f"ALTER FUNCTION {name} SECURITY INVOKER" for name in HOT]
    sql += [f"GRANT EXECUTE ON FUNCTION {name} TO PUBLIC" for name in HOT]
    sql.append("UPDATE ctrlrun_meta SET value = '8' WHERE key = 'schema_version'")
    pg.psql("; ".join(sql))


def definer_functions(pg, schema: str) -> dict:
    out = pg.psql(
        "SELECT p.proname, p.prosecdef, has_function_privilege('public', p.oid, 'EXECUTE') "
        f"FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = '{schema}'"
    )
    return {line.split("|")[0]: tuple(line.split("|")[1:]) for line in out.splitlines()}


def test_version_8_is_brought_to_the_current_version_keeping_every_row_and_chain(pg, pg_schema):
    url = pg.url(pg_schema)
    store = ctrlrun.open_store(url)
    store.reserve_effect("mail:1", "act_" + "a" * 32, 60)
    store.begin_execution("mail:1", "act_" + "a" * 32)
    store.commit_effect("mail:1", "act_" + "a" * 32, {"id": 1})
    store.reserve_effect("mail:2", "act_" + "b" * 32, 60)
    store.mark_ambiguous("mail:2", "act_" + "b" * 32, "timeout")
    req = ask(store, "acme.wire", "wire:1", "d1", {"n": 1}, timedelta(hours=1), approvals_needed=2)
    store.grant_approval(req.request_id, by="alice")
    before = (store.list_effects(), store.list_receipts(), store.list_approvals())
    store.close()

    as_version_8(pg, pg_schema)
    assert pg.psql(f'SELECT value FROM "{pg_schema}".ctrlrun_meta') == "8"
    reopened = ctrlrun.open_store(url)
    try:
        assert pg.psql(f'SELECT value FROM "{pg_schema}".ctrlrun_meta') == str(
            SCHEMA_VERSION["postgres"]
        )
        assert (
            reopened.list_effects(),
            reopened.list_receipts(),
            reopened.list_approvals(),
        ) == before
        assert reopened.verify_receipts().ok
        functions = definer_functions(pg, pg_schema)
        for name in NEW_IN_9 + HOT:
            assert functions[name] == ("t", "f"), name  # definer; PUBLIC may not call it
        # and the chains go on: the second grant, a resolution
        assert reopened.grant_approval(req.request_id, by="bob").state.value == "granted"
        reopened.resolve_effect("mail:2", "failed", "ops:carol")
        assert reopened.verify_receipts().ok
    finally:
        reopened.close()


def test_a_migration_gives_the_recorded_roles_their_duties_again(duties, pg):
    """An upgrade re-creates the functions; the roles `ctrlrun store roles` recorded keep
    their duties on them, so agents go on without an outage."""
    as_version_8(pg, duties.schema)
    ctrlrun.open_store(duties.owner_url).close()  # the owner's process migrates
    agent = ctrlrun.open_store(duties.agent_url)
    approver = ctrlrun.open_store(duties.approver_url)
    try:
        for key in ("mail:9", "mail:10"):
            agent.reserve_effect(key, "act_" + "a" * 32, 60)
            agent.mark_ambiguous(key, "act_" + "a" * 32, "timeout")
        assert approver.resolve_effect("mail:9", "failed", "ops:alice").state.value == "failed"
        with pytest.raises(ctrlrun.StorePermissionDenied):
            agent.resolve_effect("mail:10", "failed", "ops:mallory")
    finally:
        agent.close()
        approver.close()
