"""The ``ctrlrun`` command as an operator runs it: every subcommand in a real subprocess
(``python -m ctrlrun`` and the ``ctrlrun`` console script), on SQLite and PostgreSQL, with
the stores populated through the Python API (the ``populated`` fixture: tests_py/cli/conftest.py).
Here ``effects list`` and ``effects show``; ``resolve`` and unreachable stores in
test_cli_resolve.py; ``--help``, the console script, demo and passwords in test_cli_help.py."""

from __future__ import annotations

import json
import os
import re

import ctrlrun
from ctrlrun import EffectState
from tests_py.support.cli import (
    assert_one_line_error,
    make_committed,
    parse_iso,
    parse_show,
    run_cli,
    sqlite_url,
    table_rows,
)

# --------------------------------------------------------------------------------------------
# effects list
# --------------------------------------------------------------------------------------------


def test_list_table_oldest_first_with_lease_text(populated, store_url):
    proc = run_cli("effects", "list", "--store", store_url)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    rows = table_rows(proc.stdout)
    assert [r[0] for r in rows] == ["cli:lapsed", "cli:committed", "cli:ambiguous", "cli:live"]
    assert [r[0] for r in rows] == [r.effect_key for r in populated.list_effects()]
    by_key = {r[0]: r for r in rows}
    assert by_key["cli:committed"][1] == "committed"
    assert by_key["cli:ambiguous"][1] == "ambiguous"
    assert by_key["cli:live"][1] == "reserved"
    assert by_key["cli:lapsed"][1] == "reserved"
    lines = {ln.split()[0]: ln for ln in proc.stdout.splitlines()[1:]}
    # a live lease shows its remaining time; the lapsed one says it lapsed
    assert re.search(r"\b59m\d{2}s left\b", lines["cli:live"]), lines["cli:live"]
    assert "lapsed" not in lines["cli:live"]
    assert re.search(r"\blapsed 1h5[89]m\d{2}s ago\b", lines["cli:lapsed"]), lines["cli:lapsed"]
    assert "left" not in lines["cli:lapsed"]
    for k in ("cli:committed", "cli:ambiguous"):
        assert "left" not in lines[k] and "lapsed" not in lines[k]
    # the action ids and the result / error are shown
    assert populated.get_effect("cli:committed").action_id in lines["cli:committed"]
    assert '{"value": "ok"}' in lines["cli:committed"]
    assert "ValueError" in lines["cli:ambiguous"]
    # listing is read-only: nothing swept the lapsed lease
    assert populated.get_effect("cli:lapsed").state == EffectState.RESERVED


def test_list_state_filter(populated, store_url):
    proc = run_cli("effects", "list", "--state", "reserved", "--store", store_url)
    assert proc.returncode == 0, proc.stderr
    assert [r[0] for r in table_rows(proc.stdout)] == ["cli:lapsed", "cli:live"]

    proc = run_cli("effects", "list", "--state", "ambiguous", "--store", store_url)
    assert proc.returncode == 0, proc.stderr
    assert [r[0] for r in table_rows(proc.stdout)] == ["cli:ambiguous"]

    proc = run_cli("effects", "list", "--state", "failed", "--store", store_url)
    assert proc.returncode == 0, proc.stderr
    assert "EFFECT KEY" not in proc.stdout
    assert "no effects in state failed" in proc.stdout


def test_list_bad_state_is_usage_error(populated, store_url):
    proc = run_cli("effects", "list", "--state", "bogus", "--store", store_url)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert "bogus" in proc.stderr and proc.stdout == ""


def test_list_json_parses_with_iso_datetimes(populated, store_url):
    proc = run_cli("effects", "list", "--json", "--store", store_url)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    records = populated.list_effects()
    assert [d["effect_key"] for d in data] == [r.effect_key for r in records]
    for d, r in zip(data, records):
        assert set(d) == {
            "effect_key",
            "state",
            "action_id",
            "attempt",
            "created_at",
            "updated_at",
            "lease_expires_at",
            "result",
            "error",
            "resolved_by",
            "action",
            "holder",
            "args_digest",
            "approval_id",
        }
        assert (d["action"], d["holder"], d["args_digest"]) == (r.action, r.holder, r.args_digest)
        assert d["state"] == r.state.value
        assert d["action_id"] == r.action_id
        assert d["attempt"] == r.attempt
        assert parse_iso(d["created_at"]) == r.created_at
        assert parse_iso(d["updated_at"]) == r.updated_at
        if r.lease_expires_at is None:
            assert d["lease_expires_at"] is None
        else:
            assert parse_iso(d["lease_expires_at"]) == r.lease_expires_at
        assert d["result"] == r.result
        assert d["error"] == r.error
    by_key = {d["effect_key"]: d for d in data}
    assert by_key["cli:committed"]["result"] == {"value": "ok"}
    assert by_key["cli:live"]["lease_expires_at"] is not None
    assert by_key["cli:committed"]["lease_expires_at"] is None

    proc = run_cli("effects", "list", "--json", "--state", "committed", "--store", store_url)
    assert proc.returncode == 0, proc.stderr
    assert [d["effect_key"] for d in json.loads(proc.stdout)] == ["cli:committed"]


