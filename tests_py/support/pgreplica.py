"""A real PostgreSQL primary and a streaming standby of it, for the failover tests.

The primary is a throwaway cluster (throwaway/pgserver.py) with ``wal_level=replica``;
initdb's pg_hba.conf lets the ``postgres`` user replicate from 127.0.0.1 with its password
(scram-sha-256). The standby is ``pg_basebackup -R`` of it, streaming under the
application_name ``STANDBY``. ``synchronous=True`` names it in the primary's
``synchronous_standby_names`` (``FIRST 1 (...)``, set after the base backup, so a promoted
standby never waits for a standby of its own); either way the pair is handed over once the
primary's ``pg_stat_replication`` shows it ``streaming`` as ``sync`` or ``async``.

A standby that misses acknowledged commits, deterministically: :meth:`Replicated.detach_standby`
waits until the standby has replayed everything the primary wrote, then stops its WAL receiver
(``primary_conninfo = ''`` by ALTER SYSTEM, and a reload) and waits until the primary has no
WAL sender for it. From then on, what the primary commits (and, asynchronous, acknowledges at
once) never reaches the standby; :meth:`stop_primary` and :meth:`promote` complete the failover.

Every wait is bounded; a failure raises RuntimeError with the tail of both servers' logs.
:func:`replicated_pair` always stops both clusters and removes their folders.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from contextlib import contextmanager
from typing import Callable, Iterator, List, Optional, Tuple

from throwaway.pgserver import Cluster, _find_bin, launch, new_root, start_cluster

STANDBY = "ctrlrun_standby"
TIMEOUT = 60.0


def store_url(clusters: List[Cluster], schema: str, **options: str) -> str:
    """A ctrlrun store URL naming ``clusters`` in order (one host, or several), the schema and
    ``options`` (``timeout="5"``, ``failover_may_lose_commits="accept"``)."""
    auth = f"{clusters[0].user}:{clusters[0].password}"
    hosts = ",".join(f"127.0.0.1:{c.port}" for c in clusters)
    query = "&".join([f"schema={schema}", *(f"{k}={v}" for k, v in options.items())])
    return f"postgresql://{auth}@{hosts}/postgres?{query}"


class Replicated:
    """A primary and its standby; the standby is promoted by :meth:`promote`."""

    def __init__(self, primary: Cluster, standby: Cluster, synchronous: bool) -> None:
        self.primary = primary
        self.standby = standby
        self.synchronous = synchronous

    def url(self, schema: str, **options: str) -> str:
        """Both hosts, the primary first, with ``target_session_attrs=read-write``."""
        options.setdefault("target_session_attrs", "read-write")
        return store_url([self.primary, self.standby], schema, **options)

    def primary_url(self, schema: str, **options: str) -> str:
        return store_url([self.primary], schema, **options)

    def standby_url(self, schema: str, **options: str) -> str:
        return store_url([self.standby], schema, **options)

    # -- waiting ---------------------------------------------------------------------------
    def fail(self, what: str) -> RuntimeError:
        return RuntimeError(
            f"{what}\n--- primary log (port {self.primary.port}) ---\n{self.primary.log_tail()}"
            f"\n--- standby log (port {self.standby.port}) ---\n{self.standby.log_tail()}"
        )

    def wait(self, what: str, ready: Callable[[], bool], timeout: float = TIMEOUT) -> None:
        """Poll ``ready`` (a psql error counts as not yet) until it holds, or raise."""
        deadline = time.monotonic() + timeout
        last = ""
        while time.monotonic() < deadline:
            try:
                if ready():
                    return
            except (RuntimeError, subprocess.TimeoutExpired) as exc:
                last = str(exc)
            time.sleep(0.05)
        raise self.fail(f"{what}: not within {timeout:.0f} s {last}")

    def replication(self) -> Optional[Tuple[str, str]]:
        """(state, sync_state) of the standby's WAL sender on the primary, or None."""
        row = self.primary.psql(
            "SELECT state || ' ' || sync_state FROM pg_stat_replication "
            f"WHERE application_name = '{STANDBY}'"
        )
        return tuple(row.split()) if row else None  # type: ignore[return-value]

    def wait_caught_up(self) -> None:
        """Until the standby has replayed all the WAL the primary has written so far."""
        lsn = self.primary.psql("SELECT pg_current_wal_lsn()")
        self.wait(
            f"the standby replaying up to {lsn}",
            lambda: self.standby.psql(f"SELECT pg_last_wal_replay_lsn() >= '{lsn}'") == "t",
        )

    # -- faults ----------------------------------------------------------------------------
    def detach_standby(self) -> None:
        """Let the standby catch up, then stop its WAL receiver: commits from now on are never
        received by it (see the module's docstring)."""
        self.wait_caught_up()
        self.standby.psql("ALTER SYSTEM SET primary_conninfo = ''")
        self.standby.psql("SELECT pg_reload_conf()")
        self.wait("the standby's WAL receiver stopping", lambda: self.replication() is None)
        self.wait(
            "no WAL receiver on the standby",
            lambda: self.standby.psql("SELECT count(*) FROM pg_stat_wal_receiver") == "0",
        )

    def kill_primary(self) -> None:
        """SIGKILL the primary's postmaster (its pid from postmaster.pid), as a crashed host;
        returns once its port refuses connections."""
        with open(os.path.join(self.primary.datadir, "postmaster.pid")) as f:
            pid = int(f.readline())
        os.kill(pid, signal.SIGKILL)
        self.wait("the killed primary's port closing", lambda: not _accepts(self.primary.port))

    def stop_primary(self, mode: str = "immediate") -> None:
        done = self.primary.pg_ctl("-m", mode, "-w", "-t", "30", "stop", timeout=TIMEOUT)
        if done.returncode != 0:
            raise self.fail(f"pg_ctl stop -m {mode} of the primary failed: {done.stderr}")

    def promote(self) -> None:
        """``pg_ctl promote`` on the standby; returns once ``pg_is_in_recovery()`` is false."""
        done = self.standby.pg_ctl("-w", "-t", "30", "promote", timeout=TIMEOUT)
        if done.returncode != 0:
            raise self.fail(f"pg_ctl promote of the standby failed: {done.stderr}")
        self.wait("the standby leaving recovery", lambda: self.standby.psql(_RECOVERY) == "f")


