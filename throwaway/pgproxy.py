"""A TCP proxy between a PostgreSQL client and server, for fault tests.

It forwards bytes both ways and reads just enough of the wire protocol (v3) to act on a
transaction's ``COMMIT``: it remembers, per connection, the SQL of each prepared statement
(``Parse``) and the raw ``Bind`` messages sent since ``BEGIN``, so a rule can pick "the COMMIT of
the transaction that ran an INSERT" or "... whose parameters contain b'committed'". A statement
sent outside ``BEGIN`` … ``COMMIT`` commits by itself at its ``Sync`` (the server ends the
implicit transaction there), so for such a statement the ``Sync`` is its COMMIT.

Actions on a matching COMMIT:
    ``drop_before``: close both sockets without forwarding it (the server rolls back);
    ``drop_after``: forward it, wait for the server's reply, then close both sockets without
        relaying the reply (the server committed; the client cannot know);
    ``hold``: keep it until :meth:`Rule.release` (then forward) or the client disconnects
        (then close the server side: it rolls back).
Action on a matching statement (``on="statement"``): ``drop_before`` closes both sockets before
the statement is forwarded (a failure before COMMIT).
``refuse_new()`` makes the proxy close every new connection at once; ``delay`` holds the
server's answer to each client request for that many seconds (once per round trip).
``parsed`` lists the (statement name, SQL) of every ``Parse``, ``bound`` the statement name of
every ``Bind`` (an execution) and ``simple`` the SQL of every simple ``Query``, over all
connections: what a connection pooler in this place would relay.
"""

from __future__ import annotations

import select
import socket
import struct
import threading
import time
from typing import Callable, List, Optional


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("peer closed")
        buf += chunk
    return bytes(buf)


class Rule:
    def __init__(
        self,
        action: str,
        match: bytes,
        on: str,
        skip: int,
        times: int,
        then_refuse: bool,
        callback: Optional[Callable[[], object]] = None,
    ) -> None:
        assert action in ("drop_before", "drop_after", "hold", "call"), action
        assert on in ("commit", "statement"), on
        assert (action == "call") == (callback is not None) and (
            action != "call" or on == "statement"
        )
        self.action, self.match, self.on = action, match, on
        self.callback = callback
        self.skip, self.times, self.then_refuse = skip, times, then_refuse
        self.fired = 0
        self.fired_event = threading.Event()
        self._release = threading.Event()

    def release(self) -> None:
        self._release.set()

    def wait_fired(self, timeout: float = 30.0) -> bool:
        return self.fired_event.wait(timeout)


class _Conn:
    def __init__(self, proxy: PgProxy, client: socket.socket) -> None:
        self.proxy = proxy
        self.client = client
        self.server = socket.create_connection((proxy.upstream_host, proxy.upstream_port))
        for sock in (client, self.server):  # no Nagle: small protocol messages go at once
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.statements: dict = {}
        self.txn: List[bytes] = []
        self.in_block = False  # inside BEGIN … COMMIT
        self.swallow = False
        self.replied = True  # False from a client message until the server's first reply
        self.closed = False
        self.lock = threading.Lock()

    def close(self) -> None:
        with self.lock:
            if self.closed:
                return
            self.closed = True
        for s in (self.client, self.server):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()

    # client -> server ----------------------------------------------------------------
    def client_to_server(self) -> None:
        try:
            while True:
                head = _recv_exact(self.client, 8)
                length, code = struct.unpack("!ii", head)
                body = _recv_exact(self.client, length - 8)
                if code in (80877103, 80877104):  # SSLRequest / GSSENCRequest: say no
                    self.client.sendall(b"N")
                    continue
                self.server.sendall(head + body)  # the startup message
                break
            while True:
                kind = _recv_exact(self.client, 1)
                (length,) = struct.unpack("!i", _recv_exact(self.client, 4))
                body = _recv_exact(self.client, length - 4)
                msg = kind + struct.pack("!i", length) + body
                if not self.on_message(kind, body, msg):
                    return
        except (ConnectionError, OSError):
            pass
        finally:
            if not self.swallow:
                self.close()

    def on_message(self, kind: bytes, body: bytes, msg: bytes) -> bool:
        """Forward ``msg`` (or act on it); False ends the connection."""
        if kind == b"P":
            name, rest = body.split(b"\0", 1)
            self.statements[name] = rest.split(b"\0", 1)[0]
            self.proxy.parsed.append((name, self.statements[name]))
            self.txn.append(self.statements[name])
        elif kind == b"B":
            _portal, rest = body.split(b"\0", 1)
            stmt = rest.split(b"\0", 1)[0]
            self.txn.append(self.statements.get(stmt, b"") + b"\0" + body)
            self.proxy.bound.append(stmt)
            rule = self.proxy._take_rule("statement", self.txn[-1])
            if rule is not None and rule.action == "call":
                assert rule.callback is not None
                rule.callback()  # e.g. another client writes first; then the statement goes on
            elif rule is not None:
                self.close()
                return False
        elif kind == b"Q":
            self.proxy.simple.append(body.rstrip(b"\0"))
            sql = body.rstrip(b"\0").strip().upper()
            if sql.startswith(b"BEGIN") or sql.startswith(b"START TRANSACTION"):
                self.txn = []
                self.in_block = True
            elif sql == b"ROLLBACK":
                self.in_block = False
            elif sql == b"COMMIT":
                self.in_block = False
                rule = self.proxy._take_rule("commit", b"\n".join(self.txn))
                self.txn = []
                if rule is not None:
                    return self.act(rule, msg)
        elif kind == b"S" and not self.in_block and self.txn:
            # the Sync of statements outside BEGIN … COMMIT: where they commit; a Parse alone
            # (a statement prepared, nothing run) commits nothing
            ran = any(b"\0" in part for part in self.txn)  # a Bind: see above
            rule = self.proxy._take_rule("commit", b"\n".join(self.txn)) if ran else None
            self.txn = []
            if rule is not None:
                return self.act(rule, msg)
        self.replied = False
        self.server.sendall(msg)
        return True

    def act(self, rule: Rule, msg: bytes) -> bool:
        if rule.action == "drop_before":
            self.close()
            return False
        if rule.action == "drop_after":
            self.swallow = True
            self.server.sendall(msg)
            return False  # server_to_client closes after the reply arrives
        # hold: until released (forward) or the client goes away (close: server rolls back)
        while not rule._release.is_set():
            readable, _, _ = select.select([self.client], [], [], 0.05)
            if readable:
                try:
                    peeked = self.client.recv(1, socket.MSG_PEEK)
                except OSError:
                    peeked = b""
                if not peeked:
                    self.close()
                    return False
        self.server.sendall(msg)
        return True

    # server -> client ----------------------------------------------------------------
    def server_to_client(self) -> None:
        try:
            while True:
                kind = _recv_exact(self.server, 1)
                (length,) = struct.unpack("!i", _recv_exact(self.server, 4))
                body = _recv_exact(self.server, length - 4)
                if self.swallow:
                    if kind == b"Z":  # the COMMIT's reply is complete: the server committed
                        self.close()
                        return
                    continue
                if self.proxy.delay and not self.replied:
                    time.sleep(self.proxy.delay)  # once per round trip
                self.replied = True
                self.client.sendall(kind + struct.pack("!i", length) + body)
        except (ConnectionError, OSError):
            pass
        finally:
            self.close()


