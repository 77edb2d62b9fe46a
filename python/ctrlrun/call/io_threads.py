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
its own pipe and completion queue, closed once the loop is closed. At exit the workers finish
the jobs queued (an outcome write is never cut off), as ``concurrent.futures``' workers do. A
forked child starts new workers. On Windows, and on a loop that cannot watch a pipe,
``run_in_executor`` is used.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import os
import queue
import threading
import weakref
from typing import Any, Callable, Deque, Generic, List, Optional, Tuple, TypeVar

T = TypeVar("T")

#: The most worker threads: store calls in flight at once before the next one waits.
MAX_WORKERS = 16


class _Wakeup:
    """One event loop's side: the outcomes waiting for it, and the pipe that wakes it."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.done: Deque[Tuple[asyncio.Future[Any], bool, Any]] = collections.deque()
        self.read_fd, self.write_fd = os.pipe()
        # Held to write the wake-up byte and to close the pipe: once closed, its numbers may
        # name another file, which a late worker must never write to.
        self.lock = threading.Lock()
        self.closed = False
        os.set_blocking(self.read_fd, False)
        os.set_blocking(self.write_fd, False)  # a full pipe already holds a wake-up
        try:
            loop.add_reader(self.read_fd, self.drain)
        except BaseException:
            self.close()
            raise
        weakref.finalize(loop, self.close)

    def finished(self, future: asyncio.Future[Any], ok: bool, value: Any) -> None:
        """On a worker: hand the outcome to the loop and wake it (unless the loop is closed:
        nobody waits, and a queued outcome would keep the loop alive)."""
        with self.lock:
            if self.closed or future.get_loop().is_closed():
                return
            self.done.append((future, ok, value))
            try:
                os.write(self.write_fd, b"\0")
            except OSError:
                pass  # full: the loop is woken already

    def drain(self) -> None:
        """On the loop: settle the futures whose jobs ended."""
        try:
            while os.read(self.read_fd, 4096):
                pass
        except OSError:
            pass
        while self.done:
            future, ok, value = self.done.popleft()
            if future.cancelled():
                continue  # the caller stopped waiting; the job ran to its end anyway
            if not ok and isinstance(value, StopIteration):
                value = RuntimeError(f"a store step raised StopIteration: {value!r}")
            try:
                future.set_result(value) if ok else future.set_exception(value)
            except asyncio.InvalidStateError:
                pass  # settled meanwhile

    def close(self) -> None:
        """The loop is closed (or gone): drop what waits for it and close the pipe."""
        with self.lock:
            if self.closed:
                return
            self.closed = True
            self.done.clear()
            _close_fds(self.read_fd, self.write_fd)


def _close_fds(*fds: int) -> None:
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            pass


class PerLoop(Generic[T]):
    """What each event loop has one of (``make(loop)``; ``None``: that loop has none, and the
    caller uses its fallback), held for as long as the loop lives. When a new loop comes, the
    ones of closed loops are let go (``close``): their waiting futures refer to their loops,
    which would otherwise never be collected. Shared by ``io_threads`` and ``io_core``."""

    def __init__(
        self, make: Callable[[asyncio.AbstractEventLoop], Optional[T]], close: Callable[[T], None]
    ) -> None:
        self.make, self.close = make, close
        self.lock = threading.Lock()
        self.by_loop: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Optional[T]] = (
            weakref.WeakKeyDictionary()
        )

    def of(self, loop: asyncio.AbstractEventLoop) -> Optional[T]:
        try:
            return self.by_loop[loop]
        except KeyError:
            pass
        except TypeError:
            return None  # a loop that takes no weak reference
        with self.lock:
            for old, made in list(self.by_loop.items()):
                if old.is_closed():
                    del self.by_loop[old]
                    if made is not None:
                        self.close(made)
        try:
            made = self.make(loop)
        except NotImplementedError:
            made = None  # this loop cannot watch a descriptor
        with self.lock:
            self.by_loop[loop] = made
        return made


def _wakeup_of(loop: asyncio.AbstractEventLoop) -> Optional[_Wakeup]:
    return None if os.name == "nt" else _Wakeup(loop)  # Windows: its selector cannot watch a pipe


class _Workers:
    def __init__(self) -> None:
        self.jobs: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self.lock = threading.Lock()
        self.threads: List[threading.Thread] = []
        self.idle = 0
        self.loops: PerLoop[_Wakeup] = PerLoop(_wakeup_of, _Wakeup.close)

    def wakeup(self, loop: asyncio.AbstractEventLoop) -> Optional[_Wakeup]:
        return self.loops.of(loop)

    def submit(
        self,
        wake: _Wakeup,
        future: asyncio.Future[Any],
        fn: Callable[..., Any],
        args: Tuple[Any, ...],
    ) -> None:
        with self.lock:
            if self.idle == 0 and len(self.threads) < MAX_WORKERS:
                thread = threading.Thread(
                    target=self.work, name=f"ctrlrun-io-{len(self.threads) + 1}"
                )
                thread.start()  # not a daemon: at exit, the queued jobs are done first
                self.threads.append(thread)
            elif self.idle:
                self.idle -= 1
        self.jobs.put((wake, future, fn, args))

    def stop(self) -> None:
        """At exit: each worker ends after the jobs queued before its stop mark."""
        with self.lock:
            threads = list(self.threads)
        for _ in threads:
            self.jobs.put(None)
        for thread in threads:
            thread.join()

    def work(self) -> None:
        while True:
            job = self.jobs.get()
            if job is None:
                return
            wake, future, fn, args = job
            try:
                wake.finished(future, True, fn(*args))
            except BaseException as exc:  # the caller's future carries it
                wake.finished(future, False, exc)
            finally:
                del job, wake, future, fn, args
            with self.lock:
                self.idle += 1


_workers = _Workers()


def _after_fork_in_child() -> None:
    # The parent's worker threads do not exist in a forked child, nor do its loops' readers.
    global _workers
    _workers = _Workers()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _at_exit() -> None:
    _workers.stop()


def finish_queued() -> None:
    """Wait until the jobs queued so far have run (later ones start new workers)."""
    global _workers
    old, _workers = _workers, _Workers()
    old.stop()


# Run when the interpreter exits, before it waits for the threads that are not daemons (the
# workers, blocked on their queue): the hook concurrent.futures uses for its own workers.
threading._register_atexit(_at_exit)  # type: ignore[attr-defined]

_fallback: Optional[concurrent.futures.ThreadPoolExecutor] = None


def run(fn: Callable[..., Any], *args: Any) -> asyncio.Future[Any]:
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