_RECOVERY = "SELECT pg_is_in_recovery()"


def _accepts(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return True
    except OSError:
        return False


def _standby_of(primary: Cluster) -> Cluster:
    """``pg_basebackup -R`` of ``primary`` into a folder of its own, started as a hot standby."""
    root, as_user = new_root()
    datadir = os.path.join(root, "data")
    source = f"host=127.0.0.1 port={primary.port} user={primary.user} application_name={STANDBY}"
    env = dict(os.environ, PGPASSWORD=primary.password or "")  # never on a command line
    backup = [_find_bin("pg_basebackup"), "-d", source, "-D", datadir, "-X", "stream", "-R"]
    try:
        done = subprocess.run(
            [*as_user, *backup, "-c", "fast", "--no-sync"],
            capture_output=True,
            text=True,
            env=env,
            timeout=TIMEOUT,
        )
        failed = "" if done.returncode == 0 else f"({done.returncode}): {done.stderr}"
    except subprocess.TimeoutExpired:
        failed = f"(no end in {TIMEOUT:.0f} s)"
    if failed:
        shutil.rmtree(root, ignore_errors=True)
        raise RuntimeError(f"pg_basebackup failed {failed}\n{primary.log_tail()}")
    return launch(datadir, as_user, primary.password, {"hot_standby": "on"})


@contextmanager
def replicated_pair(synchronous: bool) -> Iterator[Replicated]:
    """A primary streaming to a standby, synchronously or not; both stopped and removed on
    exit, whatever happened."""
    primary = start_cluster(settings={"wal_level": "replica", "max_wal_senders": "4"})
    clusters = [primary]
    try:
        standby = _standby_of(primary)
        clusters.append(standby)
        pair = Replicated(primary, standby, synchronous)
        if synchronous:
            primary.psql(f"ALTER SYSTEM SET synchronous_standby_names = 'FIRST 1 ({STANDBY})'")
            primary.psql("SELECT pg_reload_conf()")
        expected = ("streaming", "sync" if synchronous else "async")
        pair.wait(f"the standby {' '.join(expected)}", lambda: pair.replication() == expected)
        yield pair
    finally:
        for cluster in reversed(clusters):
            cluster.stop()