class PgProxy:
    def __init__(
        self, upstream_host: str, upstream_port: int, listen_host: str = "127.0.0.1"
    ) -> None:
        self.upstream_host, self.upstream_port = upstream_host, upstream_port
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind((listen_host, 0))
        self.listener.listen(64)
        self.host = listen_host
        self.port = self.listener.getsockname()[1]
        self.delay = 0.0
        self.refusing = False
        self.rules: List[Rule] = []
        self.conns: List[_Conn] = []
        self.connections_made = 0
        self.parsed: List[tuple] = []
        self.bound: List[bytes] = []
        self.simple: List[bytes] = []
        self._lock = threading.Lock()
        self._stopped = False
        threading.Thread(target=self._accept_loop, daemon=True).start()

    def url(self, db: str = "postgres", user: str = "postgres") -> str:
        return f"postgresql://{user}@{self.host}:{self.port}/{db}"

    def arm(
        self,
        action: str,
        match: bytes = b"",
        *,
        on: str = "commit",
        skip: int = 0,
        times: int = 1,
        then_refuse: bool = False,
        callback: Optional[Callable[[], object]] = None,
    ) -> Rule:
        """Act on the next matching COMMIT (or statement) whose transaction's SQL and Bind
        bytes contain ``match``, after skipping ``skip`` matches, ``times`` times. ``call``
        (statements only) runs ``callback`` just before the statement is forwarded."""
        rule = Rule(action, match, on, skip, times, then_refuse, callback)
        with self._lock:
            self.rules.append(rule)
        return rule

    def _take_rule(self, on: str, text: bytes) -> Optional[Rule]:
        with self._lock:
            for rule in self.rules:
                if rule.on != on or rule.fired >= rule.times or rule.match not in text:
                    continue
                if rule.skip > 0:
                    rule.skip -= 1
                    continue
                rule.fired += 1
                rule.fired_event.set()
                if rule.then_refuse:
                    self.refusing = True
                return rule
        return None

    def refuse_new(self, refuse: bool = True) -> None:
        self.refusing = refuse

    def drop_all(self) -> None:
        with self._lock:
            conns = list(self.conns)
        for c in conns:
            c.close()

    def _accept_loop(self) -> None:
        while not self._stopped:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            if self.refusing:
                client.close()
                continue
            try:
                conn = _Conn(self, client)
            except OSError:
                client.close()
                continue
            with self._lock:
                self.conns.append(conn)
                self.connections_made += 1
            threading.Thread(target=conn.client_to_server, daemon=True).start()
            threading.Thread(target=conn.server_to_client, daemon=True).start()

    def close(self) -> None:
        self._stopped = True
        self.listener.close()
        self.drop_all()
