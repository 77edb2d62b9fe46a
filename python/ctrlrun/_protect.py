"""``protect``: reserve the effect key, run the executor, record the outcome."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import enum
import functools
import hashlib
import inspect
import logging
import os
import time
import uuid
from datetime import timedelta
import threading
import warnings
from typing import Any, Awaitable, Callable, List, Optional, Set, Tuple, TypeVar, Union

from . import _core
from ._policy import current_policy
from ._records import result_to_json
from ._store import Store, default_store, lease_to_micros, store_for_url
from .errors import (
    ActionDenied,
    AmbiguousEffect,
    DuplicateEffect,
    EffectKeyError,
    InvalidArgument,
    NotExecuted,
    StoreError,
    StoreUnresolved,
    StoreWriteFailed,
)

__all__ = ["protect", "idempotency_token", "DEFAULT_LEASE", "PolicyWarning"]


class PolicyWarning(UserWarning):
    """A decorator and the policy file disagree about an action (the decorator wins)."""

F = TypeVar("F", bound=Callable[..., Any])

#: The lease a reservation gets when ``protect`` is given none.
DEFAULT_LEASE = timedelta(minutes=5)

log = logging.getLogger("ctrlrun")

# (effect key, attempt) of the executor running in this context.
_current: contextvars.ContextVar[Optional[Tuple[str, int]]] = contextvars.ContextVar(
    "ctrlrun_current_effect", default=None
)

# Outcome writes are compare-and-sets, so re-issuing them is safe: this many tries, these pauses.
_OUTCOME_PAUSES = (0.05, 0.25, 1.0)


def idempotency_token() -> str:
    """A token for the remote API's own idempotency header, derived from the running
    executor's (effect key, attempt): the same on every call within one attempt, different
    after a renewal. Raises ``InvalidArgument`` outside a protected executor."""
    cur = _current.get()
    if cur is None:
        raise InvalidArgument("idempotency_token() is only available inside a protected executor")
    key, attempt = cur
    digest = hashlib.sha256(f"{attempt}\x1f{key}".encode("utf-8", "surrogatepass")).hexdigest()
    return f"ctrlrun-{digest[:40]}"


def _exc_text(exc: BaseException) -> str:
    """``Type: message`` for the record: never raises, and storable as text anywhere (lone
    surrogates escaped, NUL shown as \\x00)."""
    try:
        msg = str(exc)
    except Exception:
        msg = "<str() of the exception raised>"
    text = f"{type(exc).__name__}: {msg}" if msg else type(exc).__name__
    return text.encode("utf-8", "backslashreplace").decode("utf-8").replace("\x00", "\\x00")


def _render_value(template: str, name: str, value: Any) -> str:
    """One placeholder's value as key text (SPEC §7)."""
    t = type(value)
    if t is str:
        if value:
            return value
    elif t is int:
        return str(value)
    elif isinstance(value, enum.Enum):
        inner = value.value
        if isinstance(inner, str) and not isinstance(inner, enum.Enum) and inner:
            return str.__str__(inner)
        if isinstance(inner, int) and not isinstance(inner, (bool, enum.Enum)):
            return int.__repr__(inner)
    elif isinstance(value, uuid.UUID):
        return str(value)
    elif isinstance(value, str):
        if value:
            return str.__str__(value)
    elif isinstance(value, int) and not isinstance(value, bool):
        return int.__repr__(value)
    if value == "":
        what = "an empty string"
    else:
        try:
            shown = repr(value)
        except Exception:
            shown = "?"
        if len(shown) > 60:
            shown = shown[:57] + "..."
        name_ = t.__qualname__
        what = f"{'an' if name_[:1].lower() in 'aeiou' else 'a'} {name_} ({shown})"
    raise EffectKeyError(
        f"effect template {template!r}: placeholder '{name}' got {what}; an effect key is "
        f"made of non-empty str, int, uuid.UUID and str/int Enum values only"
    )


