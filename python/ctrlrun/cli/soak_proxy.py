"""The proxy of ``ctrlrun soak --faults``: a local TCP relay between the workers and the
PostgreSQL server that cuts connections at random times.

It relays bytes both ways without reading them (TLS passes through untouched). After a random
interval it arms a cut, and the cut falls on the next chunk in flight on any connection, so it
lands in the middle of an exchange (a reservation, an outcome write, a re-read) rather than on
an idle connection:

* half the time the chunk is dropped and both sides are reset (the server rolls back whatever
  it had not committed; the worker sees its connection reset);
* half the time the chunk is delivered first: a request reaches the server, which may commit
  it, while the worker is reset and never hears the answer (the unknown ``COMMIT``); a reply
  reaches the worker, and the connection is reset right after it.

A cut armed for a second with no traffic falls on a connection picked at random. One thread,
one selector; every wait is bounded.

:func:`proxied_url` points a store URL at the proxy and keeps every other part of it (user,
password, database, options).
"""

from __future__ import annotations

import random
import selectors
import socket
import struct
import threading
import time
from typing import Dict, Optional, Set, Tuple
from urllib.parse import unquote

__all__ = ["CuttingProxy", "NotProxied", "upstream_of", "proxied_url"]

LINGER_RESET = struct.pack("ii", 1, 0)  # close() sends a reset, not a FIN
IO_TIMEOUT = 5.0  # bounds a connect to the server and a send to either side
IDLE_CUT = 1.0  # an armed cut with no traffic this long falls on a random connection
DRAIN = 5.0  # how long a server's answer to a delivered request is read and thrown away


class NotProxied(ValueError):
    """A store URL ``--faults`` cannot put a proxy in front of; the message says why."""


def _split(url: str) -> Tuple[str, str, str]:
    """``(before the hosts, the hosts, after the hosts)`` of a PostgreSQL URL."""
    scheme, sep, rest = url.partition("://")
    cut = min((i for i in (rest.find("/"), rest.find("?")) if i >= 0), default=len(rest))
    authority, tail = rest[:cut], rest[cut:]
    at = authority.rfind("@")
    return scheme + sep + authority[: at + 1], authority[at + 1 :], tail


def upstream_of(url: str) -> Tuple[str, int]:
    """The one server (host, port) a PostgreSQL URL names; :class:`NotProxied` when the URL
    names several hosts, a Unix-domain socket or a host in its options, uses
    ``sslmode=verify-full`` (the certificate names the server, not the proxy), or names none."""
    _, hosts, tail = _split(url)
    options: Dict[str, str] = {}
    for pair in tail.partition("?")[2].split("&"):
        name, _, value = pair.partition("=")
        options[unquote(name)] = unquote(value)
    given = sorted(n for n in ("host", "hostaddr", "port") if n in options)
    if given:
        raise NotProxied(
            f"the URL gives {', '.join(given)} as an option; --faults needs the server as "
            f"host:port in the URL itself (one host, over TCP)"
        )
    if "," in hosts:
        raise NotProxied(
            "the URL names several hosts; --faults proxies one server: give one host:port"
        )
    if options.get("sslmode") == "verify-full":
        raise NotProxied(
            "sslmode=verify-full checks that the certificate names the host in the URL, and "
            "the workers reach the server through a local proxy; use sslmode=verify-ca or "
            "require for the soak, or soak without --faults"
        )
    if hosts.startswith("["):
        host, _, port = hosts[1:].partition("]")
        port = port[1:] if port.startswith(":") else port
    else:
        host, _, port = hosts.partition(":")
    host = unquote(host)
    if not host:
        raise NotProxied("the URL names no host; --faults needs the server as host:port")
    if port and not (port.isdigit() and 0 < int(port) < 65536):
        raise NotProxied(f"the URL's port {port!r} is not a TCP port")
    return host, int(port) if port else 5432


def proxied_url(url: str, port: int, host: str = "127.0.0.1") -> str:
    """``url`` with its one host and port replaced by ``host:port``; every other part kept."""
    upstream_of(url)  # refuses what cannot be proxied
    head, _, tail = _split(url)
    return f"{head}{host}:{port}{tail}"


