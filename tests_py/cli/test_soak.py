"""``ctrlrun soak`` (docs/soak.md): the pure judgement on recorded outcomes, the URL the workers
get behind the fault proxy, bad usage (exit 2, one line), and short real runs in OS processes
on SQLite and PostgreSQL (with and without ``--faults``), which must find no double and no lost
call, kill workers, and leave no scratch store behind. A library broken on purpose must make
the soak fail."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import threading
import time
from typing import Any, Dict

import pytest

from ctrlrun.cli.soak_judge import Recorded, judge, percentile
from ctrlrun.cli.soak_proxy import CuttingProxy, NotProxied, proxied_url, upstream_of
from tests_py.support.verify_cli import broken_env, run_cli, run_watching_command_lines, sqlite_url

FIELDS = (
    "verdict doubles lost calls errors reasons calls_per_s ok refused error_samples cut_short "
    "double_keys lost_keys left_for_a_person left_states keys latency_ms kills cuts "
    "does_not_establish backend scratch_store seconds processes faults lease_s workers_started "
    "workers_exited workers_last_exit workers_stopped_by_force"
).split()


# -- the judgement, on recorded outcomes --------------------------------------------------------
def recorded(**changes: Any) -> Recorded:
    """A clean run: three keys, each told ok once and committed, with refusals and an error."""
    base: Dict[str, Any] = dict(
        seconds=2.0,
        attempted=12,
        ended={
            "ok": 3,
            "refused:committed": 4,
            "refused:in_progress": 2,
            "refused:ambiguous": 1,
            "error:StoreWriteFailed": 1,
        },
        ok_keys=["g0-k0", "g0-k1", "g1-k0"],
        latencies_ms=[float(n) for n in range(1, 12)],
        executions={"g0-k0": 1, "g0-k1": 1, "g1-k0": 1, "g1-k1": 1},
        rows={
            "g0-k0": "committed",
            "g0-k1": "committed",
            "g1-k0": "committed",
            "g1-k1": "ambiguous",
            "g2-k0": "executing",
        },
        kills=2,
        samples={"StoreWriteFailed": "reserve_effect ... failed"},
    )
    base.update(changes)
    return Recorded(**base)


def test_a_clean_run_passes_and_counts_refusals_apart_from_errors():
    report = judge(recorded())
    assert (report.verdict, report.exit_status(), report.reasons) == ("pass", 0, ())
    assert (report.doubles, report.lost, report.calls, report.ok) == (0, 0, 12, 3)
    assert report.refused == {"committed": 4, "in_progress": 2, "ambiguous": 1}
    assert report.errors == {"StoreWriteFailed": 1}
    assert report.error_samples == {"StoreWriteFailed": "reserve_effect ... failed"}
    assert report.cut_short == 1  # 12 started, 11 ended: a kill landed in one
    assert report.left_for_a_person == 2
    assert report.left_states == {"ambiguous": 1, "executing": 1}
    assert report.calls_per_s == 6.0 and report.kills == 2 and report.cuts is None
    assert report.latency_ms == {"p50": 6.0, "p95": 11.0, "p99": 11.0}
    assert "PASS" in report.lines("sqlite")[0]


def test_a_double_fails_the_run():
    report = judge(recorded(executions={"g0-k0": 1, "g0-k1": 2, "g1-k0": 1}))
    assert (report.verdict, report.exit_status(), report.doubles) == ("fail", 1, 1)
    assert report.double_keys == ["g0-k1"]
    assert "g0-k1 ran 2 times" in report.reasons[0]
    assert report.lines("sqlite")[0].startswith("soak: FAIL - 1 key(s) ran more than once")


@pytest.mark.parametrize("state", ["executing", "ambiguous", "failed", None])
def test_a_call_told_ok_whose_key_is_not_committed_is_lost(state):
    rows = dict(recorded().rows)
    if state is None:
        del rows["g1-k0"]  # no row at all
    else:
        rows["g1-k0"] = state
    report = judge(recorded(rows=rows))
    assert (report.verdict, report.exit_status(), report.lost) == ("fail", 1, 1)
    assert report.lost_keys == ["g1-k0"]
    assert f"g1-k0 is {state or 'missing'}" in report.reasons[0]


def test_a_run_in_which_nothing_was_told_ok_fails_as_a_control():
    report = judge(recorded(ended={"error:StoreError": 5}, ok_keys=[], executions={}))
    assert (report.verdict, report.exit_status()) == ("fail", 1)
    assert report.reasons == ("control failed: no call was told ok, so the run exercised nothing",)


def test_percentiles_are_nearest_rank():
    assert percentile([], 50) is None
    assert percentile([4.0], 99) == 4.0
    values = [float(n) for n in range(1, 101)]
    assert (percentile(values, 50), percentile(values, 95), percentile(values, 99)) == (
        50.0,
        95.0,
        99.0,
    )


# -- the URL behind the proxy -------------------------------------------------------------------
def test_the_proxied_url_keeps_everything_but_the_host():
    url = "postgresql://ag%40ent:p%3Fw@db.internal:6432/agents?schema=s1&sslmode=require&timeout=5"
    assert upstream_of(url) == ("db.internal", 6432)
    assert proxied_url(url, 40001) == (
        "postgresql://ag%40ent:p%3Fw@127.0.0.1:40001/agents?schema=s1&sslmode=require&timeout=5"
    )
    assert upstream_of("postgres://u@[::1]/d") == ("::1", 5432)
    assert proxied_url("postgres://u@[::1]/d", 7) == "postgres://u@127.0.0.1:7/d"
    assert proxied_url("postgresql://db?connect_timeout=3", 9) == (
        "postgresql://127.0.0.1:9?connect_timeout=3"
    )


@pytest.mark.parametrize(
    "url,why",
    [
        ("postgresql://u:pw@h1:5432,h2:5432/db", "several hosts"),
        ("postgresql://u:pw@/db?host=/var/run/postgresql", "gives host as an option"),
        ("postgresql://u:pw@db/db?hostaddr=10.0.0.1", "gives hostaddr as an option"),
        ("postgresql://u:pw@db/db?sslmode=verify-full", "verify-full"),
        ("postgresql://u:pw@/db", "names no host"),
        ("postgresql://u:pw@db:99999/db", "not a TCP port"),
    ],
)
def test_urls_the_proxy_cannot_stand_in_front_of_are_refused(url, why):
    with pytest.raises(NotProxied, match=why):
        upstream_of(url)


def test_the_proxy_relays_and_cuts_connections_mid_exchange():
    """An echo server behind the proxy: what is sent comes back, until a cut resets the
    connection; new connections go on working."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)

    def echo() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return

            def serve(c: socket.socket = conn) -> None:
                with c:
                    try:
                        while data := c.recv(4096):
                            c.sendall(data)
                    except OSError:
                        pass  # a cut: the proxy reset this side too

            threading.Thread(target=serve, daemon=True).start()

    threading.Thread(target=echo, daemon=True).start()
    echoed = resets = 0
    with CuttingProxy(server.getsockname(), every=(0.05, 0.1), seed=7) as proxy:
        deadline = time.monotonic() + 10
        while (resets < 2 or echoed < 20) and time.monotonic() < deadline:
            with socket.create_connection((proxy.host, proxy.port), timeout=2) as c:
                try:
                    while True:
                        c.sendall(b"ping")
                        got = b""
                        while len(got) < 4:
                            chunk = c.recv(4 - len(got))
                            if not chunk:
                                raise ConnectionError("closed by the proxy")
                            got += chunk
                        assert got == b"ping"
                        echoed += 1
                except OSError:
                    resets += 1
        assert proxy.cuts >= resets >= 2 and echoed >= 20, (proxy.cuts, resets, echoed)
        assert proxy.connections >= resets
    server.close()


