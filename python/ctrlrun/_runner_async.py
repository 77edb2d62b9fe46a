"""The steps of a protected call for ``async def`` executors: the same reserve, run and
outcome as ``_runner``, with every store call on a worker thread so the event loop never
waits on the database, and the cancellation rules of SPEC §8.1."""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import threading
from typing import Any, Awaitable, Callable, Optional, Set, Tuple

from ._records import result_to_json
from ._runner import (
    current,
    fail_unstarted,
    new_action_id,
    outcome_of_raise,
    reserve_and_begin,
    write_outcome,
)
from ._store import Store
from .errors import AmbiguousEffect, DuplicateEffect, InvalidArgument, StoreError

# Store calls are synchronous and release the GIL; coroutines run them on these worker
# threads, so the event loop never waits on the database.
_io_lock = threading.Lock()
_io_pool: Optional[concurrent.futures.ThreadPoolExecutor] = None
_background: Set["asyncio.Future[Any]"] = set()


def _io_executor() -> concurrent.futures.ThreadPoolExecutor:
    global _io_pool
    if _io_pool is None:
        with _io_lock:
            if _io_pool is None:
                _io_pool = concurrent.futures.ThreadPoolExecutor(
                    max_workers=16, thread_name_prefix="ctrlrun-io"
                )
    return _io_pool


def _forget_io_pool_after_fork() -> None:
    # The parent's worker threads do not exist in a forked child: start a new pool there.
    global _io_pool, _io_lock
    _io_pool = None
    _io_lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_io_pool_after_fork)


def _in_thread(fn: Callable[..., Any], *args: Any) -> "asyncio.Future[Any]":
    return asyncio.get_running_loop().run_in_executor(_io_executor(), fn, *args)


async def _finish(work: Awaitable[Any]) -> Any:
    """Await ``work`` to the end even if this task is cancelled meanwhile; a cancellation is
    re-raised only once the work is done (a store write in flight must settle, not be
    abandoned: a caller who sees the cancellation may retry at once)."""
    task = asyncio.ensure_future(work)
    _background.add(task)
    task.add_done_callback(_background.discard)
    interrupted: Optional[BaseException] = None
    while not task.done():
        try:
            await asyncio.wait({task})
        except asyncio.CancelledError as exc:
            interrupted = exc
    if interrupted is not None:
        if not task.cancelled():
            task.exception()  # retrieved; the cancellation is what propagates
        raise interrupted
    return task.result()


async def _fail_if_granted(
    started: "asyncio.Future[int]", store: Store, key: str, action_id: str, why: BaseException
) -> None:
    """The caller was cancelled while the reservation was being written: once that write
    ends, a granted reservation whose body never started is recorded as failed."""
    try:
        attempt = await started
    except BaseException:
        return  # refused or failed: nothing was granted
    await _in_thread(fail_unstarted, store, key, action_id, attempt, why)


async def run(
    store: Store,
    key: str,
    lease_us: int,
    fn: Callable[..., Awaitable[Any]],
    args: Tuple[Any, ...],
    kwargs: dict,
) -> Any:
    action_id = new_action_id()
    started = _in_thread(reserve_and_begin, store, key, action_id, lease_us)
    try:
        attempt = await asyncio.shield(started)
    except asyncio.CancelledError as cancel:
        try:
            await _finish(_fail_if_granted(started, store, key, action_id, cancel))
        except asyncio.CancelledError:
            pass
        raise
    token = current.set((key, attempt))
    try:
        result = await fn(*args, **kwargs)
    except BaseException as exc:
        kind, text = outcome_of_raise(exc)
        await _outcome_after_raise_async(store, key, action_id, attempt, kind, text, exc)
        raise
    finally:
        current.reset(token)
    await _finish(
        _in_thread(write_outcome, store, key, action_id, attempt, "commit", result_to_json(result))
    )
    return result


async def _outcome_after_raise_async(
    store: Store, key: str, action_id: str, attempt: int, kind: str, text: str, exc: BaseException
) -> None:
    try:
        await _finish(_in_thread(write_outcome, store, key, action_id, attempt, kind, text))
    except (StoreError, DuplicateEffect, AmbiguousEffect, InvalidArgument) as refusal:
        raise refusal from exc
    except asyncio.CancelledError:
        if isinstance(exc, asyncio.CancelledError):
            return  # the outcome write goes on in its thread; the cancellation propagates
        raise