class CuttingProxy:
    """``with CuttingProxy((host, port), every=(lo, hi)) as proxy``: listens on
    ``proxy.host:proxy.port``; ``proxy.cuts`` counts the connections cut so far."""

    def __init__(
        self,
        upstream: Tuple[str, int],
        every: Tuple[float, float] = (0.1, 0.6),
        seed: Optional[int] = None,
    ) -> None:
        self.upstream, self.every = upstream, every
        self.rng = random.Random(seed)
        self.host = "127.0.0.1"
        self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind((self.host, 0))
        self.listener.listen(128)
        self.listener.setblocking(False)
        self.port: int = self.listener.getsockname()[1]
        self.cuts = 0
        self.connections = 0
        self.cutting = True
        self._peers: Dict[socket.socket, socket.socket] = {}
        self._servers: Set[socket.socket] = set()  # the server's side of each connection
        self._draining: Dict[socket.socket, float] = {}  # server side -> until when
        self._sel = selectors.DefaultSelector()
        self._sel.register(self.listener, selectors.EVENT_READ)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="ctrlrun-soak-proxy", daemon=True)

    def __enter__(self) -> CuttingProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def stop_cutting(self) -> None:
        """Relay only, from now on (the workers finish their last calls)."""
        self.cutting = False

    def close(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=IO_TIMEOUT)
        for sock in [self.listener, *self._peers, *self._draining]:
            sock.close()
        self._peers.clear()
        self._draining.clear()
        self._sel.close()

    # -- the loop (the proxy's thread only) --------------------------------------------------
    def _next_cut(self) -> float:
        return time.monotonic() + self.rng.uniform(*self.every)

    def _loop(self) -> None:
        cut_at, armed_at = self._next_cut(), 0.0
        while not self._stop.is_set():
            for key, _ in self._sel.select(timeout=0.05):
                sock = key.fileobj
                assert isinstance(sock, socket.socket)
                try:
                    if sock is self.listener:
                        self._accept()
                    elif sock in self._draining:
                        self._drain(sock)
                    elif sock in self._peers and self._relay(sock, cut=armed_at > 0):
                        armed_at, cut_at = 0.0, self._next_cut()
                except OSError:  # the relay goes on for the other connections
                    if sock in self._peers:
                        self._end(sock, reset=True)
            now = time.monotonic()
            for sock, until in list(self._draining.items()):
                if now > until:
                    self._discard(sock)
            if not self.cutting:
                armed_at = 0.0
            elif not armed_at and now >= cut_at:
                armed_at = now
            elif armed_at and now - armed_at > IDLE_CUT:
                victims = sorted(self._servers - set(self._draining), key=lambda s: s.fileno())
                if victims:
                    self._end(self.rng.choice(victims), reset=True)
                    self.cuts += 1
                armed_at, cut_at = 0.0, self._next_cut()

    def _accept(self) -> None:
        try:
            client, _ = self.listener.accept()
        except OSError:
            return
        try:
            server = socket.create_connection(self.upstream, timeout=IO_TIMEOUT)
        except OSError:
            client.close()  # the worker sees its connection closed, as by a server that is down
            return
        for sock in (client, server):
            sock.settimeout(IO_TIMEOUT)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._sel.register(sock, selectors.EVENT_READ)
        self._peers[client], self._peers[server] = server, client
        self._servers.add(server)
        self.connections += 1

    def _relay(self, sock: socket.socket, cut: bool) -> bool:
        """Forward one chunk from ``sock`` to its peer; with ``cut``, cut the connection on it
        (before or after forwarding, at random). True when a cut was made."""
        peer = self._peers[sock]
        try:
            data = sock.recv(65536)
        except OSError:
            data = b""
        if not data:
            self._end(sock, reset=False)
            return False
        deliver = not cut or self.rng.random() < 0.5
        try:
            if deliver:
                peer.sendall(data)
        except OSError:
            self._end(sock, reset=False)
            return False
        if not cut:
            return False
        self.cuts += 1
        if deliver and peer in self._servers:
            # The request reached the server: reset the worker's side only, and let the server
            # finish what it was sent (its answer is read and thrown away).
            del self._peers[sock], self._peers[peer]
            self._discard(sock, reset=True)
            self._draining[peer] = time.monotonic() + DRAIN
            try:
                peer.shutdown(socket.SHUT_WR)
            except OSError:
                self._discard(peer)
        else:
            self._end(sock, reset=True)
        return True

    def _drain(self, sock: socket.socket) -> None:
        try:
            data = sock.recv(65536)
        except OSError:
            data = b""
        if not data:
            self._discard(sock)

    def _end(self, sock: socket.socket, reset: bool) -> None:
        """Close ``sock`` and its peer; with ``reset``, abruptly (a reset, no goodbye)."""
        peer = self._peers.pop(sock, None)
        self._discard(sock, reset)
        if peer is not None:
            self._peers.pop(peer, None)
            self._discard(peer, reset)

    def _discard(self, sock: socket.socket, reset: bool = False) -> None:
        if reset:
            try:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, LINGER_RESET)
            except OSError:
                pass
        self._servers.discard(sock)
        self._draining.pop(sock, None)
        try:
            self._sel.unregister(sock)
        except (KeyError, ValueError):
            pass
        sock.close()
