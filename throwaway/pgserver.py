"""A throwaway PostgreSQL cluster from the machine's binaries, for the tests and the benchmark.

``initdb`` refuses to run as root, so as root the cluster is made and run as the ``postgres`` OS
user. It listens on 127.0.0.1 and 127.0.0.2 (two addresses: "two hosts") on a free port, with
trust authentication, in a temporary folder removed on stop. A streaming standby of one is made
by tests_py/support/pgreplica.py from the same pieces (``new_root``, ``launch``).
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple


def _find_bin(name: str) -> str:
    found = shutil.which(name)
    if found:
        return found
    candidates = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"), reverse=True)
    if candidates:
        return candidates[0]
    raise RuntimeError(
        f"PostgreSQL's {name} was not found on PATH or under /usr/lib/postgresql/*/bin; "
        f"install the server (Debian: apt-get install postgresql)"
    )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def psql(
    port: int,
    sql: str,
    password: Optional[str] = None,
    host: str = "127.0.0.1",
    user: str = "postgres",
    db: str = "postgres",
    timeout: float = 60,
) -> str:
    """Run ``sql`` (one statement, or several in one implicit transaction) with psql; its
    unaligned output, stripped. Raises RuntimeError with psql's message when it fails."""
    env = dict(os.environ)
    if password:
        env["PGPASSWORD"] = password  # in the environment, never on a command line
    conninfo = f"host={host} port={port} user={user} dbname={db} connect_timeout=5"
    out = subprocess.run(
        [_find_bin("psql"), "-Atq", "-v", "ON_ERROR_STOP=1", "-d", conninfo, "-c", sql],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
    )
    if out.returncode != 0:
        raise RuntimeError(f"psql failed: {out.stderr}")
    return out.stdout.strip()


