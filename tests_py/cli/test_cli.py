"""The ``ctrlrun`` command as an operator runs it: every subcommand in a real subprocess
(``python -m ctrlrun`` and the ``ctrlrun`` console script), on SQLite and PostgreSQL, with
the stores populated through the Python API."""

from __future__ import annotations

import getpass
import json
import os
import re
import socket
import subprocess
import sys
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Dict, List, Optional

import pytest

import ctrlrun
from ctrlrun import EffectState

from tests_py.support.cli import assert_one_line_error, run_cli

def sqlite_url(path) -> str:
    return f"sqlite:///{path}"


CONSOLE_SCRIPT = Path(sys.executable).parent / "ctrlrun"
ISO_Z = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,6})?Z$")


def new_id() -> str:
    return "act_" + uuid.uuid4().hex


def free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def table_rows(stdout: str) -> List[List[str]]:
    lines = stdout.splitlines()
    assert lines[0].split()[:2] == ["EFFECT", "KEY"], stdout
    return [ln.split() for ln in lines[1:] if ln.strip()]


def parse_show(stdout: str) -> Dict[str, str]:
    out = {}
    for ln in stdout.splitlines():
        k, sep, v = ln.strip().partition(":")
        assert sep, ln
        out[k] = v[1:] if v.startswith(" ") else v
    return out


def parse_iso(text: str) -> datetime:
    assert ISO_Z.match(text), text
    dt = datetime.fromisoformat(text.replace("Z", "+00:00"))
    assert dt.utcoffset() == timedelta(0)
    return dt


def make_committed(store, key: str, value="ok"):
    @ctrlrun.protect("cli.commit", effect="{k}", store=store)
    def do(k):
        return {"value": value}

    do(key)
    return store.get_effect(key)


def make_ambiguous(store, key: str):
    @ctrlrun.protect("cli.ambiguous", effect="{k}", store=store)
    def boom(k):
        raise ValueError("provider reset the connection")

    with pytest.raises(ValueError):
        boom(key)
    rec = store.get_effect(key)
    assert rec.state == EffectState.AMBIGUOUS
    return rec


def make_live(store, key: str, seconds: int = 3600):
    return store.reserve_effect(key, new_id(), seconds)


def make_lapsed(store_url: str, key: str, hours_ago: float = 2):
    past = datetime.now(timezone.utc) - timedelta(hours=hours_ago)
    with ctrlrun.open_store(store_url, clock=lambda: past) as clocked:
        clocked.reserve_effect(key, new_id(), 60)


@pytest.fixture
def populated(store, store_url):
    """committed, ambiguous, live, lapsed (created in that order; the lapsed one is the
    oldest by created_at because it was reserved 2 h in the past)."""
    make_committed(store, "cli:committed")
    make_ambiguous(store, "cli:ambiguous")
    make_live(store, "cli:live")
    make_lapsed(store_url, "cli:lapsed")
    return store


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
        assert set(d) == {"effect_key", "state", "action_id", "attempt", "created_at",
                          "updated_at", "lease_expires_at", "result", "error", "resolved_by",
                          "action", "holder", "args_digest", "approval_id"}
        assert (d["action"], d["holder"], d["args_digest"]) == (r.action, r.holder,
                                                                r.args_digest)
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
        "cli:lapsed", "cli:committed", "cli:ambiguous", "cli:live"]


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
    proc = run_cli("resolve", "cli:crashed", f"--{target}", "--by", "ops:bob",
                   "--store", store_url)
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

STORE_COMMANDS = [
    ["effects", "list"],
    ["effects", "list", "--json"],
    ["effects", "show", "some:key"],
    ["resolve", "some:key", "--committed"],
]


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


# --------------------------------------------------------------------------------------------
# --help, the console script, demo
# --------------------------------------------------------------------------------------------

SUBCOMMANDS = [
    [],
    ["effects"],
    ["effects", "list"],
    ["effects", "show"],
    ["resolve"],
    ["verify"],
    ["demo"],
    ["policy"],
    ["policy", "check"],
]
TAKES_STORE = {("effects", "list"), ("effects", "show"), ("resolve",), ("verify",), ("demo",)}


@pytest.mark.parametrize("argv", SUBCOMMANDS, ids=lambda a: "-".join(a) or "top")
def test_help_on_every_subcommand(argv):
    proc = run_cli(*argv, "--help")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("Usage: ctrlrun" + "".join(" " + a for a in argv)), proc.stdout
    assert "Traceback" not in proc.stderr
    if tuple(argv) in TAKES_STORE:
        assert "--store" in proc.stdout
    if argv == ["resolve"]:
        assert "--committed" in proc.stdout and "--failed" in proc.stdout and "--by" in proc.stdout
    if argv == ["verify"]:
        assert "--policy" in proc.stdout
    if argv == ["effects", "list"]:
        assert "--state" in proc.stdout and "--json" in proc.stdout


