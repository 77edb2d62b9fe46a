"""Failover between a real primary and its streaming standby (issue #46, item 7), on clusters
started here from the machine's binaries (tests_py/support/pgreplica.py).

a. A synchronous standby promoted under load from OS processes: nothing runs twice, nothing a
   caller was told is done goes missing, and calls succeed on the promoted standby.
b. An asynchronous standby that misses acknowledged commits: the outcome write of a call whose
   reservation the failover lost raises ``StoreLostWrite``, never ``DuplicateEffect``; another
   attempt holding the key on the promoted server is made ``ambiguous``.
c. A primary with an asynchronous standby is refused at open unless the URL accepts the risk
   (``failover_may_lose_commits=accept``, warned of); a synchronous one opens quietly.

The failover tests own their pair (they break it); the open tests share one per kind.
"""

from __future__ import annotations

import logging
import os
import subprocess
import threading
import time
import uuid
from typing import Iterator, List, Optional, Tuple

import pytest

import ctrlrun
from ctrlrun import EffectState
from tests_py.support.pgreplica import Replicated, replicated_pair
from tests_py.support.racing import executions, run_workers
from throwaway.pgserver import _find_bin

STORE_LOG = "ctrlrun.store"
BOUNDS = {"timeout": "5", "connect_timeout": "2"}  # every call ends; none hangs on a dead host
ACCEPT = {"failover_may_lose_commits": "accept"}


def new_schema() -> str:
    return "repl_" + uuid.uuid4().hex[:12]


def assert_lost_write(raised: BaseException) -> None:
    """``raised`` is a ``ctrlrun.StoreLostWrite``, looked up here: it lands with the Rust
    core's change; until then the tests expecting it fail, and the module still imports."""
    error = getattr(ctrlrun, "StoreLostWrite", None)
    assert error is not None, f"ctrlrun.StoreLostWrite does not exist; the call raised {raised!r}"
    assert issubclass(error, ctrlrun.StoreError)
    assert isinstance(raised, error), repr(raised)
    assert not isinstance(raised, ctrlrun.DuplicateEffect), repr(raised)


# a. -------------------------------------------------------------------------------------
class Failover(threading.Thread):
    """Once ``at`` executions are marked, SIGKILL the primary, then promote the standby."""

    def __init__(self, pair: Replicated, marks: str, at: int) -> None:
        super().__init__(daemon=True)
        self.pair, self.marks, self.at = pair, marks, at
        self.killed_at = self.promoted_at = 0.0
        self.error: Optional[BaseException] = None

    def run(self) -> None:
        try:
            deadline = time.monotonic() + 60
            while len(os.listdir(self.marks)) < self.at:
                assert time.monotonic() < deadline, "the workers never got going"
                time.sleep(0.01)
            self.pair.kill_primary()
            self.killed_at = time.time()
            time.sleep(0.3)  # calls meet no writable host meanwhile
            self.pair.promote()
            self.promoted_at = time.time()
        except BaseException as exc:  # raised by the test after join
            self.error = exc

    def check(self) -> None:
        self.join(timeout=120)
        if self.error is not None:
            raise self.error
        assert self.promoted_at, "the failover did not finish"


def ok_calls(tmp_path, n: int) -> List[Tuple[str, float]]:
    """(key, time) of every call a worker was told succeeded, from their fsynced files."""
    calls = []
    for i in range(n):
        with open(tmp_path / f"ok{i}") as f:
            calls += [(k, float(t)) for k, t in (line.split() for line in f)]
    return calls