# -- bad usage: exit 2, one line ----------------------------------------------------------------
def _one_line_error(proc: subprocess.CompletedProcess, *needles: str) -> str:
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr and proc.stdout == ""
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, proc.stderr
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize(
    "args,needles",
    [
        (["--seconds", "0"], ["--seconds", "1<=x<=86400"]),
        (["--seconds", "86401"], ["--seconds"]),
        (["--processes", "0"], ["--processes", "1<=x<=64"]),
        (["--processes", "65"], ["--processes"]),
        (["--faults"], ["--faults applies to a PostgreSQL store only"]),
        (["--faults", "--store", "postgresql://u:pw@a:1,b:2/d"], ["several hosts"]),
        (["--store", "mysql://root@127.0.0.1/db"], ["mysql"]),
        (["--store", ""], ["--store is empty"]),
    ],
)
def test_bad_usage_exits_2_with_one_line(tmp_path, args, needles):
    proc = run_cli("soak", *args, cwd=tmp_path)
    _one_line_error(proc, *needles)
    assert list(tmp_path.iterdir()) == []


def test_an_unreachable_server_exits_2_with_one_line_and_no_password(tmp_path):
    url = f"postgresql://postgres:pw-xyz@127.0.0.1:{_free_port()}/x"
    line = _one_line_error(run_cli("soak", "--store", url, "--seconds", "1", cwd=tmp_path))
    assert "connect" in line and "pw-xyz" not in line


# -- real runs ------------------------------------------------------------------------------------
def _passed(out: str, proc_rc: int, err: str) -> Dict[str, Any]:
    assert proc_rc == 0, (proc_rc, out, err)
    assert "Traceback" not in err
    report = json.loads(out)
    assert [f for f in FIELDS if f not in report] == []
    assert (report["verdict"], report["doubles"], report["lost"]) == ("pass", 0, 0), report
    assert report["calls"] > 0 and report["ok"] > 0, report
    assert report["kills"] > 0, "workers were killed while the run lasted"
    assert report["workers_started"] == report["processes"] + report["kills"]
    assert report["workers_exited"] == 0, report["workers_last_exit"]
    assert report["left_for_a_person"] == sum(report["left_states"].values())
    assert all(v is not None for v in report["latency_ms"].values())
    return report