class _KeyBinder:
    """Binds a call to the function's signature and renders the effect key."""

    __slots__ = ("template", "signature", "names", "defaults", "qualname")

    def __init__(self, template: _core.Template, fn: Callable[..., Any], action: str) -> None:
        self.template = template
        self.qualname = getattr(fn, "__qualname__", repr(fn))
        try:
            self.signature = inspect.signature(fn)
        except (TypeError, ValueError) as exc:
            raise InvalidArgument(
                f"protect({action!r}): cannot read the signature of {self.qualname}: {exc}"
            ) from None
        params = self.signature.parameters
        for p in params.values():
            if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
                star = "*" if p.kind is p.VAR_POSITIONAL else "**"
                raise InvalidArgument(
                    f"protect({action!r}): {self.qualname} takes {star}{p.name}; an effect key "
                    f"is bound from named parameters only, so *args/**kwargs are refused"
                )
        self.names: List[str] = list(template.placeholders)
        for name in self.names:
            if name not in params:
                raise EffectKeyError(
                    f"protect({action!r}): effect template {template.source!r} names "
                    f"'{name}', which is not a parameter of {self.qualname}; available: "
                    f"{', '.join(params) or '(none)'}"
                )
        self.defaults = {n: params[n].default for n in self.names}

    def key(self, args: Tuple[Any, ...], kwargs: dict) -> str:
        # A call the signature refuses raises TypeError here, before anything is reserved.
        arguments = self.signature.bind(*args, **kwargs).arguments
        src = self.template.source
        values = []
        for name in self.names:
            if name in arguments:
                value = arguments[name]
            else:
                value = self.defaults[name]
                if value is inspect.Parameter.empty:
                    raise EffectKeyError(
                        f"effect template {src!r}: no value for placeholder '{name}'; "
                        f"available: {', '.join(arguments) or '(none)'}"
                    )
            values.append(_render_value(src, name, value))
        try:
            return self.template.render(values)
        except UnicodeEncodeError:
            raise EffectKeyError(
                f"effect template {src!r}: a value holds a lone surrogate, which no store can "
                f"keep as text"
            ) from None


class _Gate:
    """Per protected function: which key binder a call uses, after the policy has its say.

    The decorator's template wins over the policy's (with one warning per function when they
    differ); without one, the policy's template applies; with neither, the call runs
    unreserved. A ``deny`` decision refuses the call before anything is reserved."""

    __slots__ = ("name", "fn", "own", "from_policy", "warned")

    def __init__(self, name: str, fn: Callable[..., Any], template: Optional[_core.Template]):
        self.name = name
        self.fn = fn
        self.own = None if template is None else _KeyBinder(template, fn, name)
        self.from_policy: dict = {}
        self.warned = False

    def binder(self) -> Optional[_KeyBinder]:
        policy = current_policy()
        entry = None if policy is None else policy.actions.get(self.name)
        if entry is None:
            return self.own
        if entry.decision == "deny":
            assert policy is not None
            raise ActionDenied(
                f"action {self.name!r} is denied by the policy {policy.path} (line "
                f"{entry.line}); nothing was reserved or run",
                action=self.name,
                policy=policy.path,
            )
        if self.own is not None:
            if entry.effect is not None and entry.effect != self.own.template.source:
                if not self.warned:
                    self.warned = True
                    warnings.warn(
                        f"protect({self.name!r}) on {self.own.qualname}: the decorator's effect "
                        f"template {self.own.template.source!r} differs from the policy's "
                        f"{entry.effect!r} ({policy.path if policy else ''}, line {entry.line}); "
                        f"the decorator's is used",
                        PolicyWarning,
                        stacklevel=3,
                    )
            return self.own
        if entry.effect is None:
            return None
        binder = self.from_policy.get(entry.effect)
        if binder is None:
            binder = _KeyBinder(_core.Template(entry.effect), self.fn, self.name)
            self.from_policy[entry.effect] = binder
        return binder


class _StoreRef:
    """The ``store=`` argument: a Store, a URL opened on first use, or the default."""

    __slots__ = ("_given",)

    def __init__(self, given: Union[Store, str, None]) -> None:
        if given is not None and not isinstance(given, (Store, str)):
            raise InvalidArgument(
                f"store must be a Store, a URL or None, got {type(given).__name__}"
            )
        self._given = given

    def get(self) -> Store:
        given = self._given
        if isinstance(given, Store):
            return given
        if given is None:
            return default_store()
        return store_for_url(given)  # shared per URL; re-opened in a forked child


