"""A throwaway PostgreSQL cluster from the machine's binaries, for the tests.

``initdb`` refuses to run as root, so as root the cluster is made and run as the ``postgres`` OS
user. It listens on 127.0.0.1 and 127.0.0.2 (two addresses: "two hosts") on a free port, with
trust authentication, in a temporary folder removed on stop.
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
from typing import Dict, List, Optional


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

    def stop(self) -> None:
        subprocess.run(
            [*self._as_user, self._pg_ctl, "-D", self.datadir, "-m", "immediate", "-w", "stop"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            check=False,
        )
        shutil.rmtree(os.path.dirname(self.datadir), ignore_errors=True)


def start_cluster(
    password: Optional[str] = "ctrlrun-test-secret",
    settings: Optional[Dict[str, str]] = None,
    hba: Optional[str] = None,
    files: Optional[Dict[str, str]] = None,
) -> Cluster:
    """Create and start a cluster; raises RuntimeError (with the server's log) on failure.

    With ``password``, TCP connections authenticate with it (scram-sha-256), so the tests can
    check that a wrong password fails and that no message leaks one. ``settings`` are extra
    server settings (``ssl``, ``default_transaction_read_only``), ``hba`` replaces pg_hba.conf,
    ``files`` are copied into the data folder (name -> source path), owned by the server's user
    and private to it (a TLS key must be)."""
    initdb, pg_ctl = _find_bin("initdb"), _find_bin("pg_ctl")
    root = tempfile.mkdtemp(prefix="ctrlrun-pg-")
    datadir = os.path.join(root, "data")
    as_user: List[str] = []
    if os.geteuid() == 0:
        import pwd

        pw = pwd.getpwnam("postgres")
        os.chown(root, pw.pw_uid, pw.pw_gid)
        as_user = ["runuser", "-u", "postgres", "--"]
    port = free_port()
    cmd = [
        *as_user,
        initdb,
        "-D",
        datadir,
        "-U",
        "postgres",
        "-A",
        "trust",
        "-E",
        "UTF8",
        "--no-sync",
        "--no-instructions",
    ]
    pwfile = None
    if password is not None:
        pwfile = os.path.join(root, "pw")
        with open(pwfile, "w") as f:
            f.write(password)
        if as_user:
            os.chown(pwfile, pw.pw_uid, pw.pw_gid)
        cmd = [
            *as_user,
            initdb,
            "-D",
            datadir,
            "-U",
            "postgres",
            "--auth-local=trust",
            "--auth-host=scram-sha-256",
            f"--pwfile={pwfile}",
            "-E",
            "UTF8",
            "--no-sync",
            "--no-instructions",
        ]
    init = subprocess.run(cmd, capture_output=True, text=True)
    if init.returncode != 0:
        raise RuntimeError(f"initdb failed ({init.returncode}): {init.stderr or init.stdout}")
    for name, source in (files or {}).items():
        target = os.path.join(datadir, name)
        shutil.copyfile(source, target)
        os.chmod(target, 0o600)
        if as_user:
            os.chown(target, pw.pw_uid, pw.pw_gid)
    if hba is not None:
        with open(os.path.join(datadir, "pg_hba.conf"), "w") as f:
            f.write(hba)
    logfile = os.path.join(root, "server.log")
    opts = (
        f"-p {port} -k {root} -c listen_addresses='127.0.0.1,127.0.0.2' "
        f"-c max_connections=200 -c fsync=on -c shared_buffers=32MB"
    )
    for name, value in (settings or {}).items():
        opts += f" -c {name}={value}"
    start = subprocess.run(
        [*as_user, pg_ctl, "-D", datadir, "-l", logfile, "-o", opts, "-w", "-t", "60", "start"],
        capture_output=True,
        text=True,
    )
    if start.returncode != 0:
        log = ""
        if os.path.exists(logfile):
            with open(logfile) as f:
                log = f.read()[-4000:]
        raise RuntimeError(f"pg_ctl start failed ({start.returncode}): {start.stderr}\n{log}")
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            time.sleep(0.1)
    return Cluster(datadir, port, "postgres", as_user, pg_ctl, password)


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
        # python3 tests_py/support/pgserver.py -- cargo test: the command, with a server.
        sys.exit(run_with_cluster(sys.argv[2:]))
    # python3 tests_py/support/pgserver.py: start one by hand.
    c = start_cluster()
    print(c.url())
    print(f"stop with: {' '.join(c._as_user)} {c._pg_ctl} -D {c.datadir} stop")