def test_synchronous_failover_under_load_runs_nothing_twice_and_loses_nothing(tmp_path):
    keys = [f"k{i:03d}" for i in range(300)]
    marks = tmp_path / "marks"
    marks.mkdir()
    schema = new_schema()
    with replicated_pair(synchronous=True) as pair:
        url = pair.url(schema, **BOUNDS)
        with ctrlrun.open_store(url) as store:  # the tables exist before the load
            posture = {check: (standing, detail) for check, standing, detail in store.posture()}
        assert posture["replication"][0] == "pass", posture
        assert 'synchronous: standby "ctrlrun_standby"' in posture["replication"][1]
        assert posture["durable commits"][0] == "pass"
        configs = [
            dict(
                url=url,
                marks=str(marks),
                keys=keys,
                threads=4,
                retry=20,
                ok_file=f"{tmp_path}/ok{i}",
            )
            for i in range(3)
        ]
        failover = Failover(pair, str(marks), at=len(keys) // 4)
        failover.start()
        try:
            reports = run_workers(configs, tmp_path)
        finally:
            failover.check()  # the failover's own error first: it explains the workers'
        with ctrlrun.open_store(pair.standby_url(schema)) as promoted:
            states = {r.effect_key: r.state for r in promoted.list_effects()}
            after_failover = dict((c, st) for c, st, _ in promoted.posture())
    assert after_failover["replication"] == "pass"  # the promoted server streams to no one
    runs = executions(marks)
    assert [k for k, n in runs.items() if n > 1] == []  # doubles
    ok = ok_calls(tmp_path, len(configs))
    assert sorted(k for k, _ in ok) == sorted(k for r in reports for k in r["ran"])
    assert [k for k, _ in ok if states.get(k) is not EffectState.COMMITTED] == []  # lost
    # Every body that ran had its reservation acknowledged, so replicated: none is missing.
    assert sorted(set(runs) - set(states)) == []
    assert any(t < failover.killed_at for _, t in ok)
    after = [k for k, t in ok if t > failover.promoted_at]
    assert after, "no call succeeded on the promoted standby"
    errors = [e for r in reports for e in r["errors"]]
    print(
        f"{len(ok)} ok ({len(after)} after the promotion), {len(runs)} executed, "
        f"{len(errors)} store errors during the switch: {sorted({e[1] for e in errors})}"
    )


# b. -------------------------------------------------------------------------------------
@pytest.fixture
def async_pair_to_fail() -> Iterator[Replicated]:
    with replicated_pair(synchronous=False) as pair:
        yield pair


def lost_reservation_call(pair: Replicated, schema: str, contender: bool):
    """A protected call whose reservation the primary acknowledges and the standby never gets;
    its body fails over (the primary stopped immediately, the standby promoted) and, with
    ``contender``, another attempt reserves the same key on the promoted server."""
    store = ctrlrun.open_store(pair.url(schema, **BOUNDS, **ACCEPT))
    assert store.get_effect("pay:o1") is None  # the tables exist, a connection is pooled
    pair.detach_standby()  # it has the tables, and nothing committed from now on
    runs = []

    @ctrlrun.protect("repl.pay", effect="pay:{order}", store=store)
    def pay(order: str) -> str:
        runs.append(order)
        pair.stop_primary("immediate")
        pair.promote()
        if contender:
            with ctrlrun.open_store(pair.standby_url(schema)) as other:
                other.reserve_effect(f"pay:{order}", "act_" + "c" * 32, 60)
        return "paid"

    return store, pay, runs


@pytest.mark.parametrize("contender", [False, True], ids=["no_row", "another_attempt"])
def test_an_outcome_write_the_failover_lost_raises_store_lost_write(async_pair_to_fail, contender):
    """The promoted server has no row for the key, or another attempt's: either way the call
    says its write was lost (not that the key is a duplicate), and the key is left
    ``ambiguous`` for a person (the other attempt's row marked, or the key recorded anew)."""
    pair, schema = async_pair_to_fail, new_schema()
    store, pay, runs = lost_reservation_call(pair, schema, contender)
    with store, pytest.raises(Exception) as info:
        pay("o1")
    assert_lost_write(info.value)
    assert runs == ["o1"]
    assert pair.primary.password not in str(info.value)
    assert info.value.marked  # no row: recorded anew and marked; another attempt's: marked
    with ctrlrun.open_store(pair.standby_url(schema)) as promoted:
        record = promoted.get_effect("pay:o1")
    assert record is not None and record.state is EffectState.AMBIGUOUS, record
    assert record.action_id == ("act_" + "c" * 32 if contender else info.value.action_id)


# c. -------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def async_pair() -> Iterator[Replicated]:
    with replicated_pair(synchronous=False) as pair:
        yield pair


@pytest.fixture(scope="module")
def sync_pair() -> Iterator[Replicated]:
    with replicated_pair(synchronous=True) as pair:
        yield pair


def store_warnings(caplog) -> List[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == STORE_LOG and r.levelno == logging.WARNING
    ]


def url_of(pair: Replicated, hosts: str, **options: str) -> str:
    """A URL of a new schema naming the primary alone, or both hosts (read-write)."""
    if hosts == "primary":
        return pair.primary_url(new_schema(), **BOUNDS, **options)
    return pair.url(new_schema(), **BOUNDS, **options)


@pytest.mark.parametrize("hosts", ["primary", "both"])
def test_a_primary_with_an_asynchronous_standby_is_refused_at_open(async_pair, hosts):
    url = url_of(async_pair, hosts)
    with pytest.raises(ctrlrun.StoreError) as info:
        ctrlrun.open_store(url).close()
    message = str(info.value)
    assert "asynchronous" in message and "failover_may_lose_commits" in message, message
    assert async_pair.primary.password not in message
    # refused before any DDL: the server got no schema
    schema = url.split("schema=")[1].split("&")[0]
    assert (
        async_pair.primary.psql(f"SELECT count(*) FROM pg_namespace WHERE nspname = '{schema}'")
        == "0"
    )


@pytest.mark.parametrize("hosts", ["primary", "both"])
def test_an_accepted_asynchronous_standby_opens_with_a_warning(async_pair, hosts, caplog):
    caplog.set_level(logging.WARNING, logger=STORE_LOG)
    with ctrlrun.open_store(url_of(async_pair, hosts, **ACCEPT)) as store:
        assert store.get_effect("pay:o1") is None
    assert any("asynchronous" in m for m in store_warnings(caplog)), store_warnings(caplog)


def test_a_primary_with_a_synchronous_standby_opens_without_a_warning(sync_pair, caplog):
    caplog.set_level(logging.WARNING, logger=STORE_LOG)
    for hosts in ("primary", "both"):
        with ctrlrun.open_store(url_of(sync_pair, hosts)) as store:
            assert store.get_effect("pay:o1") is None
    assert store_warnings(caplog) == []


def test_a_role_that_cannot_see_the_standbys_is_told_so(sync_pair):
    """Without pg_monitor a role sees that standbys stream but not their sync_state: the store
    opens (synchronous_standby_names is set) and says what it could not check."""
    pw = "plain-" + uuid.uuid4().hex[:8]
    sync_pair.primary.psql(
        f"CREATE ROLE plain_{pw[6:]} LOGIN PASSWORD '{pw}'; "
        f"GRANT CREATE ON DATABASE postgres TO plain_{pw[6:]}"
    )
    url = (
        f"postgresql://plain_{pw[6:]}:{pw}@127.0.0.1:{sync_pair.primary.port}/postgres"
        f"?schema={new_schema()}"
    )
    with ctrlrun.open_store(url) as store:
        posture = {check: (standing, detail) for check, standing, detail in store.posture()}
    standing, detail = posture["replication"]
    assert standing == "not visible", posture
    assert 'standby "ctrlrun_standby" streams' in detail and "pg_monitor" in detail


def test_commits_wait_for_the_synchronous_standby_whatever_the_url_says(tmp_path):
    """`synchronous_commit=local` in the URL would acknowledge a commit the synchronous standby
    never got. With the standby cut off, the reservation waits for it instead and the call
    ends in a store error at the URL's timeout, its body never run; only with both risks
    accepted by name does the same call go through."""
    local = {"options": "-c%20synchronous_commit%3Dlocal", "timeout": "2"}
    with replicated_pair(synchronous=True) as pair:
        schema = new_schema()
        ctrlrun.open_store(pair.primary_url(schema)).close()
        pair.detach_standby()
        runs = []

        def paying(url: str):
            @ctrlrun.protect("repl.pay", effect="pay:{order}", store=url)
            def pay(order: str) -> str:
                runs.append(order)
                return order

            return pay

        with pytest.raises(ctrlrun.StoreError):
            paying(pair.primary_url(schema, **local))("o1")
        assert runs == []
        risky = dict(local, crash_may_lose_commits="accept", failover_may_lose_commits="accept")
        assert paying(pair.primary_url(schema, **risky))("o2") == "o2"
        assert runs == ["o2"]


def test_a_wal_archiver_streaming_from_the_primary_is_no_standby(pg, pg_schema, tmp_path):
    """pg_receivewal (as Barman's barman_receive_wal) streams WAL asynchronously, but nothing
    fails over to it: the store opens, and the posture sees no standby."""
    env = dict(os.environ, PGPASSWORD=pg.password or "")
    receiver = subprocess.Popen(
        [
            _find_bin("pg_receivewal"),
            "-D",
            str(tmp_path),
            "-h",
            pg.host,
            "-p",
            str(pg.port),
            "-U",
            pg.user,
            "--no-loop",
            "-n",
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 30
        while "pg_receivewal" not in pg.psql("SELECT application_name FROM pg_stat_replication"):
            assert receiver.poll() is None, receiver.stderr.read()
            assert time.monotonic() < deadline, "pg_receivewal never streamed"
            time.sleep(0.1)
        with ctrlrun.open_store(pg.url(pg_schema)) as store:
            posture = dict((c, (st, d)) for c, st, d in store.posture())
        assert posture["replication"][0] == "pass", posture
        assert "no standby streams" in posture["replication"][1]
    finally:
        receiver.kill()
        receiver.wait(timeout=30)
