"""The two store steps every ``async def`` protected call makes (the reservation and the
outcome write): done on the event loop's thread where the store cannot make them wait (SQLite
at ``synchronous=NORMAL`` with the write lock free at once: ``_core.step_soon``,
src/py/on_loop.rs), else run on the core's own threads
(src/py/background.rs): the database work starts without waiting for the GIL, and the event
loop is woken once for the steps that finished meanwhile. Either way the caller gets a future;
one done on the loop's thread is settled already. Every other store call of an async caller
goes through ``io_threads``.

Each event loop has an inbox (``_core.Completions``): a socket the loop watches, and the steps
finished for it. A step is known by a token; its future lives here, on the loop. Where the core
has no background threads (Windows), or the loop cannot watch a descriptor, the functions
return ``None`` and the caller uses ``io_threads``. A forked child makes new inboxes (and the
core a new pool); at exit the core's threads finish the steps queued.
"""

from __future__ import annotations

import asyncio
import contextvars
import itertools
import os
import threading
import weakref
from typing import Any, Callable, Dict, Optional, Tuple

import ctrlrun._core as _core
from ctrlrun.call.io_threads import PerLoop

_AVAILABLE = hasattr(_core, "Completions")

Then = Callable[[bool, Any], Tuple[bool, Any]]
"""What the caller makes of a finished step, ``(ok, value)`` to ``(ok, value)``, applied as the
step is taken off the inbox, in the caller's context: the caller's future is settled in that
same turn of the loop (a callback chained on another future would wait for a turn of its
own)."""


def _in_context(context: contextvars.Context, then: Then) -> Then:
    return lambda ok, value: context.run(then, ok, value)


def _settle(future: asyncio.Future[Any], ok: bool, value: Any, then: Optional[Then]) -> None:
    if then is not None:
        try:
            ok, value = then(ok, value)
        except Exception as exc:  # what the caller makes of it failed: that is the answer
            ok, value = False, exc
    if ok:
        future.set_result(value)
    else:
        future.set_exception(value)


_step_soon: Any = getattr(_core, "step_soon", None)  # POSIX only, as `Completions`


class _Inbox:
    """One event loop's finished steps and the futures waiting for them."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.completions = _core.Completions()
        self.waiting: Dict[int, Tuple[asyncio.Future[Any], Optional[Then]]] = {}
        self.tokens = itertools.count(1)
        try:
            loop.add_reader(self.completions.fileno(), self.drain)
        except BaseException:
            self.completions.close()
            raise
        weakref.finalize(loop, self.completions.close)

    def drain(self) -> None:
        """On the loop: settle the futures whose steps finished."""
        for token, ok, value in self.completions.take():
            future, then = self.waiting.pop(token, (None, None))
            if future is None or future.done():
                continue  # the caller stopped waiting; the step ran to its end anyway
            _settle(future, ok, value, then)

    def submit(self, store: Any, request: Any, then: Optional[Then] = None) -> asyncio.Future[Any]:
        future = asyncio.get_running_loop().create_future()
        token = next(self.tokens)
        if then is not None:  # run in the caller's context (its log records carry its ids)
            then = _in_context(contextvars.copy_context(), then)
        self.waiting[token] = (future, then)
        try:
            now = _step_soon(store._core, self.completions, token, request)
        except BaseException:
            del self.waiting[token]
            raise
        if now is not None:  # done on this thread, nothing queued
            del self.waiting[token]
            ok, value = now
            _settle(future, ok, value, then)
        return future


def _inbox_of(loop: asyncio.AbstractEventLoop) -> Optional[_Inbox]:
    return _Inbox(loop) if _AVAILABLE else None


def _registry() -> PerLoop[_Inbox]:
    """Every loop's inbox; made anew in a forked child (a parent's thread may have held its
    lock at the instant of the fork)."""
    return PerLoop(_inbox_of, lambda inbox: inbox.completions.close())


_inboxes = _registry()


def reserve(
    store: Any, request: _core.ReserveRequest, then: Optional[Then] = None
) -> Optional[asyncio.Future[Any]]:
    """``store._core.reserve(request)`` here or on a core thread: a future of its row (or of
    what ``then`` makes of it), or ``None`` where this loop has no inbox."""
    inbox = _inboxes.of(asyncio.get_running_loop())
    return None if inbox is None else inbox.submit(store, request, then)


def transition(
    store: Any, request: _core.OutcomeRequest, then: Optional[Then] = None
) -> Optional[asyncio.Future[Any]]:
    """``store._core.record_outcome(request)`` here or on a core thread (the same retries and
    the same rule for an unknown try): a future of ``None`` (or of what ``then`` makes of it),
    or ``None`` where this loop has no inbox."""
    inbox = _inboxes.of(asyncio.get_running_loop())
    return None if inbox is None else inbox.submit(store, request, then)


def _after_fork_in_child() -> None:
    # The parent's loops and inboxes are not this process's to use.
    global _inboxes
    _inboxes = _registry()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)

if _AVAILABLE:
    # Run when the interpreter exits, before it finalizes: the core's threads finish the steps
    # queued (an outcome write is never cut off), as ``io_threads``' workers do.
    threading._register_atexit(_core.finish_background)  # type: ignore[attr-defined]
