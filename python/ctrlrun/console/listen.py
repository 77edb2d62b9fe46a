"""Where the console listens, and serving it: loopback unless TLS is configured (or the
operator says otherwise, explicitly), uvicorn on a socket bound here (so a port in use is a
clean error, and port 0 gets a free one), TLS through uvicorn's own ssl options; only the
console's own names answered (hosts.py), slow clients bounded (protocol.py)."""

from __future__ import annotations

import ipaddress
import socket
import ssl
import threading
import time
from typing import Any, FrozenSet, Optional, Tuple

import uvicorn

from ctrlrun.console.hosts import HostCheck, console_names
from ctrlrun.console.protocol import MAX_CONNECTIONS, READ_TIMEOUT, bounded_protocol
from ctrlrun.errors import InvalidArgument

__all__ = ["parse_listen", "check_listen", "ConsoleServer", "DEFAULT_LISTEN"]

DEFAULT_LISTEN = "127.0.0.1:8780"


def parse_listen(text: str) -> Tuple[str, int]:
    """``HOST:PORT`` (``[::1]:8780`` for IPv6) as ``(host, port)``; the host an IP address or
    ``localhost``."""
    host, sep, port_text = text.strip().rpartition(":")
    if not sep or not host:
        raise InvalidArgument(f"--listen {text!r}: give HOST:PORT, such as {DEFAULT_LISTEN}")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    try:
        port = int(port_text)
    except ValueError:
        port = -1
    if not 0 <= port <= 65535:
        raise InvalidArgument(f"--listen {text!r}: the port must be a number from 0 to 65535")
    if host != "localhost":
        try:
            host = str(ipaddress.ip_address(host))
        except ValueError:
            raise InvalidArgument(
                f"--listen {text!r}: the host must be an IP address (127.0.0.1, ::1, 0.0.0.0) or "
                f"localhost"
            ) from None
    return host, port


def is_loopback(host: str) -> bool:
    return host == "localhost" or ipaddress.ip_address(host).is_loopback


def check_listen(host: str, tls: bool, allow_insecure: bool) -> None:
    """Refuse to serve sign-in secrets and session cookies in clear text beyond this machine."""
    if is_loopback(host) or tls or allow_insecure:
        return
    raise InvalidArgument(
        f"refusing to listen on {host}, which is not a loopback address, without TLS: "
        f"give --certfile and --keyfile, or --allow-insecure-listen if a TLS proxy in front "
        f"of it is all that reaches it"
    )


def check_tls(certfile: Optional[str], keyfile: Optional[str]) -> bool:
    """Whether TLS is configured; its files are loaded once here so that a wrong one is a
    clean error before anything listens."""
    if (certfile is None) != (keyfile is None):
        raise InvalidArgument("give both --certfile and --keyfile (or neither)")
    if certfile is None or keyfile is None:
        return False
    try:
        ssl.create_default_context(ssl.Purpose.CLIENT_AUTH).load_cert_chain(certfile, keyfile)
    except (OSError, ssl.SSLError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else type(exc).__name__
        raise InvalidArgument(
            f"the TLS certificate {certfile} and key {keyfile} cannot be loaded ({why})"
        ) from None
    return True


class ConsoleServer:
    """The console app served by uvicorn on ``host:port`` (bound at construction), answering
    only to ``names`` (:func:`console_names`; by default, those of ``host``)."""

    def __init__(
        self,
        app: Any,
        host: str,
        port: int,
        certfile: Optional[str] = None,
        keyfile: Optional[str] = None,
        names: Optional[FrozenSet[str]] = None,
        read_timeout: float = READ_TIMEOUT,
        max_connections: int = MAX_CONNECTIONS,
    ) -> None:
        self.tls = check_tls(certfile, keyfile)
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self.sock = socket.socket(family, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            self.sock.bind((host, port))
        except OSError as exc:
            self.sock.close()
            raise InvalidArgument(f"cannot listen on {host}:{port}: {exc.strerror}") from None
        self.sock.listen(128)
        self.host, self.port = host, self.sock.getsockname()[1]
        self.names = console_names(host) if names is None else names
        config = uvicorn.Config(
            HostCheck(app, self.names),
            log_level="warning",
            access_log=False,
            lifespan="off",
            ssl_certfile=certfile,
            ssl_keyfile=keyfile,
            server_header=False,
            # The client's address is the peer's, never one an X-Forwarded-For header names
            # (uvicorn believes those from loopback by default): the sign-in limit and the
            # trusted-proxy check rest on it.
            proxy_headers=False,
            forwarded_allow_ips=[],
            # h11 with the bounds uvicorn lacks (protocol.py); a request's head stays within
            # h11's 16 KiB (uvicorn's default), the idle time between requests its 5 s.
            http=bounded_protocol(read_timeout, max_connections),
            ws="none",
            h11_max_incomplete_event_size=16 * 1024,
            timeout_keep_alive=5,
        )
        self.server = uvicorn.Server(config)
        self._thread: Optional[threading.Thread] = None

    @property
    def url(self) -> str:
        shown = f"[{self.host}]" if ":" in self.host else self.host
        return f"{'https' if self.tls else 'http'}://{shown}:{self.port}"

    def serve(self) -> None:
        """Serve until interrupted (Ctrl-C, SIGTERM)."""
        self.server.run(sockets=[self.sock])

    def start(self) -> ConsoleServer:
        """Serve on a thread of this process (tests, scripts); :meth:`stop` ends it."""
        self._thread = threading.Thread(target=self.serve, name="ctrlrun-console", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started and time.monotonic() < deadline:
            if not self._thread.is_alive():
                raise RuntimeError("the console server ended as it started")
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        if self._thread is not None:
            self._thread.join(10)
        self.sock.close()
