"""``ctrlrun verify`` (SPEC §10): end to end on both backends in real subprocesses (it must pass
on a healthy store, leave the user's data alone and clean its scratch store away), and the
pure judges fed recorded outcomes (they must fail whenever a guarantee or a control failed)."""

from __future__ import annotations

import hashlib
import json
import os
import re
import socket
import subprocess
import sys
import textwrap
import time
import uuid
from dataclasses import replace
from pathlib import Path
from typing import Dict, List, Optional

import pytest

import ctrlrun
from ctrlrun import _core
from ctrlrun import _verify
from ctrlrun._verify import Row, Verdict, WorkerOutcome, judge_g3, judge_g4

PASS_G3 = re.compile(r"^G3 duplicate effect refused( \[[^\]]+\])?: PASS - ")
PASS_G4 = re.compile(r"^G4 one winner under concurrency( \[[^\]]+\])?: PASS - ")


def sqlite_url(path) -> str:
    return f"sqlite:///{path}"


def run_cli(*args: str, env: Optional[Dict[str, str]] = None, cwd=None,
            timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "ctrlrun", *args], capture_output=True, text=True,
        timeout=timeout, env=env if env is not None else dict(os.environ), cwd=cwd,
    )


def out_lines(proc) -> List[str]:
    return [ln for ln in proc.stdout.splitlines() if ln.strip()]


def progress_lines(proc) -> List[str]:
    return [ln for ln in proc.stderr.splitlines() if ln.startswith("verify: ")]


