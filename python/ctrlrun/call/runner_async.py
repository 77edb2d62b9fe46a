"""The driver of a protected call for ``async def`` executors: the steps of
:class:`.steps.Call` as ``runner`` takes them, with every store step off the event loop (the
reservation and the outcome write on the core's threads, ``io_core``; the rarer ones on worker
threads, ``io_threads``) so the loop never waits on the database, and the cancellation rules
of docs/spec.md §8.1: a reservation or outcome write in flight settles before a cancellation
propagates. The two hot steps are futures settled by the inbox that takes their end
(``io_core``), not coroutines: a future is never cut off by a cancellation, the settling of
an outcome included."""

from __future__ import annotations

import asyncio
import contextlib
import sys
from typing import Any, Awaitable, Callable, Dict, Optional, Set, Tuple

from ctrlrun.call import io_core as _io_core
from ctrlrun.call import io_threads as _io_threads
from ctrlrun.call.approval import poll_interval, refusal
from ctrlrun.call.heartbeat import Heartbeat
from ctrlrun.call.outcome import Outcome
from ctrlrun.call.steps import REFUSALS, Call, through_body
from ctrlrun.errors import ApprovalNeeded
from ctrlrun.notify import hooks as notify
from ctrlrun.store.api import Store
from ctrlrun.store.approvals import ApprovalRecord, ApprovalState

_background: Set[asyncio.Future[Any]] = set()


def _in_thread(fn: Callable[..., Any], *args: Any) -> asyncio.Future[Any]:
    """Store calls are synchronous and release the GIL; coroutines run them on worker
    threads (``io_threads``), so the event loop never waits on the database."""
    return _io_threads.run(fn, *args)


def _reserving(call: Call) -> asyncio.Future[int]:
    """``call.reserve()`` off the event loop: on a core thread (``io_core``) where it can be,
    else on a worker thread; a future of the attempt (set on ``call`` as the write lands, in
    the turn of the loop that takes the step's end)."""

    def landed(ok: bool, value: Any) -> Tuple[bool, Any]:
        if ok:
            call.attempt = value.attempt
            return True, call.attempt
        return False, value

    started = _io_core.reserve(call.store, call.reserve_request(), landed)
    return _in_thread(call.reserve) if started is None else started


def _recording(call: Call, outcome: Outcome) -> asyncio.Future[None]:
    """``call.record(outcome)`` off the event loop: on a core thread where it can be (which
    re-issues a failed write as ``call.record`` does, whether or not this loop still runs),
    else on a worker thread."""

    def landed(ok: bool, value: Any) -> Tuple[bool, Any]:
        if ok:
            return True, None
        return False, call.not_recorded(outcome, value) if isinstance(value, Exception) else value

    try:
        written = _io_core.transition(call.store, call.record_request(outcome), landed)
    except Exception:  # not started (no inbox, a closed store): the worker thread's way
        written = None
    return _in_thread(call.record, outcome) if written is None else written


async def _finish(work: Awaitable[Any]) -> Any:
    """Await ``work`` to the end even if this task is cancelled meanwhile; a cancellation is
    re-raised only once the work is done (a store write in flight must settle, not be
    abandoned: a caller who sees the cancellation may retry at once)."""
    if isinstance(work, asyncio.Future) and work.done():
        return work.result()  # settled already (written on the loop's thread)
    task = asyncio.ensure_future(work)
    _background.add(task)
    task.add_done_callback(_background.discard)
    interrupted: Optional[BaseException] = None
    try:
        await asyncio.wait({task})
    except asyncio.CancelledError as exc:
        interrupted = exc
        with _shielded():
            while not task.done():
                try:
                    await asyncio.wait({task})
                except asyncio.CancelledError:
                    pass
    if interrupted is not None:
        if not task.cancelled():
            task.exception()  # retrieved; the cancellation is what propagates
        raise interrupted
    return task.result()


