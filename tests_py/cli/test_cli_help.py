"""``ctrlrun --help`` on every subcommand, the console script beside ``python -m ctrlrun``, the demo,
and PostgreSQL passwords that are never printed; in real subprocesses."""

from __future__ import annotations

import json
import os
import re

import pytest

import ctrlrun
from ctrlrun import EffectState
from tests_py.support.cli import (
    CONSOLE_SCRIPT,
    STORE_COMMANDS,
    assert_one_line_error,
    free_port,
    make_ambiguous,
    run_cli,
)

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
    via_script = run_cli(
        "effects", "list", "--json", "--store", store_url, cmd=[str(CONSOLE_SCRIPT)]
    )
    via_module = run_cli("effects", "list", "--json", "--store", store_url)
    assert via_script.returncode == 0 == via_module.returncode, via_script.stderr
    assert json.loads(via_script.stdout) == json.loads(via_module.stdout)
    assert len(json.loads(via_script.stdout)) == 4

    helped = run_cli("--help", cmd=[str(CONSOLE_SCRIPT)])
    assert helped.returncode == 0 and helped.stdout.startswith("Usage: ctrlrun ")

    missing = run_cli(
        "effects", "show", "cli:none", "--store", store_url, cmd=[str(CONSOLE_SCRIPT)]
    )
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
        "refund:pi_2001": EffectState.COMMITTED,
    }
    assert second_store.get_effect("refund:pi_1002").attempt == 2
    assert second_store.get_effect("refund:pi_1003").resolved_by == "ops:alice"
    # the other half: a person's grant through the CLI, then the call ran once; receipts intact
    (request,) = second_store.list_approvals()
    assert request.state.value == "used" and request.granted_by == ("ops:bob",)
    assert f"$ ctrlrun approve {request.request_id} --by ops:bob" in proc.stdout
    assert "the provider saw 1 refund for pi_2001" in proc.stdout
    assert re.search(r"verify_receipts\(\) -> \d+ receipts in 5 chains, intact", proc.stdout)
    lines = proc.stdout.strip().splitlines()
    assert lines[-2] == "4 refunds reached the provider for 4 payments: never twice."
    assert lines[-1].startswith("See it in the console: ctrlrun approvers add alice")


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
