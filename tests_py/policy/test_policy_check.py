"""``ctrlrun policy check``: the actions a policy leaves unreserved, and its exit codes."""

from __future__ import annotations

import os

import pytest

from tests_py.support import cli
from tests_py.support.policy_files import write

# --------------------------------------------------------------------------------------------
# ctrlrun policy check
# --------------------------------------------------------------------------------------------


def run_cli(*args, cwd, env=None):
    return cli.run_cli(*args, cwd=cwd, env=env)


def test_policy_check_lists_unreserved_actions(here):
    path = write(
        here / "mine.yaml",
        """\
        schema: ctrlrun.policy/v2
        actions:
          billing.refund:
            effect: "refund:{payment_id}"
          audit.log:
            decision: allow
          mail.send:
            effect: "mail:{to}"
          crm.update:
            decision: allow
        """,
    )
    proc = run_cli("policy", "check", str(path), cwd=here)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    out = proc.stdout
    assert "valid" in out and "4 action(s)" in out
    unreserved = [ln for ln in out.splitlines() if "unreserved" in ln]
    assert len(unreserved) == 2
    assert "audit.log" in unreserved[0] and "line 5" in unreserved[0]
    assert "crm.update" in unreserved[1] and "line 9" in unreserved[1]
    assert "billing.refund" not in out and "mail.send" not in out


def test_policy_check_all_templated(here):
    path = write(
        here / "mine.yaml",
        """\
        schema: ctrlrun.policy/v2
        actions:
          billing.refund:
            effect: "refund:{payment_id}"
        """,
    )
    proc = run_cli("policy", "check", str(path), cwd=here)
    assert proc.returncode == 0, proc.stderr
    assert "unreserved:" not in proc.stdout
    assert "every allowed action has an effect template" in proc.stdout


def test_policy_check_default_file_and_ctrlrun_config(here):
    write(
        here / "ctrlrun.yaml",
        """\
        schema: ctrlrun.policy/v2
        actions:
          from.cwd:
            decision: allow
        """,
    )
    env = {k: v for k, v in os.environ.items() if k != "CTRLRUN_CONFIG"}
    proc = run_cli("policy", "check", cwd=here, env=env)
    assert proc.returncode == 0, proc.stderr
    assert "from.cwd" in proc.stdout

    named = write(
        here / "named.yaml",
        """\
        schema: ctrlrun.policy/v2
        actions:
          from.env:
            decision: allow
        """,
    )
    proc = run_cli("policy", "check", cwd=here, env=dict(env, CTRLRUN_CONFIG=str(named)))
    assert proc.returncode == 0, proc.stderr
    assert "from.env" in proc.stdout and "from.cwd" not in proc.stdout


@pytest.mark.parametrize(
    "text,line,field",
    [
        (
            'schema: ctrlrun.policy/v2\nactions:\n  a.b:\n    effect: "k:{x"\n',
            4,
            "actions.a.b.effect",
        ),
        ("schema: ctrlrun.policy/v3\n", 1, "schema"),
        (
            "schema: ctrlrun.policy/v2\nactions:\n  a.b:\n    decision: approves\n",
            4,
            "actions.a.b.decision",
        ),
        ("schema: ctrlrun.policy/v2\nactions:\n  a.b: {}\n  a.b: {}\n", 4, "actions.a.b"),
        ("schema: ctrlrun.policy/v2\nextra: 1\n", 2, "extra"),
    ],
)
def test_policy_check_bad_file_exit_2(here, text, line, field):
    path = here / "bad.yaml"
    path.write_text(text)
    proc = run_cli("policy", "check", str(path), cwd=here)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr
    assert proc.stdout == ""
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, proc.stderr
    assert f"{path}:{line}" in lines[0]
    assert field in lines[0]


def test_policy_check_missing_file_exit_2(here):
    proc = run_cli("policy", "check", str(here / "absent.yaml"), cwd=here)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert len([ln for ln in proc.stderr.splitlines() if ln.strip()]) == 1
    assert "absent.yaml" in proc.stderr