def test_top_level_help_lists_every_command():
    proc = run_cli("--help")
    assert proc.returncode == 0
    for name in ("effects", "resolve", "verify", "demo", "policy"):
        assert re.search(rf"^\s+{name}\b", proc.stdout, re.M), name


@pytest.mark.parametrize("argv", [[], ["effects"], ["policy"]], ids=["top", "effects", "policy"])
def test_a_bare_command_or_group_shows_its_help_and_succeeds(argv):
    proc = run_cli(*argv)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    assert proc.stdout == run_cli(*argv, "--help").stdout
    assert proc.stdout.startswith("Usage: ctrlrun" + "".join(" " + a for a in argv))


def test_console_script_matches_python_m(populated, store_url):
    assert CONSOLE_SCRIPT.exists(), CONSOLE_SCRIPT
    via_script = run_cli("effects", "list", "--json", "--store", store_url,
                         cmd=[str(CONSOLE_SCRIPT)])
    via_module = run_cli("effects", "list", "--json", "--store", store_url)
    assert via_script.returncode == 0 == via_module.returncode, via_script.stderr
    assert json.loads(via_script.stdout) == json.loads(via_module.stdout)
    assert len(json.loads(via_script.stdout)) == 4

    helped = run_cli("--help", cmd=[str(CONSOLE_SCRIPT)])
    assert helped.returncode == 0 and helped.stdout.startswith("Usage: ctrlrun ")

    missing = run_cli("effects", "show", "cli:none", "--store", store_url,
                      cmd=[str(CONSOLE_SCRIPT)])
    assert_one_line_error(missing, "cli:none")


def test_demo_default_store(tmp_path):
    env = dict(os.environ, TMPDIR=str(tmp_path))
    proc = run_cli("demo", env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "never twice" in proc.stdout
    assert "Traceback" not in proc.stderr
    assert "the provider saw 1 refund for pi_1001" in proc.stdout
    # the demo used a scratch store, not the default store of the working directory
    assert not (tmp_path / ".ctrlrun").exists()


def test_demo_on_given_store(store_url, second_store):
    proc = run_cli("demo", "--store", store_url)
    assert proc.returncode == 0, proc.stderr
    assert "never twice" in proc.stdout
    states = {r.effect_key: r.state for r in second_store.list_effects()}
    assert states == {
        "refund:pi_1001": EffectState.COMMITTED,
        "refund:pi_1002": EffectState.COMMITTED,
        "refund:pi_1003": EffectState.COMMITTED,
    }
    assert second_store.get_effect("refund:pi_1002").attempt == 2
    assert second_store.get_effect("refund:pi_1003").resolved_by == "ops:alice"


def test_demo_unreachable_store_exit_2():
    proc = run_cli("demo", "--store", f"postgresql://postgres@127.0.0.1:{free_port()}/x")
    assert_one_line_error(proc)


@pytest.mark.parametrize("argv", STORE_COMMANDS[:3], ids=lambda a: "-".join(a))
def test_unreachable_postgres_error_never_shows_the_password(argv):
    url = f"postgresql://postgres:hunter2-pw@127.0.0.1:{free_port()}/x"
    proc = run_cli(*argv, "--store", url)
    line = assert_one_line_error(proc)
    assert "hunter2-pw" not in line


def test_postgres_password_never_printed(pg, pg_schema):
    """The session server's URL carries a password; nothing the CLI prints shows it."""
    url = pg.url(pg_schema)
    with ctrlrun.open_store(url) as s:
        make_ambiguous(s, "cli:pw")
    outputs = [
        run_cli("effects", "list", "--store", url),
        run_cli("effects", "list", "--state", "failed", "--store", url),
        run_cli("effects", "show", "cli:missing", "--store", url),
        run_cli("resolve", "cli:pw", "--committed", "--store", url),
    ]
    assert [p.returncode for p in outputs] == [0, 0, 2, 0], [(p.args, p.stderr) for p in outputs]
    for p in outputs:
        if pg.password:
            assert pg.password not in p.stdout and pg.password not in p.stderr


def test_postgres_wrong_password_exit_2_one_line(pg, pg_schema):
    bad = f"postgresql://{pg.user}:wrong-pw-123@{pg.host}:{pg.port}/{pg.db}?schema={pg_schema}"
    proc = run_cli("effects", "list", "--store", bad)
    if pg.password:  # the session cluster authenticates TCP connections with a password
        line = assert_one_line_error(proc)
        assert "wrong-pw-123" not in line
    else:
        assert proc.returncode == 0, proc.stderr
