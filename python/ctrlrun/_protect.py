"""``protect``: reserve the effect key, run the executor, record the outcome.

The pieces, each in its own module: ``_binding`` (the key from the arguments, and the policy's
say), ``_steps`` (the steps of one call: reserve, run, record the outcome), ``_runner`` and
``_runner_async`` (their drivers for functions and for coroutines)."""

from __future__ import annotations

import functools
import inspect
from datetime import timedelta
from typing import Any, Callable, Optional, TypeVar, Union

from . import _core, _runner, _runner_async
from ._binding import Gate, PolicyWarning
from ._steps import idempotency_token
from ._store import Store, default_store, lease_to_micros, store_for_url
from .errors import InvalidArgument

__all__ = ["protect", "idempotency_token", "DEFAULT_LEASE", "PolicyWarning"]

F = TypeVar("F", bound=Callable[..., Any])

#: The lease a reservation gets when ``protect`` is given none.
DEFAULT_LEASE = timedelta(minutes=5)


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
        gate = Gate(name, fn, template)

        if inspect.iscoroutinefunction(fn):

            @functools.wraps(fn)
            async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
                binder = gate.binder()
                if binder is None:
                    return await fn(*args, **kwargs)
                key = binder.key(args, kwargs)
                return await _runner_async.run(store_ref.get(), key, lease_us, fn, args, kwargs)

            async_wrapper.__ctrlrun_action__ = name  # type: ignore[attr-defined]
            return async_wrapper  # type: ignore[return-value]

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            binder = gate.binder()
            if binder is None:
                return fn(*args, **kwargs)
            key = binder.key(args, kwargs)
            return _runner.run(store_ref.get(), key, lease_us, fn, args, kwargs)

        wrapper.__ctrlrun_action__ = name  # type: ignore[attr-defined]
        return wrapper  # type: ignore[return-value]

    return decorate
