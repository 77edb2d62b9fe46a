"""The worker threads an ``async def`` protected call's store steps run on, so the event loop
never waits on the database.

``loop.run_in_executor`` would do, but each trip through it costs about 160-220 µs on a
2-core machine (measured: a ``concurrent.futures`` future, a callback, ``call_soon_threadsafe``
and a second future, with a hand-off of the GIL at each), two or three times per protected
call. This module does the same trip in about 60-75 µs: a worker takes the job from a
``queue.SimpleQueue``, puts its outcome on the loop's completion queue and writes one byte to
the loop's pipe; the loop's reader callback sets the futures. Written here because no library
offers an executor with that wake-up path, and the store steps are this project's own.

The workers are shared (at most :data:`MAX_WORKERS`, started as needed); each event loop has
its own pipe and completion queue. A forked child starts new workers. On a loop that cannot
watch a pipe (Windows' proactor loop), ``run_in_executor`` is used.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import os
import queue
import threading
import weakref
from typing import Any, Callable, Deque, Optional, Tuple

#: The most worker threads: store calls in flight at once before the next one waits.
MAX_WORKERS = 16


class _Wakeup:
    """One event loop's side: the outcomes waiting for it, and the pipe that wakes it."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.done: Deque[Tuple["asyncio.Future[Any]", bool, Any]] = collections.deque()
        self.read_fd, self.write_fd = os.pipe()
        os.set_blocking(self.read_fd, False)
        os.set_blocking(self.write_fd, False)  # a full pipe already holds a wake-up
        try:
            loop.add_reader(self.read_fd, self.drain)
        except BaseException:
            _close_fds(self.read_fd, self.write_fd)
            raise
        weakref.finalize(loop, _close_fds, self.read_fd, self.write_fd)

    def finished(self, future: "asyncio.Future[Any]", ok: bool, value: Any) -> None:
        """On a worker: hand the outcome to the loop and wake it."""
        self.done.append((future, ok, value))
        try:
            os.write(self.write_fd, b"\0")
        except (BlockingIOError, OSError):
            pass  # full: the loop is woken already; closed: the loop is gone

    def drain(self) -> None:
        """On the loop: settle the futures whose jobs ended."""
        try:
            while os.read(self.read_fd, 4096):
                pass
        except (BlockingIOError, OSError):
            pass
        while self.done:
            future, ok, value = self.done.popleft()
            if future.cancelled():
                continue  # the caller stopped waiting; the job ran to its end anyway
            if ok:
                future.set_result(value)
            else:
                future.set_exception(value)


def _close_fds(*fds: int) -> None:
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            pass


class _Workers:
    def __init__(self) -> None:
        self.jobs: "queue.SimpleQueue[Any]" = queue.SimpleQueue()
        self.lock = threading.Lock()
        self.started = 0
        self.idle = 0
        self.loops: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Optional[_Wakeup]]" = (
            weakref.WeakKeyDictionary())

    def wakeup(self, loop: asyncio.AbstractEventLoop) -> Optional[_Wakeup]:
        try:
            return self.loops[loop]
        except KeyError:
            pass
        except TypeError:
            return None  # a loop that takes no weak reference: run_in_executor
        try:
            made: Optional[_Wakeup] = _Wakeup(loop)
        except NotImplementedError:
            made = None  # this loop cannot watch a pipe
        self.loops[loop] = made
        return made

    def submit(self, wake: _Wakeup, future: "asyncio.Future[Any]", fn: Callable[..., Any],
               args: Tuple[Any, ...]) -> None:
        with self.lock:
            if self.idle == 0 and self.started < MAX_WORKERS:
                self.started += 1
                threading.Thread(target=self.work, name=f"ctrlrun-io-{self.started}",
                                 daemon=True).start()
            else:
                self.idle -= 1 if self.idle else 0
        self.jobs.put((wake, future, fn, args))

    def work(self) -> None:
        while True:
            wake, future, fn, args = self.jobs.get()
            try:
                wake.finished(future, True, fn(*args))
            except BaseException as exc:  # the caller's future carries it
                wake.finished(future, False, exc)
            finally:
                del wake, future, fn, args
            with self.lock:
                self.idle += 1


_workers = _Workers()


def _after_fork_in_child() -> None:
    # The parent's worker threads do not exist in a forked child, nor do its loops' readers.
    global _workers
    _workers = _Workers()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)

_fallback: Optional[concurrent.futures.ThreadPoolExecutor] = None


def run(fn: Callable[..., Any], *args: Any) -> "asyncio.Future[Any]":
    """``fn(*args)`` on a worker thread; a future of the running loop for its outcome."""
    global _fallback
    loop = asyncio.get_running_loop()
    wake = _workers.wakeup(loop)
    if wake is None:
        if _fallback is None:
            _fallback = concurrent.futures.ThreadPoolExecutor(MAX_WORKERS, "ctrlrun-io")
        return loop.run_in_executor(_fallback, fn, *args)
    future = loop.create_future()
    _workers.submit(wake, future, fn, args)
    return future
