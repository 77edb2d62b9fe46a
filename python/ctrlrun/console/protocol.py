"""Slow clients: uvicorn's HTTP/1.1 protocol (h11), with a bound on how long a request may take
to arrive and on how many connections are open at once.

Why code of our own: uvicorn (0.55) bounds only the idle time *between* requests
(``timeout_keep_alive``) and the size of a request's head (``h11_max_incomplete_event_size``);
nothing bounds how long a client may take to send its request line, headers and body, so a
client trickling a header holds its connection (a file descriptor) for as long as it likes.
Its ``limit_concurrency`` answers 503 only once a request's headers are in: it cannot refuse
the connections that never finish theirs. So, here: a request (head and body) must arrive
within ``read_timeout`` seconds of the connection or of the previous response, else the
connection is closed; beyond ``max_connections`` open connections, a new one is closed at
once."""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Optional

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

__all__ = ["bounded_protocol", "READ_TIMEOUT", "MAX_CONNECTIONS"]

#: Seconds a request (its head and body) may take to arrive.
READ_TIMEOUT = 10.0
#: Connections open at once (the rest closed as they come).
MAX_CONNECTIONS = 256

log = logging.getLogger("ctrlrun.console")
_READING = (h11.IDLE, h11.SEND_BODY)


class BoundedH11Protocol(H11Protocol):
    read_timeout: float = READ_TIMEOUT
    max_connections: int = MAX_CONNECTIONS

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._read_deadline: Optional[asyncio.TimerHandle] = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        if len(self.connections) > self.max_connections:
            log.warning("console: %d connections open: one more closed", self.max_connections)
            transport.close()
            return
        self._arm()

    def _arm(self) -> None:
        self._disarm()
        self._read_deadline = self.loop.call_later(self.read_timeout, self._too_slow)

    def _disarm(self) -> None:
        if self._read_deadline is not None:
            self._read_deadline.cancel()
            self._read_deadline = None

    def _too_slow(self) -> None:
        self._read_deadline = None
        if self.conn.their_state in _READING and not self.transport.is_closing():
            self.transport.close()

    def handle_events(self) -> None:
        super().handle_events()
        if self.conn.their_state not in _READING:  # the request is in: the app's time now
            self._disarm()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        # The next request (if any) has its own time; one already read in full is not timed.
        if self.conn.their_state in _READING and not self.transport.is_closing():
            if self._read_deadline is None:
                self._arm()

    def connection_lost(self, exc: Optional[Exception]) -> None:
        self._disarm()
        super().connection_lost(exc)


def bounded_protocol(read_timeout: float, max_connections: int) -> type:
    """The protocol class (uvicorn's ``http=``) with these bounds."""
    if read_timeout <= 0 or max_connections < 1:
        raise ValueError("read_timeout and max_connections must be positive")
    attrs = {"read_timeout": read_timeout, "max_connections": max_connections}
    return type("ConsoleH11Protocol", (BoundedH11Protocol,), attrs)
