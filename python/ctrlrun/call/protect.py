"""``protect``: reserve the effect key, run the executor, record the outcome.

The pieces, each in its own module of :mod:`ctrlrun.call`: ``binding`` (the key from the
arguments, and the policy's say), ``steps`` (the steps of one call: reserve, run, record the
outcome), ``runner`` and ``runner_async`` (their drivers for functions and for coroutines)."""

from __future__ import annotations

import asyncio
import functools
import inspect
import time
from datetime import timedelta
from typing import Any, Callable, Iterable, Optional, Tuple, TypeVar, Union

import ctrlrun._core as _core
from ctrlrun.call import io_threads as _io_threads
from ctrlrun.call import runner as _runner
from ctrlrun.call import runner_async as _runner_async
from ctrlrun.call import seams
from ctrlrun.call.binding import Gate, PolicyWarning, Route
from ctrlrun.call.protected import Protected
from ctrlrun.call.steps import (
    Call,
    Spec,
    after_refusal,
    extend_lease,
    idempotency_token,
    through_body,
)
from ctrlrun.call.telemetry import UNOBSERVED, observe
from ctrlrun.errors import CTRLRunError, DuplicateEffect, InvalidArgument
from ctrlrun.store.api import Store, default_store, store_at_hand, store_for_url
from ctrlrun.store.approvers import check_name
from ctrlrun.store.durations import lease_to_micros

__all__ = ["protect", "idempotency_token", "extend_lease", "DEFAULT_LEASE", "PolicyWarning"]

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

    async def aget(self) -> Store:
        """:meth:`get` for a coroutine: a store not opened yet is opened on a worker thread
        (opening may create the schema and wait for another process's lock), so the event
        loop never waits on it."""
        given = self._given
        if isinstance(given, Store):
            return given
        return store_at_hand(given) or await _io_threads.run(self.get)