def assert_passed_builtin(proc) -> None:
    assert proc.returncode == 0, (proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr
    lines = out_lines(proc)
    assert len(lines) == 2, proc.stdout
    assert PASS_G3.match(lines[0]), lines[0]
    assert PASS_G4.match(lines[1]), lines[1]
    assert "8 processes" in lines[1]
    prog = progress_lines(proc)
    assert len(prog) >= 4, proc.stderr
    assert any("G3" in p for p in prog)
    assert any("control leg" in p for p in prog)
    assert any("contended leg" in p for p in prog)


def scratch_url_from(proc) -> str:
    for ln in progress_lines(proc):
        m = re.match(r"verify: scratch store (\S+?)…?$", ln)
        if m:
            return m.group(1)
    raise AssertionError(f"no scratch store line in {proc.stderr!r}")


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def snapshot_sqlite(path: Path) -> Dict[str, str]:
    """The hashes of the database file and its -wal / -shm companions, if present."""
    snap = {}
    for suffix in ("", "-wal", "-shm"):
        p = Path(str(path) + suffix)
        if p.exists():
            snap[suffix or "main"] = sha(p)
    return snap


def populate(url: str) -> List[ctrlrun.EffectRecord]:
    with ctrlrun.open_store(url) as s:
        @ctrlrun.protect("user.action", effect="user:{n}", store=s)
        def act(n):
            return {"n": n}

        act("1")
        act("2")
        # the very key the built-in check uses would collide if verify touched this store
        s.reserve_effect("verify:probe", "act_" + uuid.uuid4().hex, 3600)
        return s.list_effects()


def rows_of(url: str) -> List[ctrlrun.EffectRecord]:
    with ctrlrun.open_store(url) as s:
        return s.list_effects()


# --------------------------------------------------------------------------------------------
# end to end, healthy stores
# --------------------------------------------------------------------------------------------


def test_verify_sqlite_passes_and_leaves_user_store_untouched(tmp_path):
    userdb = tmp_path / "user.db"
    url = sqlite_url(userdb)
    before_rows = populate(url)
    before = snapshot_sqlite(userdb)
    assert "main" in before
    listing = sorted(p.name for p in tmp_path.iterdir())

    proc = run_cli("verify", "--store", url, cwd=tmp_path)
    assert_passed_builtin(proc)

    scratch = scratch_url_from(proc)
    assert scratch.startswith("sqlite:///")
    scratch_path = scratch[len("sqlite:///"):]
    assert os.path.abspath(scratch_path) != str(userdb)
    assert not os.path.exists(scratch_path)
    assert not os.path.exists(os.path.dirname(scratch_path))

    # the user's file (and companions) are byte-identical, and nothing was left beside it
    assert snapshot_sqlite(userdb) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == listing
    assert rows_of(url) == before_rows


def test_verify_postgres_passes_and_leaves_user_schema_untouched(pg, pg_schema):
    url = pg.url(pg_schema)
    before_rows = populate(url)
    raw = f'SELECT * FROM "{pg_schema}".ctrlrun_effects ORDER BY effect_key'
    before_raw = pg.psql(raw)
    schemas_before = pg.schemas()

    proc = run_cli("verify", "--store", url)
    assert_passed_builtin(proc)

    scratch = scratch_url_from(proc)
    m = re.search(r"[?&]schema=([^&]+)", scratch)
    assert m, scratch
    scratch_schema = m.group(1)
    assert scratch_schema != pg_schema
    assert scratch_schema.startswith(_core.SCRATCH_SCHEMA_PREFIX)

    assert pg.psql(raw) == before_raw
    assert rows_of(url) == before_rows
    after = pg.schemas()
    assert after == schemas_before
    assert scratch_schema not in after
    assert not [s for s in after if s.startswith(("ctrlrun_verify_", _core.SCRATCH_SCHEMA_PREFIX))]
    if pg.password:
        assert pg.password not in proc.stdout and pg.password not in proc.stderr


def test_verify_uses_default_store_backend(pg, pg_schema, tmp_path):
    """Without --store, verify proves the default store's backend (CTRLRUN_STORE)."""
    env = dict(os.environ, CTRLRUN_STORE=pg.url(pg_schema))
    schemas_before = pg.schemas()
    proc = run_cli("verify", env=env, cwd=tmp_path)
    assert_passed_builtin(proc)
    assert scratch_url_from(proc).startswith("postgresql://")
    assert pg.schemas() == schemas_before
    assert list(tmp_path.iterdir()) == []


def test_verify_ignores_the_users_policy_without_policy_option(tmp_path):
    """Without --policy the built-in check runs; a policy in sight (even one denying the
    built-in action, or CTRLRUN_CONFIG naming a broken file) does not reach the workers."""
    (tmp_path / "ctrlrun.yaml").write_text(
        "schema: ctrlrun.policy/v2\nactions:\n  ctrlrun.verify:\n    decision: deny\n")
    broken = tmp_path / "broken.yaml"
    broken.write_text("schema: nope\n")
    env = dict(os.environ, CTRLRUN_CONFIG=str(broken))
    proc = run_cli("verify", "--store", sqlite_url(tmp_path / "u.db"), env=env, cwd=tmp_path)
    assert_passed_builtin(proc)


POLICY_THREE = textwrap.dedent("""\
    schema: ctrlrun.policy/v2
    actions:
      billing.refund:
        effect: "refund:{payment_id}"
      mail.send:
        effect: "mail:{to}:{template}"
        decision: allow
      audit.log:
        decision: allow
    """)


def test_verify_policy_per_templated_action(store_url, tmp_path):
    pol = tmp_path / "policy.yaml"
    pol.write_text(POLICY_THREE)
    proc = run_cli("verify", "--store", store_url, "--policy", str(pol), cwd=tmp_path)
    assert proc.returncode == 0, (proc.stdout, proc.stderr)
    lines = out_lines(proc)
    assert len(lines) == 6, proc.stdout
    passes = [ln for ln in lines if ": PASS - " in ln]
    nas = [ln for ln in lines if ": N/A - " in ln]
    assert len(passes) == 4 and len(nas) == 2
    for action in ("billing.refund", "mail.send"):
        mine = [ln for ln in passes if f"[{action}]" in ln]
        assert len(mine) == 2
        assert any(PASS_G3.match(ln) for ln in mine) and any(PASS_G4.match(ln) for ln in mine)
    assert all("[audit.log]" in ln for ln in nas)
    assert {ln[:2] for ln in nas} == {"G3", "G4"}
    assert all("no effect template" in ln for ln in nas)
    assert not any("[ctrlrun.verify]" in ln for ln in lines)


def test_verify_covers_approve_actions_granting_its_own_approvals(store_url, tmp_path):
    # the seed's policy: an approve action behind the gateway
    pol = tmp_path / "policy.yaml"
    pol.write_text(textwrap.dedent("""\
        schema: ctrlrun.policy/v2
        actions:
          mcp.acme.create_refund:
            effect: "refund:{payment_id}"
            decision: approve
        """))
    proc = run_cli("verify", "--store", store_url, "--policy", str(pol), cwd=tmp_path)
    # what failed, whole, first (the report's lines are long: a plain repr would be cut)
    assert proc.returncode == 0, "\n".join(
        [ln for ln in proc.stdout.splitlines() if "PASS" not in ln] + [proc.stderr[-2000:]])
    lines = out_lines(proc)
    assert len(lines) == 2 and all("[mcp.acme.create_refund]" in ln for ln in lines), lines
    assert any(PASS_G3.match(ln) for ln in lines) and any(PASS_G4.match(ln) for ln in lines)
    # the grants went to the scratch stores only
    with ctrlrun.open_store(store_url) as user_store:
        assert user_store.list_approvals() == [] and user_store.list_effects() == []


def test_verify_policy_without_templates_is_not_applicable(tmp_path):
    pol = tmp_path / "policy.yaml"
    pol.write_text(textwrap.dedent("""\
        schema: ctrlrun.policy/v2
        actions:
          audit.log:
            decision: allow
          danger.drop:
            decision: deny
            effect: "drop:{table}"
        """))
    proc = run_cli("verify", "--store", sqlite_url(tmp_path / "u.db"), "--policy", str(pol),
                   cwd=tmp_path)
    assert proc.returncode == 0, (proc.stdout, proc.stderr)
    lines = out_lines(proc)
    assert len(lines) == 4, proc.stdout
    assert all(": N/A - " in ln for ln in lines)
    assert not any("PASS" in ln or "FAIL" in ln for ln in lines)
    audit = [ln for ln in lines if "[audit.log]" in ln]
    deny = [ln for ln in lines if "[danger.drop]" in ln]
    assert len(audit) == 2 and all("no effect template" in ln for ln in audit)
    assert len(deny) == 2 and all("denied" in ln for ln in deny)


def test_verify_policy_with_no_actions_is_not_applicable(tmp_path):
    pol = tmp_path / "policy.yaml"
    pol.write_text("schema: ctrlrun.policy/v2\nactions: {}\n")
    proc = run_cli("verify", "--store", sqlite_url(tmp_path / "u.db"), "--policy", str(pol),
                   cwd=tmp_path)
    assert proc.returncode == 0, (proc.stdout, proc.stderr)
    lines = out_lines(proc)
    assert len(lines) == 2
    assert lines[0].startswith("G3 ") and lines[1].startswith("G4 ")
    assert all(": N/A - " in ln and "no actions" in ln for ln in lines)


def test_verify_policy_literal_template_is_not_a_false_failure(tmp_path):
    """SPEC §7: a template with no placeholder is a literal key, so a valid policy entry.
    On a healthy store verify must not report a failure for it (it cannot put 8 control
    workers on 8 different keys, and the contended key was already committed by G3)."""
    pol = tmp_path / "policy.yaml"
    pol.write_text("schema: ctrlrun.policy/v2\nactions:\n  cron.nightly:\n"
                   "    effect: \"nightly-report\"\n")
    proc = run_cli("verify", "--store", sqlite_url(tmp_path / "u.db"), "--policy", str(pol),
                   cwd=tmp_path)
    lines = out_lines(proc)
    assert len(lines) == 2, proc.stdout
    assert not any(": FAIL - " in ln for ln in lines), proc.stdout
    assert proc.returncode == 0, proc.stdout


def test_verify_policy_repeated_placeholder(tmp_path):
    pol = tmp_path / "policy.yaml"
    pol.write_text("schema: ctrlrun.policy/v2\nactions:\n  rep.action:\n"
                   "    effect: \"x:{a}:{a}\"\n")
    proc = run_cli("verify", "--store", sqlite_url(tmp_path / "u.db"), "--policy", str(pol),
                   cwd=tmp_path)
    assert proc.returncode == 0, (proc.stdout, proc.stderr)
    lines = out_lines(proc)
    assert len(lines) == 2
    assert PASS_G3.match(lines[0]) and "[rep.action]" in lines[0]
    assert PASS_G4.match(lines[1]) and "[rep.action]" in lines[1]


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
    pol.write_text("schema: ctrlrun.policy/v2\nactions:\n  a.b:\n    effect: \"k:{x\"\n")
    proc = run_cli("verify", "--store", sqlite_url(tmp_path / "u.db"), "--policy", str(pol),
                   cwd=tmp_path)
    assert_one_line_error(proc, f"{pol}:4", "actions.a.b.effect")
    # nothing was started: no scratch store line, nothing left in the folder
    assert progress_lines(proc) == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.yaml"]


def test_verify_missing_policy_file_exit_2(tmp_path):
    missing = tmp_path / "nope.yaml"
    proc = run_cli("verify", "--store", sqlite_url(tmp_path / "u.db"), "--policy", str(missing),
                   cwd=tmp_path)
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
    proc = run_cli("verify", "--store", f"postgresql://postgres:pw-xyz@127.0.0.1:{port}/x",
                   cwd=tmp_path)
    line = assert_one_line_error(proc, "connect")
    assert "pw-xyz" not in line
    # the error is the one that stopped the run, not a follow-up from cleaning up after it
    assert "drop" not in line, line


# --------------------------------------------------------------------------------------------
# end to end, a broken library makes verify fail (exit 1), never pass
# --------------------------------------------------------------------------------------------

SITECUSTOMIZE = textwrap.dedent("""\
    import os
    with open("/proc/self/cmdline", "rb") as _f:
        _cmd = _f.read()
    if b"ctrlrun._verify_worker" in _cmd:
        _mode = os.environ.get("CTRLRUN_TEST_BREAK")
        if _mode == "crash":
            os._exit(3)
        import ctrlrun._runner as _p
        _orig = _p.run
        if _mode == "twice":
            def _run(store, key, lease_us, fn, args, kwargs, spec=None, heartbeat=False):
                def both(*a, **k):
                    fn(*a, **k)
                    return fn(*a, **k)
                return _orig(store, key, lease_us, both, args, kwargs, spec, heartbeat)
            _p.run = _run
        elif _mode == "unreserved":
            _p.run = (lambda store, key, lease_us, fn, args, kwargs, spec=None, heartbeat=False:
                      fn(*args, **kwargs))
    """)


@pytest.mark.parametrize("mode,g3_reason,g4_reason", [
    ("crash", "control failed", "control failed"),
    ("twice", "ran 2 times", "ran 2 times"),
    ("unreserved", "not refused", "control failed"),
])
def test_verify_fails_when_the_guarantee_is_broken(tmp_path, mode, g3_reason, g4_reason):
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(SITECUSTOMIZE)
    env = dict(os.environ, PYTHONPATH=str(hook), CTRLRUN_TEST_BREAK=mode)
    proc = run_cli("verify", "--store", sqlite_url(tmp_path / "u.db"), env=env, cwd=tmp_path)
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr
    lines = out_lines(proc)
    assert len(lines) == 2, proc.stdout
    assert lines[0].startswith("G3 ") and ": FAIL - " in lines[0] and g3_reason in lines[0], lines[0]
    assert lines[1].startswith("G4 ") and ": FAIL - " in lines[1] and g4_reason in lines[1], lines[1]
    if mode == "crash":
        assert "crashed" in lines[0] and "crashed" in lines[1]


# --------------------------------------------------------------------------------------------
# the judges, on recorded outcomes
# --------------------------------------------------------------------------------------------

A1 = "act_" + "1" * 32
A2 = "act_" + "2" * 32


def g3_good():
    return dict(
        first=WorkerOutcome(0, "verify:k", "committed", A1),
        second=WorkerOutcome(1, "verify:k", "duplicate:committed"),
        executions=1,
        row=Row("committed", 1, A1),
    )


def g4_good():
    control = [WorkerOutcome(i, f"verify:c{i}", "committed", f"act_{i:032x}") for i in range(8)]
    contended = [WorkerOutcome(0, "verify:x", "committed", A1)] + [
        WorkerOutcome(i, "verify:x", "duplicate:in_progress" if i % 2 else "duplicate:committed")
        for i in range(1, 8)
    ]
    return dict(
        control=control,
        control_executions={w.key: 1 for w in control},
        control_rows={w.key: Row("committed", 1, w.action_id) for w in control},
        contended=contended,
        contended_executions=1,
        contended_row=Row("committed", 1, A1),
    )


def test_judge_g3_pass():
    v = judge_g3(**g3_good(), action="billing.refund")
    assert v == Verdict("G3", "pass", v.reason, "billing.refund")
    assert v.status == "pass"
    assert v.line().startswith("G3 duplicate effect refused [billing.refund]: PASS - ")


def test_judge_g4_pass():
    v = judge_g4(**g4_good())
    assert v.status == "pass", v.reason
    assert v.guarantee == "G4"
    assert v.line().startswith("G4 one winner under concurrency: PASS - ")


def g3_with(**changes):
    args = g3_good()
    args.update(changes)
    return judge_g3(**args)


def g4_with(**changes):
    args = g4_good()
    args.update(changes)
    return judge_g4(**args)


@pytest.mark.parametrize("changes,needles", [
    # two winners: the second attempt committed too
    (dict(second=WorkerOutcome(1, "verify:k", "committed", A2)), ["not refused", "committed"]),
    # the second attempt not refused as a committed duplicate
    (dict(second=WorkerOutcome(1, "verify:k", "duplicate:in_progress")),
     ["not refused", "duplicate:in_progress"]),
    (dict(second=WorkerOutcome(1, "verify:k", "ambiguous", detail="lease lapsed")),
     ["not refused", "ambiguous", "lease lapsed"]),
    (dict(second=WorkerOutcome(1, "verify:k", "error", detail="StoreError: disk full")),
     ["not refused", "disk full"]),
    # the executor ran twice (or never)
    (dict(executions=2), ["ran 2 times"]),
    (dict(executions=0), ["ran 0 times"]),
    # a failed control: the first attempt did not commit
    (dict(first=WorkerOutcome(0, "verify:k", "error", detail="StoreWriteFailed: busy")),
     ["control failed", "busy"]),
    # a worker that crashed, one that timed out
    (dict(first=WorkerOutcome(0, "verify:k", "crashed", detail="exit 1: boom")),
     ["control failed", "crashed", "exit 1: boom"]),
    (dict(second=WorkerOutcome(1, "verify:k", "crashed", detail="exit -9: no output")),
     ["crashed", "exit -9"]),
    (dict(first=WorkerOutcome(0, "verify:k", "timeout", detail="no report within 120 s")),
     ["control failed", "timeout"]),
    (dict(second=WorkerOutcome(1, "verify:k", "timeout")), ["timeout"]),
    # the row left behind
    (dict(row=None), ["no row"]),
    (dict(row=Row("ambiguous", 1, A1)), ["ambiguous", "expected committed"]),
    (dict(row=Row("executing", 1, A1)), ["executing"]),
    (dict(row=Row("committed", 2, A1)), ["attempt 2"]),
    (dict(row=Row("committed", 1, A2)), [A2, A1]),
])
def test_judge_g3_fails(changes, needles):
    v = g3_with(**changes, action="x.y")
    assert v.status == "fail", v
    assert v.guarantee == "G3" and v.action == "x.y"
    for n in needles:
        assert n in v.reason, (n, v.reason)
    assert ": FAIL - " in v.line()


def _contended(outcomes):
    return [WorkerOutcome(i, "verify:x", o, A1 if o == "committed" and i == 0 else
                          (A2 if o == "committed" else None)) for i, o in enumerate(outcomes)]


def _control_replaced(index, outcome, detail=""):
    good = g4_good()["control"]
    w = good[index]
    return good[:index] + [replace(w, outcome=outcome, detail=detail)] + good[index + 1:]


@pytest.mark.parametrize("changes,needles", [
    # two winners on the contended key
    (dict(contended=_contended(["committed", "committed"] + ["duplicate:in_progress"] * 6)),
     ["2 contenders committed"]),
    # nobody won: a contended leg without its positive result
    (dict(contended=_contended(["duplicate:in_progress"] * 8)), ["0 contenders committed"]),
    # the executor ran twice on the contended key
    (dict(contended_executions=2), ["ran 2 times"]),
    # control leg: a worker that did not commit, a key that ran 0 times / twice, a bad row
    (dict(control=_control_replaced(3, "duplicate:in_progress")),
     ["control failed", "worker 3", "duplicate:in_progress"]),
    (dict(control=_control_replaced(5, "error", "StoreWriteFailed: locked")),
     ["control failed", "locked"]),
    (dict(control_executions={**{f"verify:c{i}": 1 for i in range(8)}, "verify:c2": 0}),
     ["control failed", "verify:c2", "ran 0 times"]),
    (dict(control_executions={f"verify:c{i}": 1 for i in range(7)}),
     ["control failed", "verify:c7", "ran 0 times"]),
    (dict(control_executions={**{f"verify:c{i}": 1 for i in range(8)}, "verify:c4": 2}),
     ["control failed", "ran 2 times"]),
    (dict(control_rows={**{f"verify:c{i}": Row("committed", 1, "a") for i in range(8)},
                        "verify:c6": Row("ambiguous", 1, "a")}),
     ["control failed", "verify:c6", "ambiguous"]),
    (dict(control_rows={**{f"verify:c{i}": Row("committed", 1, "a") for i in range(8)},
                        "verify:c1": None}),
     ["control failed", "verify:c1", "missing"]),
    # control leg: too few workers, or not 8 different keys
    (dict(control=g4_good()["control"][:7]), ["control failed", "expected 8"]),
    (dict(control=[replace(w, key="verify:c0") for w in g4_good()["control"]]),
     ["control failed", "on 1"]),
    # a worker that crashed / timed out, in either leg
    (dict(control=_control_replaced(0, "crashed", "exit 1: ImportError")),
     ["control failed", "crashed", "ImportError"]),
    (dict(control=_control_replaced(7, "timeout", "no report within 120 s")),
     ["control failed", "timeout"]),
    (dict(contended=_contended(["committed"] + ["duplicate:in_progress"] * 6 + ["crashed"])),
     ["crashed", "worker 7"]),
    (dict(contended=_contended(["committed"] + ["timeout"] + ["duplicate:committed"] * 6)),
     ["timeout", "worker 1"]),
    (dict(contended=_contended(["committed"] + ["ambiguous"] + ["duplicate:committed"] * 6)),
     ["ambiguous"]),
    (dict(contended=_contended(["committed"] + ["duplicate:committed"] * 6)),
     ["expected 8", "got 7"]),
    # the row left on the contended key
    (dict(contended_row=None), ["missing"]),
    (dict(contended_row=Row("executing", 1, A1)), ["executing"]),
    (dict(contended_row=Row("ambiguous", 1, A1)), ["ambiguous"]),
    (dict(contended_row=Row("committed", 1, A2)), ["another action"]),
])
def test_judge_g4_fails(changes, needles):
    v = g4_with(**changes, action="x.y")
    assert v.status == "fail", v
    assert v.guarantee == "G4" and v.action == "x.y"
    for n in needles:
        assert n in v.reason, (n, v.reason)
    assert ": FAIL - " in v.line()


def test_judges_are_pure():
    """Judging twice gives the same verdict and does not mutate the inputs."""
    args = g4_good()
    snapshot = json.dumps({k: repr(v) for k, v in args.items()})
    assert judge_g4(**args) == judge_g4(**args)
    assert json.dumps({k: repr(v) for k, v in args.items()}) == snapshot
    assert judge_g3(**g3_good()) == judge_g3(**g3_good())


# --------------------------------------------------------------------------------------------
# the exit status
# --------------------------------------------------------------------------------------------

P3 = Verdict("G3", "pass", "ok")
P4 = Verdict("G4", "pass", "ok")
F3 = Verdict("G3", "fail", "the executor ran 2 times for one key")
F4 = Verdict("G4", "fail", "control failed")
N3 = Verdict("G3", "n/a", "no effect template: it runs unreserved", "audit.log")
N4 = Verdict("G4", "n/a", "no effect template: it runs unreserved", "audit.log")


@pytest.mark.parametrize("verdicts,status", [
    ([P3, P4], 0),
    ([P3, P4, N3, N4], 0),
    ([N3, N4], 0),
    ([F3, P4], 1),
    ([P3, F4], 1),
    ([F3, F4], 1),
    ([N3, N4, F4], 1),
    ([P3, P4, N3, N4, F3], 1),
])
def test_report_exit_status(verdicts, status):
    assert _verify.report(verdicts) == status


def test_verdict_lines():
    assert N3.line() == "G3 duplicate effect refused [audit.log]: N/A - no effect template: it runs unreserved"
    assert F4.line() == "G4 one winner under concurrency: FAIL - control failed"


def test_verify_workers_get_the_store_url_off_their_command_lines(pg, pg_schema):
    """The URL, password included, reaches the worker processes on stdin: no process's
    /proc/<pid>/cmdline (readable by every local user) ever shows the password."""
    assert pg.password, "the throwaway cluster authenticates with a password"
    env = {**os.environ, "CTRLRUN_STORE": pg.url(pg_schema)}
    proc = subprocess.Popen([sys.executable, "-m", "ctrlrun", "verify"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    seen, workers = [], set()
    while proc.poll() is None:
        for pid in os.listdir("/proc"):
            if not pid.isdigit():
                continue
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    cmdline = f.read().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if "ctrlrun._verify_worker" in cmdline:
                workers.add(pid)
            if pg.password in cmdline:
                seen.append(cmdline)
        time.sleep(0.01)
    out, err = proc.communicate()
    assert proc.returncode == 0, err
    assert "PASS" in out, out
    assert len(workers) >= 8, "the scan saw the worker processes"
    assert seen == []