def _write_outcome(
    store: Store, key: str, action_id: str, attempt: int, kind: str, payload: Optional[str]
) -> None:
    """Record the executor's outcome, re-issuing the compare-and-set on store failures."""
    core = store.core
    last: Optional[Exception] = None
    for pause in (*_OUTCOME_PAUSES, None):
        try:
            core.transition_unread(key, action_id, attempt, kind, payload, store.now_us())
            return
        except (StoreWriteFailed, StoreUnresolved) as exc:
            last = exc
            log.warning("ctrlrun: recording %s for %r failed (%s); retrying", kind, key, exc)
            if pause is not None:
                time.sleep(pause)
        except (DuplicateEffect, AmbiguousEffect):
            raise  # the row was taken over: the store's refusal is the answer
        except Exception as exc:  # a closed store, a broken clock: not worth retrying
            last = exc
            break
    raise StoreError(
        f"the executor for effect '{key}' has already run (attempt {attempt}, action "
        f"{action_id}), but recording its outcome ({kind}) failed: {last}. The effect stays executing and turns ambiguous when a contender "
        f"meets its lapsed lease; do not retry it blindly"
    ) from last


def _fail_unstarted(store: Store, key: str, action_id: str, attempt: int, why: BaseException) -> None:
    """The call stopped after the reservation landed but before the body began: nothing ran,
    so record ``failed`` (a retry may run). If that write fails too, the lease lapses into
    ``ambiguous``."""
    try:
        store.core.transition(
            key,
            action_id,
            attempt,
            "fail",
            f"the executor never started: {_exc_text(why)}",
            store.now_us(),
        )
    except Exception as exc:  # the original error is what the caller must see
        log.warning("ctrlrun: could not record %r as failed after %r: %s", key, why, exc)


def _reserve_and_begin(store: Store, key: str, action_id: str, lease_us: int) -> int:
    """Reserve ``key`` straight into ``executing`` (one durable write: the begin transition is
    folded into the reservation, since the body starts right after); returns the attempt."""
    core = store.core
    attempt: Optional[int] = None
    try:
        attempt = core.reserve(key, action_id, lease_us, store.now_us(), True)[3]
        # Still inside the try: an interrupt (KeyboardInterrupt) landing just after the
        # reservation returned records it as failed, since the body never started.
        return attempt
    except BaseException as exc:
        if attempt is not None:
            _fail_unstarted(store, key, action_id, attempt, exc)
        raise


def _run(
    store: Store,
    key: str,
    lease_us: int,
    fn: Callable[..., Any],
    args: Tuple[Any, ...],
    kwargs: dict,
) -> Any:
    action_id = "act_" + os.urandom(16).hex()
    attempt = _reserve_and_begin(store, key, action_id, lease_us)
    token = _current.set((key, attempt))
    try:
        result = fn(*args, **kwargs)
    except NotExecuted as exc:
        _outcome_after_raise(store, key, action_id, attempt, "fail", _exc_text(exc), exc)
        raise
    except BaseException as exc:
        _outcome_after_raise(
            store,
            key,
            action_id,
            attempt,
            "ambiguous",
            f"the executor raised {_exc_text(exc)}; whether the effect happened is unknown",
            exc,
        )
        raise
    finally:
        _current.reset(token)
    _write_outcome(store, key, action_id, attempt, "commit", result_to_json(result))
    return result


def _outcome_after_raise(
    store: Store, key: str, action_id: str, attempt: int, kind: str, text: str, exc: BaseException
) -> None:
    try:
        _write_outcome(store, key, action_id, attempt, kind, text)
    except (StoreError, DuplicateEffect, AmbiguousEffect, InvalidArgument) as refusal:
        raise refusal from exc


# -- async def ----------------------------------------------------------------------------
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
    await _in_thread(_fail_unstarted, store, key, action_id, attempt, why)


async def _run_async(
    store: Store,
    key: str,
    lease_us: int,
    fn: Callable[..., Awaitable[Any]],
    args: Tuple[Any, ...],
    kwargs: dict,
) -> Any:
    action_id = "act_" + os.urandom(16).hex()
    started = _in_thread(_reserve_and_begin, store, key, action_id, lease_us)
    try:
        attempt = await asyncio.shield(started)
    except asyncio.CancelledError as cancel:
        try:
            await _finish(_fail_if_granted(started, store, key, action_id, cancel))
        except asyncio.CancelledError:
            pass
        raise
    token = _current.set((key, attempt))
    try:
        result = await fn(*args, **kwargs)
    except NotExecuted as exc:
        await _outcome_after_raise_async(store, key, action_id, attempt, "fail", _exc_text(exc), exc)
        raise
    except BaseException as exc:
        await _outcome_after_raise_async(
            store,
            key,
            action_id,
            attempt,
            "ambiguous",
            f"the executor raised {_exc_text(exc)}; whether the effect happened is unknown",
            exc,
        )
        raise
    finally:
        _current.reset(token)
    await _finish(
        _in_thread(_write_outcome, store, key, action_id, attempt, "commit", result_to_json(result))
    )
    return result


