"""The agent's stdin and stdout as the event loop's own pipes, for the MCP SDK's ``stdio_server``.

Why our own: the SDK reads each line of stdin, and writes and flushes each message to stdout,
through an anyio worker thread: three thread hand-offs per tool call, each a wake-up of a
sleeping thread and then of the loop (about 150 µs apiece on the 2-core machine the benchmark
runs on). Here the loop watches the pipes itself: a line is read when it arrives, a message is
written without a thread. The SDK still does all of MCP (``stdio_server`` takes these streams
in place of its own), and where the pipes cannot be watched this way the SDK's own transport
serves, unchanged: a terminal or a file on stdin, stdin, stdout and stderr not three different
pipes or sockets (one socket both ways, ``2>&1``), another loop than asyncio's, Windows.

Messages are lines ended by ``\n``, as MCP's stdio transport defines them (the SDK's reader
also took a lone ``\r`` for a line end). As the SDK does, while serving fd 0 reads the null
device and fd 1 writes to stderr, so nothing else in the process reads the agent's messages or
writes into its channel; both come back at the end, with the flags they had (the loop makes the
agent's descriptions non-blocking while it serves; ``restore`` also puts them back for an exit
that skips the ``finally`` clauses).

The agent's end is the end of serving: its stdin ended, or its stdout closed. Either way the
calls in flight are cancelled (and record their outcomes), as when the agent closes stdin. An
agent that has closed stdin and reads no more gets ``FLUSH_AT_END`` seconds for what is still
unwritten; after that it is dropped, so the gateway always exits.
"""

from __future__ import annotations

import asyncio
import fcntl
import os
import socket
import stat
import sys
from contextlib import asynccontextmanager, suppress
from typing import Any, AsyncIterator, Callable, List, Optional, Tuple

from mcp.server.stdio import stdio_server

#: Lines read ahead of the SDK before the loop stops reading stdin (the agent then waits).
READ_AHEAD = 32
#: How long an agent that has closed stdin, and does not read, is waited for; shorter than the
#: gateway's grace after a SIGTERM (``ctrlrun.gateway.serve.SIGTERM_GRACE``).
FLUSH_AT_END = 2.0

_restores: List[Callable[[], None]] = []


def restore() -> None:
    """Put fd 0 and 1 back as they were before serving (idempotent): for an exit that skips
    the ``finally`` clauses (``os._exit`` after a SIGTERM's grace)."""
    while True:
        try:
            back = _restores.pop()  # atomic: the SIGTERM's thread and the loop may both call
        except IndexError:
            return
        back()


class _Lines(asyncio.Protocol):
    """Stdin cut into lines (undecodable bytes replaced, as the SDK's reader does), queued for
    the SDK."""

    def __init__(self) -> None:
        self.lines: asyncio.Queue[Optional[str]] = asyncio.Queue()
        self.partial = bytearray()
        self.transport: Optional[asyncio.ReadTransport] = None
        self.paused = False
        self.ended = False
        self.on_end: Optional[Callable[[], None]] = None

    def connection_made(self, transport: Any) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        if self.ended:  # the agent's stdout closed: it is gone, whatever it still sends
            return
        end = data.rfind(b"\n")  # in the new bytes only: a long line is not searched again
        if end < 0:
            self.partial += data
            return
        whole = bytes(self.partial + data[:end])
        self.partial = bytearray(data[end + 1 :])
        for line in whole.split(b"\n"):  # only at \n: JSON may hold a raw U+2028 in a string
            self.lines.put_nowait(line.decode("utf-8", "replace") + "\n")
        if self.lines.qsize() >= READ_AHEAD and self.transport is not None:
            self.transport.pause_reading()
            self.paused = True

    def eof_received(self) -> None:
        self.end()

    def connection_lost(self, exc: Optional[Exception]) -> None:
        self.end()

    def end(self) -> None:
        if self.ended:
            return
        self.ended = True
        if self.partial:  # a last line with no newline is still a line
            self.lines.put_nowait(bytes(self.partial).decode("utf-8", "replace"))
            self.partial.clear()
        self.lines.put_nowait(None)
        if self.on_end is not None:
            self.on_end()

    async def next_line(self) -> Optional[str]:
        line = await self.lines.get()
        if line is None:
            self.lines.put_nowait(None)  # the end stays the end for a second reader
        elif self.paused and self.lines.qsize() < READ_AHEAD // 2 and self.transport is not None:
            self.transport.resume_reading()
            self.paused = False
        return line


class _Sink(asyncio.Protocol):
    """Stdout's flow: whether the pipe can take more, and whether the agent is gone."""

    def __init__(self) -> None:
        self.ready = asyncio.Event()
        self.ready.set()
        self.gone = False
        self.closed = asyncio.Event()
        self.on_lost: Optional[Callable[[], None]] = None

    def data_received(self, data: bytes) -> None:
        pass  # a socket the agent never writes to (its reading is paused anyway)

    def eof_received(self) -> bool:
        return True  # the agent's half-close of a socket it only reads is not its leaving

    def pause_writing(self) -> None:
        self.ready.clear()

    def resume_writing(self) -> None:
        self.ready.set()

    def connection_lost(self, exc: Optional[Exception]) -> None:
        self.gone = True
        self.ready.set()
        self.closed.set()
        if self.on_lost is not None:
            self.on_lost()


