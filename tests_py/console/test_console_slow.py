"""Slow clients: clients that trickle a request are closed within the bound while a normal
client is served (and so is a kept-alive one's next request); connections beyond the bound are
closed as they come."""

from __future__ import annotations

import select
import socket
import threading
import time
from typing import Dict, List

import httpx2 as httpx
import pytest

from ctrlrun.console.app import build_app
from ctrlrun.console.listen import ConsoleServer
from ctrlrun.console.state import ConsoleState, Settings

sqlite_only = pytest.mark.parametrize("backend", ["sqlite"])


def _trickle(socks: List[socket.socket], closed: Dict[int, float], stop: threading.Event) -> None:
    """Each socket sends a request head a header line at a time, never ending it; the time
    the console closed each is noted."""
    for s in socks:
        s.sendall(b"GET /signin HTTP/1.1\r\nHost: 127.0.0.1\r\n")
    while not stop.is_set() and len(closed) < len(socks):
        live = [s for s in socks if s.fileno() not in closed]
        readable, _, _ = select.select(live, [], [], 0.3)
        for s in readable:
            try:
                data = s.recv(4096)
            except OSError:
                data = b""
            if not data:
                closed[s.fileno()] = time.monotonic()
        for s in live:
            if s.fileno() not in closed:
                try:
                    s.sendall(b"X-Slow: 1\r\n")
                except OSError:
                    closed[s.fileno()] = time.monotonic()


@sqlite_only
def test_clients_trickling_a_request_are_closed_and_others_still_served(console_store):
    app = build_app(ConsoleState(console_store, Settings()))
    server = ConsoleServer(app, "127.0.0.1", 0, read_timeout=2.0, max_connections=150).start()
    socks: List[socket.socket] = []
    stop = threading.Event()
    try:
        for i in range(100):
            s = socket.socket()
            s.bind((f"127.0.0.{20 + i % 50}", 0))
            s.connect(("127.0.0.1", server.port))
            socks.append(s)
        # one more has a request answered first: its next request is timed as well
        kept = socket.create_connection(("127.0.0.1", server.port))
        kept.sendall(b"GET /signin HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        kept.settimeout(10)
        assert kept.recv(4096).startswith(b"HTTP/1.1 200")
        socks.append(kept)
        opened = time.monotonic()
        closed: Dict[int, float] = {}
        trickler = threading.Thread(target=_trickle, args=(socks, closed, stop))
        trickler.start()
        # meanwhile, a normal client is served
        with httpx.Client(base_url=server.url, timeout=10) as http:
            assert http.get("/signin").status_code == 200
        trickler.join(30)
        assert len(closed) == 101, f"{101 - len(closed)} slow clients still open"
        # closed by the bound (2 s), not by a client giving up: none much later than it
        assert max(closed.values()) - opened < 2.0 + 10.0
        with httpx.Client(base_url=server.url, timeout=10) as http:
            assert http.get("/signin").status_code == 200
    finally:
        stop.set()
        for s in socks:
            s.close()
        server.stop()


@sqlite_only
def test_connections_beyond_the_bound_are_closed_as_they_come(console_store):
    app = build_app(ConsoleState(console_store, Settings()))
    server = ConsoleServer(app, "127.0.0.1", 0, read_timeout=5.0, max_connections=20).start()
    socks: List[socket.socket] = []
    try:
        for _ in range(20):
            socks.append(socket.create_connection(("127.0.0.1", server.port)))
        extra = socket.create_connection(("127.0.0.1", server.port))
        extra.settimeout(10)
        try:
            assert extra.recv(1) == b""  # closed at once, nothing sent
        except ConnectionResetError:
            pass
        extra.close()
        # while the others are still open (their bound not reached)
        assert select.select(socks, [], [], 0)[0] == []
        # the idle ones go by the bound; then the console serves again
        for s in socks:
            s.settimeout(15)
            assert s.recv(1) == b""
        with httpx.Client(base_url=server.url, timeout=10) as http:
            assert http.get("/signin").status_code == 200
    finally:
        for s in socks:
            s.close()
        server.stop()
