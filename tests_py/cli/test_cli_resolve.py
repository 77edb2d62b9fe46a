"""``ctrlrun resolve`` in a real subprocess, on SQLite and PostgreSQL, and every store command on
a store it cannot reach (exit 2, one line, nothing created)."""

from __future__ import annotations

import getpass
import os
from pathlib import Path

import pytest

import ctrlrun
from ctrlrun import EffectState
from tests_py.support.cli import (
    STORE_COMMANDS,
    assert_one_line_error,
    free_port,
    make_ambiguous,
    make_committed,
    make_lapsed,
    make_live,
    new_id,
    run_cli,
    sqlite_url,
)

# --------------------------------------------------------------------------------------------
# resolve
# --------------------------------------------------------------------------------------------


def test_resolve_committed_default_resolver(store, second_store, store_url):
    make_ambiguous(store, "cli:amb1")
    proc = run_cli("resolve", "cli:amb1", "--committed", "--store", store_url)
    assert proc.returncode == 0, proc.stderr
    user = getpass.getuser()
    assert proc.stdout.strip() == f"cli:amb1: committed (resolved by cli:{user})"
    rec = second_store.get_effect("cli:amb1")
    assert rec.state == EffectState.COMMITTED
    assert rec.resolved_by == f"cli:{user}"
    assert rec.lease_expires_at is None


def test_resolve_failed_with_by(store, second_store, store_url):
    make_ambiguous(store, "cli:amb2")
    proc = run_cli("resolve", "cli:amb2", "--failed", "--by", "ops:alice", "--store", store_url)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "cli:amb2: failed (resolved by ops:alice)"
    rec = second_store.get_effect("cli:amb2")
    assert rec.state == EffectState.FAILED
    assert rec.resolved_by == "ops:alice"

    # failed means a retry may run: the next reservation is attempt 2
    res = store.reserve_effect("cli:amb2", new_id(), 60)
    assert res.attempt == 2


def test_resolve_committed_key_refused_with_reason(store, second_store, store_url):
    before = make_committed(store, "cli:done")
    proc = run_cli("resolve", "cli:done", "--failed", "--store", store_url)
    line = assert_one_line_error(proc, "cli:done", "committed")
    assert "ambiguous" in line
    assert second_store.get_effect("cli:done") == before


def test_resolve_live_reservation_refused(store, second_store, store_url):
    make_live(store, "cli:held")
    before = second_store.get_effect("cli:held")
    proc = run_cli("resolve", "cli:held", "--committed", "--store", store_url)
    assert_one_line_error(proc, "cli:held", "reserved")
    assert second_store.get_effect("cli:held") == before


@pytest.mark.parametrize("target", ["committed", "failed"])
def test_resolve_settles_a_held_key_whose_lease_lapsed(store, second_store, store_url, target):
    """A holder that crashed leaves its key held; once the lease has lapsed an operator settles
    it directly: the lapse and the resolution are one write."""
    make_lapsed(store_url, "cli:crashed")
    held = second_store.get_effect("cli:crashed")
    assert held.state in (EffectState.RESERVED, EffectState.EXECUTING)
    proc = run_cli("resolve", "cli:crashed", f"--{target}", "--by", "ops:bob", "--store", store_url)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"cli:crashed: {target} (resolved by ops:bob)"
    rec = second_store.get_effect("cli:crashed")
    assert rec.state == EffectState(target)
    assert (rec.attempt, rec.action_id, rec.resolved_by) == (1, held.action_id, "ops:bob")
    assert rec.lease_expires_at is None
    assert "lapsed" in rec.error and rec.error.endswith(f"[resolved as {target} by ops:bob]")


@pytest.mark.parametrize("argv", [["effects", "show", "KEY"], ["resolve", "KEY", "--failed"]])
def test_a_key_that_is_not_utf8_is_one_line_and_exit_2(store, store_url, argv):
    key = os.fsdecode(b"refund:\xff\xfe")  # bytes the shell passes that are not UTF-8
    proc = run_cli(*[key if a == "KEY" else a for a in argv], "--store", store_url)
    assert_one_line_error(proc, "lone surrogate")
    assert store.list_effects() == []


def test_resolve_unknown_key_exit_2(store, store_url):
    make_committed(store, "cli:exists")
    proc = run_cli("resolve", "cli:ghost", "--committed", "--store", store_url)
    assert_one_line_error(proc, "cli:ghost")
    assert store.get_effect("cli:ghost") is None


def test_resolve_without_target_is_usage_error(store, second_store, store_url):
    make_ambiguous(store, "cli:amb3")
    proc = run_cli("resolve", "cli:amb3", "--store", store_url)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert "--committed" in proc.stderr and "--failed" in proc.stderr
    assert proc.stdout == ""
    assert second_store.get_effect("cli:amb3").state == EffectState.AMBIGUOUS


def test_resolve_with_both_targets_is_refused(store, second_store, store_url):
    """``--committed | --failed``: saying both is contradictory, not 'the last one wins'."""
    make_ambiguous(store, "cli:amb4")
    proc = run_cli("resolve", "cli:amb4", "--committed", "--failed", "--store", store_url)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr
    assert second_store.get_effect("cli:amb4").state == EffectState.AMBIGUOUS


def test_resolve_bad_resolver_refused(store, second_store, store_url):
    make_ambiguous(store, "cli:amb5")
    proc = run_cli("resolve", "cli:amb5", "--committed", "--by", "two\nlines", "--store", store_url)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert second_store.get_effect("cli:amb5").state == EffectState.AMBIGUOUS


# --------------------------------------------------------------------------------------------
# unreachable stores
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("argv", STORE_COMMANDS, ids=lambda a: "-".join(a))
def test_unreachable_postgres_exit_2(argv):
    url = f"postgresql://postgres@127.0.0.1:{free_port()}/x"
    proc = run_cli(*argv, "--store", url)
    line = assert_one_line_error(proc)
    assert "127.0.0.1" in line


@pytest.mark.parametrize("argv", STORE_COMMANDS, ids=lambda a: "-".join(a))
@pytest.mark.parametrize("form", ["url", "bare", "missing-dir"])
def test_missing_sqlite_file_exit_2_and_not_created(argv, form, tmp_path):
    if form == "missing-dir":
        path = tmp_path / "nowhere" / "state.db"
    else:
        path = tmp_path / "absent.db"
    store_arg = str(path) if form == "bare" else sqlite_url(path)
    before = sorted(p.name for p in tmp_path.iterdir())
    proc = run_cli(*argv, "--store", store_arg, cwd=tmp_path)
    line = assert_one_line_error(proc)
    assert str(path) in line
    assert not path.exists()
    assert not Path(str(path) + "-wal").exists()
    assert not (tmp_path / "nowhere").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def test_missing_default_store_exit_2_and_not_created(tmp_path):
    default = tmp_path / "default-missing.db"
    env = {k: v for k, v in os.environ.items() if k != "CTRLRUN_STORE"}
    env["CTRLRUN_STATE"] = str(default)
    proc = run_cli("effects", "list", env=env, cwd=tmp_path)
    assert_one_line_error(proc, str(default))
    assert not default.exists()


def test_bad_store_url_exit_2(tmp_path):
    proc = run_cli("effects", "list", "--store", "bogus://nowhere", cwd=tmp_path)
    assert_one_line_error(proc, "bogus")
    path = tmp_path / "s.db"
    with ctrlrun.open_store(sqlite_url(path)):
        pass
    proc = run_cli("effects", "list", "--store", sqlite_url(path) + "?frobnicate=1")
    assert_one_line_error(proc, "frobnicate")