def test_a_sqlite_soak_finds_no_double_and_cleans_up(tmp_path):
    """The store comes from CTRLRUN_STORE, as for every command; the scratch store is a file in
    a folder next to it, gone afterwards with the run's own folder."""
    user = tmp_path / "data" / "state.db"
    user.parent.mkdir()
    own_tmp = tmp_path / "tmp"  # the run's folder goes here, out of other tests' way
    own_tmp.mkdir()
    env = dict(os.environ, CTRLRUN_STORE=sqlite_url(user), TMPDIR=str(own_tmp))
    # a real process: TMPDIR is read when it starts (in this one, tempfile cached it long ago)
    proc = run_cli(
        "soak", "--seconds", "3", "--processes", "3", "--json", env=env, cwd=tmp_path, process=True
    )
    report = _passed(proc.stdout, proc.returncode, proc.stderr)
    assert proc.stderr == ""  # --json: no progress
    assert (report["backend"], report["faults"], report["cuts"]) == ("sqlite", False, None)
    assert report["scratch_store"].startswith(sqlite_url(user.parent / "ctrlrun-soak-"))
    assert list(user.parent.iterdir()) == []  # the user's file was never created
    assert list(own_tmp.iterdir()) == []  # the run's own folder is gone too


def test_the_human_report_says_what_a_soak_does_not_establish(tmp_path):
    proc = run_cli(
        "soak", "--store", sqlite_url(tmp_path / "s.db"), "--seconds", "1", "--processes", "1"
    )
    assert proc.returncode == 0, (proc.stdout, proc.stderr)
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("soak: PASS - no double, no lost call (sqlite, 1 process, 1 s)")
    assert "What a soak does not establish:" in lines
    assert any("cannot prove that a double never happens" in ln for ln in lines)
    assert any("does not exercise the remote side" in ln for ln in lines)
    assert "soak: running" in proc.stderr and "scratch store" in proc.stderr


def _soak_watching_command_lines(url: str, *args: str) -> tuple:
    """Run a soak on ``url`` (given in the environment): no process's command line may show
    the password while it runs."""
    password = re.match(r"postgresql://[^:]+:([^@]+)@", url)
    assert password, "the throwaway cluster authenticates with a password"
    out, err, rc, seen, workers = run_watching_command_lines(
        ["soak", "--json", *args],
        {**os.environ, "CTRLRUN_STORE": url},
        password.group(1),
        "ctrlrun.cli.soak_worker",
    )
    assert seen == [] and len(workers) >= 2, (seen, workers)
    return out, rc, err


def _schema_of(scratch_url: str) -> str:
    m = re.search(r"schema=(ctrlrun_scratch_[0-9a-f]+)", scratch_url)
    assert m, scratch_url
    return m.group(1)


def test_a_postgres_soak_finds_no_double_and_drops_its_schema(pg, pg_schema):
    out, rc, err = _soak_watching_command_lines(
        pg.url(pg_schema), "--seconds", "3", "--processes", "3"
    )
    report = _passed(out, rc, err)
    assert (report["backend"], report["cuts"]) == ("postgres", None)
    assert pg.password not in out
    schemas = pg.schemas()
    assert _schema_of(report["scratch_store"]) not in schemas
    assert pg_schema not in schemas  # the user's store was never opened


def test_a_postgres_soak_with_faults_cuts_connections_and_finds_no_double(pg, pg_schema):
    out, rc, err = _soak_watching_command_lines(
        pg.url(pg_schema), "--seconds", "4", "--processes", "3", "--faults"
    )
    report = _passed(out, rc, err)
    assert report["faults"] is True and report["cuts"] > 0, report
    assert _schema_of(report["scratch_store"]) not in pg.schemas()


# -- a broken library must make the soak fail ---------------------------------------------------
def test_a_library_that_runs_a_body_twice_fails_the_soak(tmp_path):
    env = broken_env(tmp_path, "ctrlrun.cli.soak_worker", "twice")
    proc = run_cli(
        "soak", "--store", sqlite_url(tmp_path / "s.db"), "--seconds", "2", "--json", env=env
    )
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    report = json.loads(proc.stdout)
    assert report["verdict"] == "fail" and report["doubles"] > 0, report
    assert report["doubles"] >= report["ok"] > 0  # every key told ok ran twice
    assert "ran more than once" in report["reasons"][0]


def test_a_write_the_store_lost_fails_the_soak():
    """A StoreLostWrite is no ordinary error: the store lost what it acknowledged."""
    report = judge(recorded(ended={"ok": 3, "error:StoreLostWrite": 1}))
    assert report.verdict == "fail" and report.errors == {"StoreLostWrite": 1}
    assert "StoreLostWrite" in report.reasons[0]