async def _outcome_after_raise_async(
    store: Store, key: str, action_id: str, attempt: int, kind: str, text: str, exc: BaseException
) -> None:
    try:
        await _finish(_in_thread(_write_outcome, store, key, action_id, attempt, kind, text))
    except (StoreError, DuplicateEffect, AmbiguousEffect, InvalidArgument) as refusal:
        raise refusal from exc
    except asyncio.CancelledError:
        if isinstance(exc, asyncio.CancelledError):
            return  # the outcome write goes on in its thread; the cancellation propagates
        raise


def protect(
    name: str,
    *,
    effect: Optional[str] = None,
    lease: Union[timedelta, int, float, None] = None,
    store: Union[Store, str, None] = None,
) -> Callable[[F], F]:
    """Make a side-effecting function run at most once per effect key.

    Args:
        name: the action's name, e.g. ``"stripe.refund"``.
        effect: the effect-key template, e.g. ``"refund:{payment_id}"``; each placeholder
            names a parameter. Without it, the policy file's template for ``name`` applies
            (see :mod:`ctrlrun._policy`); with neither, the call runs unreserved.
        lease: how long a reservation is held for the executor: a ``timedelta`` or seconds
            (> 0, finite). Default 5 minutes.
        store: a :class:`Store`, a store URL, or ``None`` for the default store looked up at
            call time.

    Works on ``def`` and ``async def`` functions (generators are refused). For a coroutine,
    nothing is reserved until it is awaited; store I/O runs on worker threads so the event
    loop never blocks, and ``asyncio.CancelledError`` (also from ``asyncio.wait_for`` or
    ``asyncio.timeout``) makes the effect ambiguous and propagates.

    Per call: the arguments are bound to the signature, the key is rendered, the key is
    reserved in one atomic write, the function runs, and its outcome is recorded: a return
    value commits; ``NotExecuted`` fails (a retry may run); anything else (any
    ``BaseException``) makes the effect ambiguous.

    A policy ``decision: deny`` for ``name`` raises ``ActionDenied`` before anything is
    reserved; a broken policy file raises ``PolicyError``.

    Raises at decoration: ``InvalidArgument`` (bad name, template, lease or store, a
    generator, ``*args``/``**kwargs``), ``EffectKeyError`` (a placeholder names no
    parameter). At call time: ``EffectKeyError`` (a value that cannot make a key),
    ``DuplicateEffect``, ``AmbiguousEffect``, ``StoreError`` and its subclasses; and whatever
    the executor raised.
    """
    if not isinstance(name, str) or not name.strip() or not name.isprintable():
        raise InvalidArgument(f"protect(): the action name must be a printable str, got {name!r}")
    lease_us = lease_to_micros(DEFAULT_LEASE if lease is None else lease)
    if effect is not None and not isinstance(effect, str):
        raise InvalidArgument(
            f"protect({name!r}): effect must be a template str, got {type(effect).__name__}"
        )
    template = None if effect is None else _core.Template(effect)
    store_ref = _StoreRef(store)

    def decorate(fn: F) -> F:
        if not callable(fn):
            raise InvalidArgument(f"protect({name!r}) decorates a function, got {fn!r}")
        if inspect.isgeneratorfunction(fn) or inspect.isasyncgenfunction(fn):
            raise InvalidArgument(
                f"protect({name!r}): {fn.__qualname__} is a generator; its effect would happen "
                f"across many resumptions, so it cannot be reserved once. Protect a plain function"
            )
        gate = _Gate(name, fn, template)

        if inspect.iscoroutinefunction(fn):

            @functools.wraps(fn)
            async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
                binder = gate.binder()
                if binder is None:
                    return await fn(*args, **kwargs)
                key = binder.key(args, kwargs)
                return await _run_async(store_ref.get(), key, lease_us, fn, args, kwargs)

            async_wrapper.__ctrlrun_action__ = name  # type: ignore[attr-defined]
            return async_wrapper  # type: ignore[return-value]

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            binder = gate.binder()
            if binder is None:
                return fn(*args, **kwargs)
            key = binder.key(args, kwargs)
            return _run(store_ref.get(), key, lease_us, fn, args, kwargs)

        wrapper.__ctrlrun_action__ = name  # type: ignore[attr-defined]
        return wrapper  # type: ignore[return-value]

    return decorate
