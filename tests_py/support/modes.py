"""The two kinds of executor the decorator cases run against: ``sync`` (a plain ``def``, called
directly) and ``async`` (an ``async def``, awaited under ``asyncio.run``; pytest-asyncio is
not used). The ``mode`` fixture (conftest.py) hands a test one :class:`Mode`.

A case writes its body once. A plain body is the sync executor as it is; the async executor
awaits it between two yields to the event loop. A body that has to await (a nested protected
call, work on a thread) is an ``async def`` using :meth:`Mode.awaitable`, :meth:`Mode.to_thread`
and :meth:`Mode.pause`; the sync executor runs it to its end in one step, without a loop."""

from __future__ import annotations

import asyncio
import functools
import inspect
from typing import Any, Awaitable, Callable

import ctrlrun


async def _ready(value: Any) -> Any:
    return value


def _drive(coro: Any) -> Any:
    """Run a coroutine that never suspends to its end, synchronously."""
    try:
        coro.send(None)
    except StopIteration as done:
        return done.value
    coro.close()
    raise AssertionError("a sync-mode body waited on an event loop")


class Mode:
    def __init__(self, name: str) -> None:
        assert name in ("sync", "async"), name
        self.name = name
        self.is_async = name == "async"

    def __repr__(self) -> str:
        return self.name

    def executor(self, body: Callable[..., Any]) -> Callable[..., Any]:
        """``body`` as an executor of this mode, with its signature (``__wrapped__``)."""
        body_awaits = inspect.iscoroutinefunction(body)
        if not self.is_async:
            if not body_awaits:
                return body

            @functools.wraps(body)
            def run_through(*args: Any, **kwargs: Any) -> Any:
                return _drive(body(*args, **kwargs))

            return run_through

        @functools.wraps(body)
        async def executor(*args: Any, **kwargs: Any) -> Any:
            await asyncio.sleep(0)  # the body runs after a suspension point, and returns across one
            out = body(*args, **kwargs)
            if body_awaits:
                out = await out
            await asyncio.sleep(0)
            return out

        return executor

    def protect(self, name: str, **options: Any) -> Callable[[Callable[..., Any]], Any]:
        """``ctrlrun.protect(name, **options)`` over ``body`` made an executor of this mode."""
        deco = ctrlrun.protect(name, **options)
        return lambda body: deco(self.executor(body))

    def call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Call a protected function from the test, synchronously, and return its result."""
        if self.is_async:
            return asyncio.run(fn(*args, **kwargs))
        return fn(*args, **kwargs)

    # ---- inside an ``async def`` body -----------------------------------------------------

    def awaitable(self, value: Any) -> Awaitable[Any]:
        """What a nested call of a protected function gave: awaitable in both modes."""
        return value if self.is_async else _ready(value)

    def to_thread(self, fn: Callable[..., Any], *args: Any) -> Awaitable[Any]:
        """``fn(*args)`` on a worker thread (async), or in line (sync)."""
        if self.is_async:
            return asyncio.to_thread(fn, *args)
        return _ready(fn(*args))

    def pause(self) -> Awaitable[Any]:
        """A suspension point in the body (async); nothing in sync mode."""
        return asyncio.sleep(0.001) if self.is_async else _ready(None)
