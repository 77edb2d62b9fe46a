"""A real webhook receiver for the notification tests: ``http.server`` on a free loopback port,
in a thread, recording every request; it can answer with given status codes first and wait
before answering."""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Dict, List, Optional


@dataclass
class Got:
    path: str
    headers: Dict[str, str]
    body: bytes
    at: float

    @property
    def json(self) -> Any:
        return json.loads(self.body)


class Receiver:
    def __init__(self) -> None:
        self.got: List[Got] = []
        self.answers: List[int] = []  # status codes to answer first, in order; then 200
        self.delay = 0.0
        self.trickle = 0.0  # > 0: answer one byte of the status line every that many seconds
        self.headers_out: Dict[str, str] = {}
        self._cond = threading.Condition()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length)
                with owner._cond:
                    owner.got.append(Got(self.path, dict(self.headers), body, time.monotonic()))
                    code = owner.answers.pop(0) if owner.answers else 200
                    owner._cond.notify_all()
                if owner.delay:
                    time.sleep(owner.delay)
                if owner.trickle:  # a receiver that keeps each read alive, never finishing
                    try:
                        for byte in b"HTTP/1.1 200 OK" * 100:
                            self.wfile.write(bytes([byte]))
                            self.wfile.flush()
                            time.sleep(owner.trickle)
                    except OSError:
                        return  # the sender gave up
                self.send_response(code)
                for name, value in owner.headers_out.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self.thread.start()

    def url(self, path: str = "/hook") -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def wait_for(self, count: int, timeout: float = 10.0) -> List[Got]:
        deadline = time.monotonic() + timeout
        with self._cond:
            while len(self.got) < count:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._cond.wait(left)
            return list(self.got)

    def events(self, path: Optional[str] = None) -> List[str]:
        with self._cond:
            return [g.json.get("event") for g in self.got if path is None or g.path == path]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