def _shielded() -> Any:
    """A scope that keeps further cancellations of this task from being delivered while it
    waits for work that must settle. anyio (the MCP SDK, Trio-style code) re-delivers a
    scope's cancellation at every await of the task, so without a shield the wait would wake
    and sleep again on every turn of the event loop until the work ends: it is used when the
    program has imported it. Plain asyncio cancels once per ``cancel()``."""
    anyio = sys.modules.get("anyio")
    if anyio is None:
        return contextlib.nullcontext()
    return anyio.CancelScope(shield=True)


async def _fail_if_granted(started: asyncio.Future[int], call: Call, why: BaseException) -> None:
    """The caller was cancelled while the reservation was being written: once that write
    ends, a granted reservation whose body never started is recorded as failed."""
    try:
        await started
    except BaseException:
        return  # refused or failed: nothing was granted
    await _in_thread(call.fail_unstarted, why)


async def _record_raise(call: Call, exc: BaseException) -> None:
    """Record what the executor's exception ``exc`` says; a refused write is raised in its
    place. A cancellation meanwhile lets the write go on in its thread: if ``exc`` is itself
    a cancellation it propagates as it is, else the new cancellation does."""
    ending = call.raised(exc)
    try:
        written = _recording(call, ending)
        notify.on_written(call, ending, written)  # effect.ambiguous once an ambiguous one lands
        await _finish(written)
    except REFUSALS as refused:
        raise through_body(call.refused(refused, exc))  # noqa: B904 - refused() chains
    except asyncio.CancelledError:
        if isinstance(exc, asyncio.CancelledError):
            return  # the outcome write goes on in its thread; the cancellation propagates
        raise


async def _reserve(call: Call) -> None:
    """The reservation off the event loop; a cancellation meanwhile lets the write settle and
    records a grant whose body never started as failed."""
    started = _reserving(call)
    try:
        await asyncio.shield(started)
    except asyncio.CancelledError as cancel:
        try:
            await _finish(_fail_if_granted(started, call, cancel))
        except asyncio.CancelledError:
            pass
        raise


async def _decision(store: Store, record: ApprovalRecord, timeout: float) -> ApprovalRecord:
    """Await a decision on the pending ``record`` for up to ``timeout`` seconds, polling the
    store (on a worker thread, holding no connection between polls); the last record read."""
    loop = asyncio.get_running_loop()
    started = loop.time()
    while record.state is ApprovalState.PENDING:
        left = started + timeout - loop.time()
        if left <= 0:
            break
        await asyncio.sleep(min(left, poll_interval(loop.time() - started)))
        found = await _in_thread(store.get_approval, record.request_id)
        if found is None:
            break
        record = found
    return record


async def run(
    call: Call,
    fn: Callable[..., Awaitable[Any]],
    args: Tuple[Any, ...],
    kwargs: Dict[str, Any],
    heartbeat: bool = False,
) -> Any:
    """Run ``fn`` once under ``call``'s reservation: reserve, run the body, record its
    outcome."""
    store, spec = call.store, call.spec
    try:
        await _reserve(call)
        needed = False
    except ApprovalNeeded:
        needed = True
    if needed:
        # No grant in force: ask (or find the request that stands), await a decision if told
        # to, and reserve again once granted.
        assert spec is not None
        record = await _in_thread(call.ask)
        if record.state is ApprovalState.PENDING and spec.approval_timeout > 0:
            record = await _decision(store, record, spec.approval_timeout)
        call.granted(record)
        try:
            await _reserve(call)
        except ApprovalNeeded:  # used by another call meanwhile
            raise refusal(await _in_thread(call.ask)) from None
    call.enter()
    beat = Heartbeat(call).start() if heartbeat else None
    try:
        result = await fn(*args, **kwargs)
    except BaseException as exc:
        through_body(exc)
        if beat is not None:
            beat.stop(wait=False)  # never join a thread on the event loop
        await _record_raise(call, exc)
        raise
    finally:
        call.leave()
    if beat is not None:
        beat.stop(wait=False)
    await _finish(_recording(call, call.returned(result)))
    return result