@dataclass
class Cluster:
    datadir: str
    port: int
    user: str
    _as_user: List[str]
    _pg_ctl: str
    password: Optional[str] = None

    def url(self, host: str = "127.0.0.1", db: str = "postgres") -> str:
        auth = self.user + (f":{self.password}" if self.password else "")
        return f"postgresql://{auth}@{host}:{self.port}/{db}"

    @property
    def root(self) -> str:
        """The cluster's temporary folder: the data folder, the server log, the socket."""
        return os.path.dirname(self.datadir)

    def psql(self, sql: str, timeout: float = 60) -> str:
        return psql(self.port, sql, self.password, user=self.user, timeout=timeout)

    def log_tail(self, chars: int = 4000) -> str:
        return _log_tail(self.root, chars)

    def pg_ctl(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
        """``pg_ctl -D <datadir> ARGS`` as the server's OS user (never raises on its status)."""
        return subprocess.run(
            [*self._as_user, self._pg_ctl, "-D", self.datadir, *args],
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def stop(self) -> None:
        try:
            self.pg_ctl("-m", "immediate", "-w", "-t", "30", "stop")
        except subprocess.TimeoutExpired:
            pass
        shutil.rmtree(self.root, ignore_errors=True)


def _log_tail(root: str, chars: int = 4000) -> str:
    logfile = os.path.join(root, "server.log")
    if not os.path.exists(logfile):
        return ""
    with open(logfile, errors="replace") as f:
        return f.read()[-chars:]


def new_root() -> Tuple[str, List[str]]:
    """A temporary folder for one cluster, and the command prefix that runs a program as the
    server's OS user (``runuser -u postgres --`` as root, which owns the folder; else none)."""
    root = tempfile.mkdtemp(prefix="ctrlrun-pg-")
    if os.geteuid() != 0:
        return root, []
    import pwd

    pw = pwd.getpwnam("postgres")
    os.chown(root, pw.pw_uid, pw.pw_gid)
    return root, ["runuser", "-u", "postgres", "--"]


def _own(path: str, as_user: List[str]) -> None:
    """Make ``path`` the server's user's (as root) and private to it."""
    os.chmod(path, 0o600)
    if as_user:
        import pwd

        pw = pwd.getpwnam("postgres")
        os.chown(path, pw.pw_uid, pw.pw_gid)


def start_cluster(
    password: Optional[str] = "ctrlrun-test-secret",
    settings: Optional[Dict[str, str]] = None,
    hba: Optional[str] = None,
    files: Optional[Dict[str, str]] = None,
) -> Cluster:
    """Create and start a cluster; raises RuntimeError (with the server's log) on failure.

    With ``password``, TCP connections authenticate with it (scram-sha-256), so the tests can
    check that a wrong password fails and that no message leaks one; the generated pg_hba.conf
    also lets the ``postgres`` user connect for replication from 127.0.0.1 with it. ``settings``
    are extra server settings (``ssl``, ``default_transaction_read_only``), ``hba`` replaces
    pg_hba.conf, ``files`` are copied into the data folder (name -> source path), owned by the
    server's user and private to it (a TLS key must be)."""
    initdb = _find_bin("initdb")
    root, as_user = new_root()
    datadir = os.path.join(root, "data")
    auth = ["-A", "trust"]
    if password is not None:
        pwfile = os.path.join(root, "pw")
        with open(pwfile, "w") as f:
            f.write(password)
        _own(pwfile, as_user)
        auth = ["--auth-local=trust", "--auth-host=scram-sha-256", f"--pwfile={pwfile}"]
    cmd = [*as_user, initdb, "-D", datadir, "-U", "postgres", *auth]
    init = subprocess.run(
        [*cmd, "-E", "UTF8", "--no-sync", "--no-instructions"], capture_output=True, text=True
    )
    if init.returncode != 0:
        shutil.rmtree(root, ignore_errors=True)
        raise RuntimeError(f"initdb failed ({init.returncode}): {init.stderr or init.stdout}")
    for name, source in (files or {}).items():
        target = os.path.join(datadir, name)
        shutil.copyfile(source, target)
        _own(target, as_user)
    if hba is not None:
        with open(os.path.join(datadir, "pg_hba.conf"), "w") as f:
            f.write(hba)
    return launch(datadir, as_user, password, settings)


def launch(
    datadir: str,
    as_user: List[str],
    password: Optional[str] = None,
    settings: Optional[Dict[str, str]] = None,
    port: Optional[int] = None,
) -> Cluster:
    """Start the server of the data folder ``datadir`` (in a folder made by ``new_root``) on
    ``port`` (default: a free one) and wait until it accepts connections. On failure the folder
    is removed and RuntimeError raised with the server's log."""
    pg_ctl = _find_bin("pg_ctl")
    root = os.path.dirname(datadir)
    port = port or free_port()
    opts = (
        f"-p {port} -k {root} -c listen_addresses='127.0.0.1,127.0.0.2' "
        f"-c max_connections=200 -c fsync=on -c shared_buffers=32MB"
    )
    for name, value in (settings or {}).items():
        opts += f" -c {name}={value}"
    logfile = os.path.join(root, "server.log")
    try:
        start = subprocess.run(
            [*as_user, pg_ctl, "-D", datadir, "-l", logfile, "-o", opts, "-w", "-t", "60", "start"],
            capture_output=True,
            text=True,
            timeout=90,
        )
        failed = "" if start.returncode == 0 else f"({start.returncode}): {start.stderr}"
    except subprocess.TimeoutExpired:
        failed = "(no answer in 90 s)"
    cluster = Cluster(datadir, port, "postgres", as_user, pg_ctl, password)
    if failed:
        log = _log_tail(root)
        cluster.stop()
        raise RuntimeError(f"pg_ctl start failed {failed}\n{log}")
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            time.sleep(0.1)
    return cluster


def run_with_cluster(argv: List[str]) -> int:
    """Run the command ``argv`` with ``CTRLRUN_TEST_POSTGRES_URL`` naming a server: the one
    already named there, else a throwaway cluster started here and stopped afterwards. The URL
    travels in the environment, never on a command line (it holds the password)."""
    import sys

    env = dict(os.environ)
    if env.get("CTRLRUN_TEST_POSTGRES_URL"):
        return subprocess.run(argv, env=env).returncode
    try:
        cluster = start_cluster()
    except RuntimeError as exc:
        print(f"pgserver: the throwaway PostgreSQL cluster did not start: {exc}", file=sys.stderr)
        return 1
    try:
        env["CTRLRUN_TEST_POSTGRES_URL"] = cluster.url()
        return subprocess.run(argv, env=env).returncode
    finally:
        cluster.stop()


if __name__ == "__main__":
    import sys

    if len(sys.argv) > 2 and sys.argv[1] == "--":
        # python3 -m throwaway.pgserver -- cargo test: the command, with a server.
        sys.exit(run_with_cluster(sys.argv[2:]))
    # python3 -m throwaway.pgserver: start one by hand.
    c = start_cluster()
    print(c.url())
    print(f"stop with: {' '.join(c._as_user)} {c._pg_ctl} -D {c.datadir} stop")
