"""The agent's stdin and stdout as the event loop's own pipes, for the MCP SDK's ``stdio_server``.

Why our own: the SDK reads each line of stdin, and writes and flushes each message to stdout,
through an anyio worker thread: three thread hand-offs per tool call, each a wake-up of a
sleeping thread and then of the loop (about 150 µs apiece on the 2-core machine the benchmark
runs on). Here the loop watches the pipes itself: a line is read when it arrives, a message is
written without a thread. The SDK still does all of MCP (``stdio_server`` takes these streams
in place of its own), and where the pipes cannot be watched this way the SDK's own transport
serves, unchanged: a terminal or a file on stdin, stdout shared with stderr, another loop than
asyncio's.

As the SDK does, while serving fd 0 reads the null device and fd 1 writes to stderr, so nothing
else in the process reads the agent's messages or writes into its channel; both come back at
the end, blocking again.
"""

from __future__ import annotations

import asyncio
import os
import stat
from contextlib import asynccontextmanager, suppress
from typing import Any, AsyncIterator, Optional, Tuple

from mcp.server.stdio import stdio_server

#: Lines read ahead of the SDK before the loop stops reading stdin (the agent then waits).
READ_AHEAD = 32
#: How long the end of serving waits for what is still unwritten to reach the agent.
FLUSH_AT_END = 5.0


class _Lines(asyncio.Protocol):
    """Stdin cut into lines (``\\n``-terminated, as the SDK reads them; undecodable bytes
    replaced, as the SDK's reader does), queued for the SDK."""

    def __init__(self) -> None:
        self.lines: "asyncio.Queue[Optional[str]]" = asyncio.Queue()
        self.partial = bytearray()
        self.transport: Optional[asyncio.ReadTransport] = None
        self.paused = False

    def connection_made(self, transport: Any) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.partial += data
        end = self.partial.rfind(b"\n")
        if end < 0:
            return
        whole, self.partial = bytes(self.partial[:end]), self.partial[end + 1:]
        for line in whole.split(b"\n"):  # only at \n: JSON may hold a raw U+2028 in a string
            self.lines.put_nowait(line.decode("utf-8", "replace") + "\n")
        if self.lines.qsize() >= READ_AHEAD and self.transport is not None:
            self.transport.pause_reading()
            self.paused = True

    def eof_received(self) -> None:
        self._end()

    def connection_lost(self, exc: Optional[Exception]) -> None:
        self._end()

    def _end(self) -> None:
        if self.partial:  # a last line with no newline is still a line
            self.lines.put_nowait(bytes(self.partial).decode("utf-8", "replace"))
            self.partial.clear()
        self.lines.put_nowait(None)

    async def next_line(self) -> Optional[str]:
        line = await self.lines.get()
        if line is None:
            self.lines.put_nowait(None)  # the end stays the end for a second reader
        elif self.paused and self.lines.qsize() < READ_AHEAD // 2 and self.transport is not None:
            self.transport.resume_reading()
            self.paused = False
        return line


class _Sink(asyncio.Protocol):
    """Stdout's flow: whether the pipe can take more, and whether the agent closed it."""

    def __init__(self) -> None:
        self.ready = asyncio.Event()
        self.ready.set()
        self.lost: Optional[BaseException] = None
        self.closed = asyncio.Event()

    def pause_writing(self) -> None:
        self.ready.clear()

    def resume_writing(self) -> None:
        self.ready.set()

    def connection_lost(self, exc: Optional[Exception]) -> None:
        self.lost = exc or BrokenPipeError("the agent closed the gateway's stdout")
        self.ready.set()
        self.closed.set()


class _Stdin:
    """What ``stdio_server`` iterates: the agent's lines."""

    def __init__(self, lines: _Lines) -> None:
        self._lines = lines

    def __aiter__(self) -> "_Stdin":
        return self

    async def __anext__(self) -> str:
        line = await self._lines.next_line()
        if line is None:
            raise StopAsyncIteration
        return line


class _Stdout:
    """What ``stdio_server`` writes each message to: a write to the pipe, no thread; a flush
    waits only while the agent is not reading."""

    def __init__(self, transport: asyncio.WriteTransport, sink: _Sink) -> None:
        self._transport = transport
        self._sink = sink

    async def write(self, text: str) -> None:
        if self._sink.lost is not None:
            raise BrokenPipeError(str(self._sink.lost))
        self._transport.write(text.encode("utf-8"))

    async def flush(self) -> None:
        await self._sink.ready.wait()
        if self._sink.lost is not None:
            raise BrokenPipeError(str(self._sink.lost))


def _watchable() -> bool:
    """Whether stdin and stdout are pipes or sockets the loop can watch, and stdout is not
    where stderr goes (stdout turns non-blocking while served, which stderr must not)."""
    try:
        asyncio.get_running_loop()
        into, out, err = os.fstat(0), os.fstat(1), os.fstat(2)
    except (RuntimeError, OSError):
        return False
    kinds = (stat.S_ISFIFO, stat.S_ISSOCK)
    return (any(k(into.st_mode) for k in kinds) and any(k(out.st_mode) for k in kinds)
            and (out.st_dev, out.st_ino) != (err.st_dev, err.st_ino))


@asynccontextmanager
async def _piped() -> AsyncIterator[Tuple[_Stdin, _Stdout]]:
    loop = asyncio.get_running_loop()
    wire_in, wire_out = os.dup(0), os.dup(1)  # the wire, restored to fd 0 and 1 at the end
    opened: list = []
    try:
        for fd, mode in ((0, os.O_RDONLY), (1, os.O_WRONLY)):
            elsewhere = os.open(os.devnull, mode) if fd == 0 else os.dup(2)
            try:
                os.dup2(elsewhere, fd)
            finally:
                os.close(elsewhere)
        read_fd, write_fd = os.dup(wire_in), os.dup(wire_out)
        opened += [read_fd, write_fd]
        reading, lines = await loop.connect_read_pipe(
            _Lines, os.fdopen(read_fd, "rb", buffering=0))
        opened.remove(read_fd)
        try:
            writing, sink = await loop.connect_write_pipe(
                _Sink, os.fdopen(write_fd, "wb", buffering=0))
            opened.remove(write_fd)
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
        for fd in opened:
            os.close(fd)
        for wire, fd in ((wire_in, 0), (wire_out, 1)):
            with suppress(OSError):
                os.set_blocking(wire, True)  # the descriptions are shared: blocking again
                os.dup2(wire, fd)
            os.close(wire)


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