def protect(
    name: str,
    *,
    effect: Optional[str] = None,
    lease: Union[timedelta, int, float, None] = None,
    store: Union[Store, str, None] = None,
    decision: str = "allow",
    approval_ttl: Union[timedelta, int, float, None] = None,
    approval_timeout: Union[int, float] = 0,
    fingerprint_exclude: Iterable[str] = (),
    replay: bool = False,
    wait: Union[int, float] = 0,
    heartbeat: bool = False,
    result_encoder: Optional[Callable[[Any], Any]] = None,
    requested_by: Optional[str] = None,
) -> Callable[[F], F]:
    """Make a side-effecting function run at most once per effect key.

    Args:
        name: the action's name, e.g. ``"stripe.refund"``.
        effect: the effect-key template, e.g. ``"refund:{payment_id}"``; each placeholder
            names a parameter. Without it, the policy file's template for ``name`` applies
            (see :mod:`ctrlrun.policy`); with neither, the call runs unreserved.
        lease: how long a reservation is held for the executor: a ``timedelta`` or seconds
            (> 0, finite). Default 5 minutes.
        store: a :class:`Store`, a store URL, or ``None`` for the default store looked up at
            call time.
        decision: ``"allow"`` (default), ``"approve"`` (a person approves each call's action
            and arguments once; see below) or ``"deny"``. The policy's decision for ``name``
            wins over this one (with a ``PolicyWarning`` when they differ).
        approval_ttl: ``approve`` only: how long a request waits for a decision and a grant
            stays usable (``timedelta`` or seconds; default 15 minutes; the policy's
            ``approval_ttl`` wins).
        approval_timeout: ``approve`` only: seconds to wait (sync) or await (async) for a
            person's decision before raising ``ApprovalRequired``; default 0 (raise at once).
        fingerprint_exclude: names of arguments left out of the call's fingerprint (values
            that change on every retry, such as a request id).
        replay: a call whose key is already ``committed`` by a call with the same arguments
            returns that call's stored result instead of raising ``DuplicateEffect``. The result
            is as stored: JSON round-tripped (a tuple comes back as a tuple when the function is
            annotated to return one, ``tuple[...]`` or a ``NamedTuple``, else as a list; a dataclass as
            its stored form); one stored as unserializable still raises. Other arguments
            still raise ``EffectConflict``; ``in_progress`` and ``ambiguous`` still refuse.
            The policy's ``replay:`` for ``name`` wins where it states one.
        wait: seconds a call that meets another attempt's live lease (``in_progress``) waits
            for it to settle, reserving again with a backoff from 50 ms to 1 s and holding no
            connection or lock meanwhile (an ``async def`` awaits): committed -> the duplicate
            (or, with ``replay``, its result); failed -> this call runs as the next attempt;
            ambiguous, or still held when the time is up -> refused as without ``wait``.
            Default 0: refused at once.
        heartbeat: while the body runs, its lease is extended every third of its length (a
            compare-and-set fenced by the attempt, on a daemon thread), so a long body is never
            lapsed to ``ambiguous`` while its process lives; when the process dies the
            extensions stop and the key lapses as without it. A body may also extend its own
            lease with :func:`ctrlrun.extend_lease`.
        result_encoder: turns a return value that is not JSON into a value that is (called
            by ``json.dumps`` for each such object, nested ones too). Dataclasses and pydantic
            models need none: they are stored as their JSON form. A value still not JSON is
            stored as its repr. The caller always gets the function's own return value.
        requested_by: ``approve`` only: who asks, recorded on each approval request (the
            agent's name, say). A grant under that name is refused (no self-approval), in
            the console, the CLI or the API, under any spelling that is the same once
            normalised (NFKC, case-folded, without spaces at either end); it is a rule on the
            name, and whoever can write the store (on SQLite, the file) can still grant under
            another one. A name with a control, bidirectional or invisible format character is
            refused here.

    Every reserved call stores a fingerprint of its arguments (a digest of their canonical
    form, and one per argument). A later call on the same key with different arguments, or
    from another action, raises ``EffectConflict`` (a ``DuplicateEffect``) naming the
    arguments that differ. Arguments of a type with no canonical form are left out.

    An ``approve`` call with no grant in force for its action and arguments writes a pending
    approval request and raises ``ApprovalRequired`` (nothing is reserved); once a person
    grants it (``ctrlrun approve ID --by NAME``), the same call runs once: the grant is used
    in the reservation's own transaction. A denied request raises ``ActionDenied``.

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
    options = {
        "effect": effect,
        "lease": lease,
        "store": store,
        "decision": decision,
        "approval_ttl": approval_ttl,
        "approval_timeout": approval_timeout,
        "fingerprint_exclude": fingerprint_exclude,
        "replay": replay,
        "wait": wait,
        "heartbeat": heartbeat,
        "result_encoder": result_encoder,
        "requested_by": requested_by,
    }
    if not isinstance(name, str) or not name.strip() or not name.isprintable():
        raise InvalidArgument(f"protect(): the action name must be a printable str, got {name!r}")
    if len(name) > 1000:
        raise InvalidArgument(
            f"protect(): the action name must be at most 1000 characters, got {len(name)}"
        )
    lease_us = lease_to_micros(DEFAULT_LEASE if lease is None else lease)
    if effect is not None and not isinstance(effect, str):
        raise InvalidArgument(
            f"protect({name!r}): effect must be a template str, got {type(effect).__name__}"
        )
    template = None if effect is None else _core.Template(effect)
    store_ref = _StoreRef(store)
    if decision not in ("allow", "approve", "deny"):
        raise InvalidArgument(
            f"protect({name!r}): decision must be 'allow', 'approve' or 'deny', got {decision!r}"
        )
    ttl = (
        None
        if approval_ttl is None
        else timedelta(microseconds=lease_to_micros(approval_ttl, "approval_ttl"))
    )
    if (
        isinstance(approval_timeout, bool)
        or not isinstance(approval_timeout, (int, float))
        or not 0 <= approval_timeout <= 86400
    ):
        raise InvalidArgument(
            f"protect({name!r}): approval_timeout must be seconds from 0 to 86400, got {approval_timeout!r}"
        )
    try:
        if isinstance(fingerprint_exclude, str):
            raise TypeError
        exclude = frozenset(fingerprint_exclude)
        if not all(isinstance(n, str) for n in exclude):
            raise TypeError
    except TypeError:
        raise InvalidArgument(
            f"protect({name!r}): fingerprint_exclude takes argument names (a tuple of str), got {fingerprint_exclude!r}"
        ) from None
    timeout = float(approval_timeout)
    if not isinstance(replay, bool):
        raise InvalidArgument(f"protect({name!r}): replay must be True or False, got {replay!r}")
    if isinstance(wait, bool) or not isinstance(wait, (int, float)) or not 0 <= wait <= 86400:
        raise InvalidArgument(
            f"protect({name!r}): wait must be seconds from 0 to 86400, got {wait!r}"
        )
    wait_s = float(wait)
    if result_encoder is not None and not callable(result_encoder):
        raise InvalidArgument(
            f"protect({name!r}): result_encoder must be callable, got {result_encoder!r}"
        )
    if not isinstance(heartbeat, bool):
        raise InvalidArgument(
            f"protect({name!r}): heartbeat must be True or False, got {heartbeat!r}"
        )

    if requested_by is not None:
        check_name(f"protect({name!r}): requested_by", requested_by)

    def bound(route: Route, args: Any, kwargs: Any) -> Tuple[str, Spec]:
        """The call's key, and what it says about itself (its fingerprint, its approval)."""
        key, arguments = route[0].bind(args, kwargs)
        spec = Spec(
            name, arguments, exclude, route[1], timeout, result_encoder, requested_by, route[3]
        )
        if route[1] is not None and spec.left_out:
            # an approval binds exactly the arguments a person is shown: none may be left out
            raise InvalidArgument(
                f"action {name!r} needs approval, but its argument(s) "
                f"{', '.join(spec.left_out)} have no canonical form, so an approval could not "
                f"be bound to them; pass plain values, or leave them out with "
                f"fingerprint_exclude. Nothing was reserved or run"
            )
        return key, spec

    def decorate(fn: F) -> F:
        tool = seams.protect_tool(fn, name, options)  # a framework's tool object
        if tool is not None:
            return tool  # type: ignore[no-any-return]
        if not callable(fn):
            raise InvalidArgument(f"protect({name!r}) decorates a function, got {fn!r}")
        if inspect.isgeneratorfunction(fn) or inspect.isasyncgenfunction(fn):
            raise InvalidArgument(
                f"protect({name!r}): {fn.__qualname__} is a generator; its effect would happen "
                f"across many resumptions, so it cannot be reserved once. Protect a plain function"
            )
        seams.refuse_registered(name, fn)
        gate = Gate(name, fn, template, decision, ttl, replay)
        as_tuple = seams.tuple_maker(fn)
        try:
            params = inspect.signature(fn).parameters if exclude else {}
        except (TypeError, ValueError) as exc:
            raise InvalidArgument(
                f"protect({name!r}): cannot read the signature of {fn!r} to check fingerprint_exclude: {exc}"
            ) from None
        unknown = sorted(n for n in exclude if n not in params)
        if unknown:
            raise InvalidArgument(
                f"protect({name!r}): fingerprint_exclude names no parameter of {fn.__qualname__}: {', '.join(unknown)}"
            )
        in_key = sorted(exclude & set(template.placeholders)) if template is not None else []
        if in_key:
            raise InvalidArgument(
                f"protect({name!r}): fingerprint_exclude names the key's own "
                f"placeholder(s) {', '.join(in_key)}; they are always part of "
                f"the call's identity"
            )

        about = Protected(name, options, gate, bound, lease_us, store_ref.get, store_ref.aget)

        if inspect.iscoroutinefunction(fn):

            @functools.wraps(fn)
            async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
                route = gate.route()
                if route is None:
                    try:
                        return await fn(*args, **kwargs)
                    except CTRLRunError as exc:  # a nested call's: never this call's refusal
                        raise through_body(exc)  # noqa: B904 - the same exception
                key, spec = bound(route, args, kwargs)
                watched = observe(name, key)
                if not (route[2] or wait_s):  # no replay, no wait: a refusal is raised as it is
                    if watched is None:
                        call = Call(await store_ref.aget(), key, lease_us, spec)
                        return await _runner_async.run(call, fn, args, kwargs, heartbeat)
                    with watched:  # a store that cannot be opened is observed too
                        call = Call(await store_ref.aget(), key, lease_us, spec)
                        return await _runner_async.run(call, fn, args, kwargs, heartbeat)
                started = time.monotonic()
                with watched or UNOBSERVED as seen:
                    while True:
                        try:
                            call = Call(await store_ref.aget(), key, lease_us, spec)
                            return await _runner_async.run(call, fn, args, kwargs, heartbeat)
                        except DuplicateEffect as dup:
                            replayed, value = after_refusal(dup, route[2], wait_s, started, seen)
                            if replayed:
                                return value if as_tuple is None else as_tuple(value)
                        await asyncio.sleep(value)

            async_wrapper.__ctrlrun_action__ = name  # type: ignore[attr-defined]
            async_wrapper.__ctrlrun__ = about  # type: ignore[attr-defined]
            return async_wrapper  # type: ignore[return-value]

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            route = gate.route()
            if route is None:
                try:
                    return fn(*args, **kwargs)
                except CTRLRunError as exc:  # a nested call's: never this call's refusal
                    raise through_body(exc)  # noqa: B904 - the same exception
            key, spec = bound(route, args, kwargs)
            watched = observe(name, key)
            if not (route[2] or wait_s):  # no replay, no wait: a refusal is raised as it is
                if watched is None:
                    return _runner.run(
                        Call(store_ref.get(), key, lease_us, spec), fn, args, kwargs, heartbeat
                    )
                with watched:  # a store that cannot be opened is observed too
                    call = Call(store_ref.get(), key, lease_us, spec)
                    return _runner.run(call, fn, args, kwargs, heartbeat)
            started = time.monotonic()
            with watched or UNOBSERVED as seen:
                while True:
                    try:
                        call = Call(store_ref.get(), key, lease_us, spec)
                        return _runner.run(call, fn, args, kwargs, heartbeat)
                    except DuplicateEffect as dup:
                        replayed, value = after_refusal(dup, route[2], wait_s, started, seen)
                        if replayed:
                            return value if as_tuple is None else as_tuple(value)
                    time.sleep(value)

        wrapper.__ctrlrun_action__ = name  # type: ignore[attr-defined]
        wrapper.__ctrlrun__ = about  # type: ignore[attr-defined]
        return wrapper  # type: ignore[return-value]

    return decorate
