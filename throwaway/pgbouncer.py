"""A throwaway PgBouncer in front of a PostgreSQL server, from the machine's binary.

PgBouncer refuses to run as root, so as root it runs as the ``postgres`` OS user (as the
throwaway cluster does). It listens on 127.0.0.1 on a free port, in a temporary folder removed on
stop, with ``pool_mode`` transaction or session and a small server pool, so that many clients
share few server connections (the set-up that exposes state left on a server connection).
Clients authenticate with SCRAM against ``auth_file``; PgBouncer logs in to the server with the
same password. ``restart()`` stops it and starts it again on the same port.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from typing import List, Optional

from .pgserver import free_port


def find_pgbouncer() -> str:
    for candidate in (shutil.which("pgbouncer"), "/usr/sbin/pgbouncer"):
        if candidate and os.path.exists(candidate):
            return candidate
    raise RuntimeError("pgbouncer was not found on PATH (Debian: apt-get install pgbouncer)")


def pgbouncer_version() -> tuple:
    """The installed PgBouncer's version, as numbers (``(1, 18, 0)``)."""
    out = subprocess.run(
        [find_pgbouncer(), "--version"], capture_output=True, text=True, timeout=30
    ).stdout
    first = out.split()[1] if len(out.split()) > 1 else "0"
    return tuple(int(p) for p in first.split(".") if p.isdigit())


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False


class PgBouncer:
    def __init__(
        self,
        server_host: str,
        server_port: int,
        user: str,
        password: Optional[str],
        pool_mode: str = "transaction",
        pool_size: int = 3,
        query_wait_timeout: int = 120,
        settings: str = "",
    ) -> None:
        """``settings``: more lines of the ``[pgbouncer]`` section."""
        assert pool_mode in ("transaction", "session", "statement"), pool_mode
        self.binary = find_pgbouncer()
        self.user, self.password, self.pool_mode = user, password, pool_mode
        self.host, self.port = "127.0.0.1", free_port()
        self.root = tempfile.mkdtemp(prefix="ctrlrun-pgbouncer-")
        self._as_user: List[str] = []
        owner = None
        if os.geteuid() == 0:
            import pwd

            pw = pwd.getpwnam("postgres")
            owner = (pw.pw_uid, pw.pw_gid)
            self._as_user = ["runuser", "-u", "postgres", "--"]
        auth_type = "scram-sha-256" if password else "trust"
        self.ini = os.path.join(self.root, "pgbouncer.ini")
        self.log = os.path.join(self.root, "pgbouncer.log")
        self.pidfile = os.path.join(self.root, "pgbouncer.pid")
        userlist = os.path.join(self.root, "userlist.txt")
        with open(userlist, "w") as f:
            f.write(f'"{user}" "{password or ""}"\n')
        os.chmod(userlist, 0o600)
        with open(self.ini, "w") as f:
            f.write(
                "[databases]\n"
                f"* = host={server_host} port={server_port}\n"
                "[pgbouncer]\n"
                f"listen_addr = {self.host}\nlisten_port = {self.port}\n"
                f"unix_socket_dir = {self.root}\n"
                f"auth_type = {auth_type}\nauth_file = {userlist}\n"
                f"admin_users = {user}\n"
                f"pool_mode = {pool_mode}\n"
                f"default_pool_size = {pool_size}\nmin_pool_size = 0\nreserve_pool_size = 0\n"
                "max_client_conn = 1000\n"
                "server_check_delay = 0\n"
                f"query_wait_timeout = {query_wait_timeout}\nserver_login_retry = 1\n"
                f"logfile = {self.log}\npidfile = {self.pidfile}\n" + settings
            )
        if owner:
            for path in (self.root, userlist, self.ini):
                os.chown(path, *owner)
        self.start()

    def url(self, db: str = "postgres", schema: Optional[str] = None) -> str:
        auth = self.user + (f":{self.password}" if self.password else "")
        url = f"postgresql://{auth}@{self.host}:{self.port}/{db}"
        return url if schema is None else f"{url}?schema={schema}"

    def start(self) -> None:
        seen = len(self._log_tail(full=True))  # a restart appends to the same log
        run = subprocess.run(
            [*self._as_user, self.binary, "-d", self.ini],
            capture_output=True,
            text=True,
            timeout=30,
        )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            pid = self._pid()  # ours, alive, and listening (not another server on the port)
            if (
                pid is not None
                and _alive(pid)
                and f"listening on {self.host}:{self.port}" in self._log_tail(full=True)[seen:]
            ):
                try:
                    socket.create_connection((self.host, self.port), timeout=1).close()
                    return
                except OSError:
                    pass
            time.sleep(0.05)
        raise RuntimeError(
            f"pgbouncer did not start ({run.returncode}): {run.stderr}\n{self._log_tail()}"
        )

    def _log_tail(self, full: bool = False) -> str:
        try:
            with open(self.log) as f:
                text = f.read()
                return text if full else text[-3000:]
        except OSError:
            return ""

    def _pid(self) -> Optional[int]:
        try:
            with open(self.pidfile) as f:
                return int(f.read().strip())
        except (OSError, ValueError):
            return None

    def kill(self) -> None:
        """Stop at once: every client and server connection is cut."""
        pid = self._pid()
        if pid is None:
            return
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.02)
        try:
            os.unlink(self.pidfile)
        except OSError:
            pass

    def restart(self) -> None:
        self.kill()
        self.start()

    def stop(self) -> None:
        self.kill()
        shutil.rmtree(self.root, ignore_errors=True)


def branches(caplog) -> list:
    """The store's recovery branches logged on ``ctrlrun.store`` (the name before the colon)."""
    return [r.getMessage().split(":", 1)[0] for r in caplog.records if r.name == "ctrlrun.store"]
