"""``ctrlrun verify`` (docs/spec.md §10) in real subprocesses when it must not pass: bad usage exits 2 with
one line, a broken library makes it fail (exit 1), and the store URL never shows on a worker's
command line."""

from __future__ import annotations

import os
import socket

import pytest

from tests_py.support.verify_cli import (
    broken_env,
    out_lines,
    posture_lines,
    progress_lines,
    run_cli,
    run_watching_command_lines,
    sqlite_url,
)

# --------------------------------------------------------------------------------------------
# end to end, bad usage -> 2
# --------------------------------------------------------------------------------------------


def assert_one_line_error(proc, *needles: str) -> str:
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr
    errs = [ln for ln in proc.stderr.splitlines() if ln.strip() and not ln.startswith("verify: ")]
    assert len(errs) == 1, proc.stderr
    assert proc.stdout == ""
    for n in needles:
        assert n in errs[0], (n, errs[0])
    return errs[0]


def test_verify_bad_policy_exit_2(tmp_path):
    pol = tmp_path / "bad.yaml"
    pol.write_text('schema: ctrlrun.policy/v2\nactions:\n  a.b:\n    effect: "k:{x"\n')
    proc = run_cli(
        "verify", "--store", sqlite_url(tmp_path / "u.db"), "--policy", str(pol), cwd=tmp_path
    )
    assert_one_line_error(proc, f"{pol}:4", "actions.a.b.effect")
    # nothing was started: no scratch store line, nothing left in the folder
    assert progress_lines(proc) == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.yaml"]


def test_verify_missing_policy_file_exit_2(tmp_path):
    missing = tmp_path / "nope.yaml"
    proc = run_cli(
        "verify", "--store", sqlite_url(tmp_path / "u.db"), "--policy", str(missing), cwd=tmp_path
    )
    assert_one_line_error(proc, str(missing))


def test_verify_unknown_option_exit_2(tmp_path):
    proc = run_cli("verify", "--frobnicate", cwd=tmp_path)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert "--frobnicate" in proc.stderr
    assert proc.stdout == ""


def test_verify_unknown_store_scheme_exit_2(tmp_path):
    """A URL no backend understands is bad usage, not a SQLite file to verify instead."""
    proc = run_cli("verify", "--store", "mysql://root@127.0.0.1/db", cwd=tmp_path)
    assert_one_line_error(proc, "mysql")
    assert list(tmp_path.iterdir()) == []


def test_verify_unreachable_postgres_exit_2(tmp_path):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    proc = run_cli(
        "verify", "--store", f"postgresql://postgres:pw-xyz@127.0.0.1:{port}/x", cwd=tmp_path
    )
    line = assert_one_line_error(proc, "connect")
    assert "pw-xyz" not in line
    # the error is the one that stopped the run, not a follow-up from cleaning up after it
    assert "drop" not in line, line


# --------------------------------------------------------------------------------------------
# end to end, a broken library makes verify fail (exit 1), never pass
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "mode,g3_reason,g4_reason",
    [
        ("crash", "control failed", "control failed"),
        ("twice", "ran 2 times", "ran 2 times"),
        ("unreserved", "not refused", "control failed"),
    ],
)
def test_verify_fails_when_the_guarantee_is_broken(tmp_path, mode, g3_reason, g4_reason):
    env = broken_env(tmp_path, "ctrlrun.cli.verify_worker", mode)
    proc = run_cli("verify", "--store", sqlite_url(tmp_path / "u.db"), env=env, cwd=tmp_path)
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr
    lines = out_lines(proc)
    assert len(lines) == 2, proc.stdout
    assert lines[0].startswith("G3 ") and ": FAIL - " in lines[0] and g3_reason in lines[0], lines[
        0
    ]
    assert lines[1].startswith("G4 ") and ": FAIL - " in lines[1] and g4_reason in lines[1], lines[
        1
    ]
    if mode == "crash":
        assert "crashed" in lines[0] and "crashed" in lines[1]


def test_verify_workers_get_the_store_url_off_their_command_lines(pg, pg_schema):
    """The URL, password included, reaches the worker processes on stdin: no process's
    /proc/<pid>/cmdline (readable by every local user) ever shows the password."""
    assert pg.password, "the throwaway cluster authenticates with a password"
    env = {**os.environ, "CTRLRUN_STORE": pg.url(pg_schema)}
    out, err, rc, seen, workers = run_watching_command_lines(
        ["verify"], env, pg.password, "ctrlrun.cli.verify_worker"
    )
    assert rc == 0, err
    assert "PASS" in out, out
    assert len(workers) >= 8, "the scan saw the worker processes"
    assert seen == []


def test_a_failing_posture_fails_verify_though_the_guarantees_pass(tmp_path, pg, pg_schema):
    """A store that can lose an acknowledged write (a risk its URL accepted) passes G3 and G4 in
    the scratch store, and still fails verify: the posture's FAIL line says which risk."""
    weak_sqlite = sqlite_url(tmp_path / "u.db") + "?synchronous=normal"
    weak_pg = (
        pg.url(pg_schema) + "&crash_may_lose_commits=accept&options=-c%20synchronous_commit%3Doff"
    )
    for url, failing in [
        (weak_sqlite, "posture durable commits: FAIL - synchronous=normal"),
        (weak_pg, "posture durable commits: FAIL - crash_may_lose_commits=accept"),
    ]:
        proc = run_cli("verify", "--store", url, cwd=tmp_path)
        assert proc.returncode == 1, (proc.stdout, proc.stderr)
        assert all(": PASS - " in line for line in out_lines(proc))
        assert any(line.startswith(failing) for line in posture_lines(proc)), proc.stdout
        assert "Traceback" not in proc.stderr
        assert pg.password not in proc.stdout + proc.stderr