def test_list_empty_store(store, store_url):
    proc = run_cli("effects", "list", "--store", store_url)
    assert proc.returncode == 0, proc.stderr
    assert "no effects" in proc.stdout
    proc = run_cli("effects", "list", "--json", "--store", store_url)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == []


def test_list_uses_default_store_from_environment(populated, store_url, tmp_path):
    env = dict(os.environ, CTRLRUN_STORE=store_url)
    proc = run_cli("effects", "list", env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert [r[0] for r in table_rows(proc.stdout)] == [
        "cli:lapsed",
        "cli:committed",
        "cli:ambiguous",
        "cli:live",
    ]


def test_list_default_sqlite_store_from_ctrlrun_state(tmp_path):
    path = tmp_path / "by-state.db"
    with ctrlrun.open_store(sqlite_url(path)) as s:
        make_committed(s, "cli:via-state")
    env = {k: v for k, v in os.environ.items() if k != "CTRLRUN_STORE"}
    env["CTRLRUN_STATE"] = str(path)
    proc = run_cli("effects", "list", env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert [r[0] for r in table_rows(proc.stdout)] == ["cli:via-state"]


def test_relative_sqlite_url_is_relative_to_working_directory(tmp_path):
    with ctrlrun.open_store(sqlite_url(tmp_path / "rel.db")) as s:
        make_committed(s, "cli:relative")
    proc = run_cli("effects", "list", "--store", "sqlite:///rel.db", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert [r[0] for r in table_rows(proc.stdout)] == ["cli:relative"]


# --------------------------------------------------------------------------------------------
# effects show
# --------------------------------------------------------------------------------------------


def test_show_text(populated, store_url):
    rec = populated.get_effect("cli:committed")
    proc = run_cli("effects", "show", "cli:committed", "--store", store_url)
    assert proc.returncode == 0, proc.stderr
    shown = parse_show(proc.stdout)
    assert shown["effect_key"] == "cli:committed"
    assert shown["state"] == "committed"
    assert shown["action_id"] == rec.action_id
    assert shown["attempt"] == "1"
    assert json.loads(shown["result"]) == {"value": "ok"}
    assert parse_iso(shown["created_at"]) == rec.created_at
    assert shown["lease_expires_at"] == ""
    assert shown["lease"] == "-"

    proc = run_cli("effects", "show", "cli:live", "--store", store_url)
    assert proc.returncode == 0, proc.stderr
    shown = parse_show(proc.stdout)
    assert shown["state"] == "reserved"
    assert re.fullmatch(r"59m\d{2}s left", shown["lease"]), shown["lease"]

    proc = run_cli("effects", "show", "cli:lapsed", "--store", store_url)
    shown = parse_show(proc.stdout)
    assert re.fullmatch(r"lapsed 1h5[89]m\d{2}s ago", shown["lease"]), shown["lease"]

    proc = run_cli("effects", "show", "cli:ambiguous", "--store", store_url)
    shown = parse_show(proc.stdout)
    assert shown["state"] == "ambiguous"
    assert "ValueError: provider reset the connection" in shown["error"]


def test_show_json(populated, store_url):
    rec = populated.get_effect("cli:live")
    proc = run_cli("effects", "show", "cli:live", "--json", "--store", store_url)
    assert proc.returncode == 0, proc.stderr
    d = json.loads(proc.stdout)
    assert d["effect_key"] == "cli:live"
    assert d["state"] == "reserved"
    assert d["action_id"] == rec.action_id
    assert d["attempt"] == 1
    assert parse_iso(d["created_at"]) == rec.created_at
    assert parse_iso(d["updated_at"]) == rec.updated_at
    assert parse_iso(d["lease_expires_at"]) == rec.lease_expires_at
    assert d["result"] is None and d["error"] is None and d["resolved_by"] is None


def test_show_unknown_key_exit_2_one_line(store, store_url):
    make_committed(store, "cli:other")
    proc = run_cli("effects", "show", "cli:no-such-key", "--store", store_url)
    assert_one_line_error(proc, "cli:no-such-key")
    proc = run_cli("effects", "show", "cli:no-such-key", "--json", "--store", store_url)
    assert_one_line_error(proc, "cli:no-such-key")


def test_show_key_is_compared_byte_for_byte(store, store_url):
    make_committed(store, "Cli:Case")
    assert run_cli("effects", "show", "Cli:Case", "--store", store_url).returncode == 0
    assert_one_line_error(run_cli("effects", "show", "cli:case", "--store", store_url))
    assert_one_line_error(run_cli("effects", "show", " Cli:Case", "--store", store_url))