class _Stdin:
    """What ``stdio_server`` iterates: the agent's lines."""

    def __init__(self, lines: _Lines) -> None:
        self._lines = lines

    def __aiter__(self) -> _Stdin:
        return self

    async def __anext__(self) -> str:
        line = await self._lines.next_line()
        if line is None:
            raise StopAsyncIteration
        return line


class _Stdout:
    """What ``stdio_server`` writes each message to: a write to the pipe, no thread; a flush
    waits only while the agent is not reading. Once the agent is gone (it closed its end, or
    was given up on) a message has nobody to reach, and serving is ending: it is dropped."""

    def __init__(self, transport: asyncio.WriteTransport, sink: _Sink) -> None:
        self._transport = transport
        self._sink = sink

    async def write(self, text: str) -> None:
        if not self._sink.gone:
            self._transport.write(text.encode("utf-8"))

    async def flush(self) -> None:
        await self._sink.ready.wait()


def _watchable() -> bool:
    """Whether stdin and stdout are pipes or sockets the loop can watch, each a file of its own
    and neither where stderr goes (they turn non-blocking while served, which stderr must not,
    and one socket both ways needs one transport)."""
    if sys.platform == "win32":  # the proactor loop takes no descriptors
        return False
    try:
        asyncio.get_running_loop()
        found = [os.fstat(fd) for fd in (0, 1, 2)]
    except (RuntimeError, OSError):
        return False
    kinds = (stat.S_ISFIFO, stat.S_ISSOCK)
    return (
        all(any(k(s.st_mode) for k in kinds) for s in found[:2])
        and len({(s.st_dev, s.st_ino) for s in found}) == 3
    )


def _divert() -> Tuple[int, int, Callable[[], None]]:
    """Point fd 0 at the null device and fd 1 at stderr: the wire's two descriptors, and what
    puts them back, with the descriptions' flags as they were."""
    wires = [(os.dup(fd), fd, fcntl.fcntl(fd, fcntl.F_GETFL)) for fd in (0, 1)]
    for fd in (0, 1):
        elsewhere = os.open(os.devnull, os.O_RDONLY) if fd == 0 else os.dup(2)
        try:
            os.dup2(elsewhere, fd)
        finally:
            os.close(elsewhere)

    def back() -> None:
        for wire, fd, flags in wires:
            with suppress(OSError):
                fcntl.fcntl(wire, fcntl.F_SETFL, flags)  # the descriptions are shared
            with suppress(OSError):
                os.dup2(wire, fd)
            with suppress(OSError):
                os.close(wire)

    return wires[0][0], wires[1][0], back


async def _connect_stdout(loop: asyncio.AbstractEventLoop, fd: int) -> Tuple[Any, _Sink]:
    if stat.S_ISSOCK(os.fstat(fd).st_mode):
        # A pipe transport takes any readable event on a socket for the agent's leaving: a
        # socket is written as a socket, its reading paused (the agent sends nothing here).
        sock = socket.socket(fileno=fd)
        try:
            writing, sink = await loop.connect_accepted_socket(_Sink, sock)
        except BaseException:
            sock.close()
            raise
        writing.pause_reading()
        return writing, sink
    pipe = os.fdopen(fd, "wb", buffering=0)
    try:
        return await loop.connect_write_pipe(_Sink, pipe)
    except BaseException:
        pipe.close()
        raise


@asynccontextmanager
async def _piped() -> AsyncIterator[Tuple[_Stdin, _Stdout]]:
    loop = asyncio.get_running_loop()
    wire_in, wire_out, back = _divert()
    _restores.append(back)
    try:
        stdin = os.fdopen(os.dup(wire_in), "rb", buffering=0)
        try:
            reading, lines = await loop.connect_read_pipe(_Lines, stdin)
        except BaseException:
            stdin.close()
            raise
        try:
            writing, sink = await _connect_stdout(loop, os.dup(wire_out))

            def give_up() -> None:  # stdin ended; an agent still not reading is dropped
                if not sink.ready.is_set():
                    sink.gone = True
                    writing.abort()

            def flush_then_give_up() -> None:
                loop.call_later(FLUSH_AT_END, give_up)

            lines.on_end = flush_then_give_up
            sink.on_lost = lines.end  # the agent is gone: serving ends, as at stdin's end
            try:
                yield _Stdin(lines), _Stdout(writing, sink)
            finally:
                writing.close()  # what is still buffered is written first
                with suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(sink.closed.wait(), FLUSH_AT_END)
                if not sink.closed.is_set():  # the agent is not reading: give up on it
                    writing.abort()
        finally:
            reading.close()
    finally:
        restore()


@asynccontextmanager
async def agent_stdio() -> AsyncIterator[Tuple[Any, Any]]:
    """``stdio_server``'s read and write streams over the agent's stdin and stdout."""
    if not _watchable():
        async with stdio_server() as streams:
            yield streams
        return
    async with _piped() as (stdin, stdout):
        async with stdio_server(stdin, stdout) as streams:  # type: ignore[arg-type]
            yield streams
