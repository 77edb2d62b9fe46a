"""What every integration and the gateway tell a model when ctrlrun refuses a call, and the
wrapper that turns a refusal into that answer. Framework-free.

A refusal is an exception that means "nothing was run by this call": a duplicate of a
committed or in-progress key (or a conflict with it), an effect whose outcome is unknown, an
approval still pending, a denial, or arguments that make no key. Anything else a protected
function raises is the tool's own error and is left to the framework."""

from __future__ import annotations

import functools
import inspect
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Callable, Dict, Optional, Tuple, Type

from ctrlrun import errors
from ctrlrun.call.protected import Protected, protected
from ctrlrun.call.steps import THROUGH_BODY

__all__ = ["Refusal", "Refused", "refusal_of", "answering", "catching", "key_or_none", "REFUSALS"]

#: The exceptions that are refusals (nothing was run by the call that raised them).
REFUSALS = (
    errors.DuplicateEffect,
    errors.AmbiguousEffect,
    errors.ApprovalRequired,
    errors.ActionDenied,
    errors.EffectKeyError,
)


@dataclass(frozen=True)
class Refusal:
    """One refused call, as a model is told of it.

    ``kind``: ``committed``, ``in_progress``, ``conflict``, ``ambiguous``,
    ``approval_required``, ``denied``, ``invalid`` (the key cannot be made from these
    arguments) or ``unreadable`` (the key is taken, its row cannot be read). ``text``: one line
    an LLM can act on. ``payload``: the same facts for a program (the gateway's
    ``structuredContent["ctrlrun"]``). ``retryable``: only an ``invalid`` call could succeed
    when called again, with other arguments."""

    kind: str
    text: str
    payload: Dict[str, Any] = field(default_factory=dict)
    retryable: bool = False
    exc: Optional[BaseException] = field(default=None, compare=False)


class Refused:
    """A refusal given back in place of the call's value (``answering(fn, Refused)``), for an
    integration to answer once it has looked at it."""

    __slots__ = ("refusal",)

    def __init__(self, refusal: Refusal) -> None:
        self.refusal = refusal


def _iso(dt: Optional[datetime]) -> Optional[str]:
    return None if dt is None else dt.isoformat().replace("+00:00", "Z")


def _duplicate(action: str, key: Optional[str], exc: errors.DuplicateEffect) -> Refusal:
    base: Dict[str, Any] = {"action": action, "effect_key": key}
    try:
        record = exc.record
    except errors.CTRLRunError as unreadable:  # a row edited by hand into what no record holds
        return Refusal(
            "unreadable",
            f"{key} is taken ({exc.state}), but its row cannot be read: {unreadable}; nothing "
            f"was run. Do not retry",
            {**base, "refused": "store"},
            exc=exc,
        )
    if isinstance(exc, errors.EffectConflict):
        differ = ", ".join(exc.fields) or "the action"
        return Refusal(
            "conflict",
            f"conflict: {key} was already used with other arguments ({differ} differ); it is "
            f"{exc.state}. Do not retry with these arguments",
            {
                **base,
                "refused": "conflict",
                "fields": list(exc.fields),
                "state": exc.state,
                "other_action": exc.other_action,
            },
            exc=exc,
        )
    # (a refusal from the store always carries its row; None only for one made by hand)
    if exc.state == "committed":
        at = _iso(record.updated_at) if record is not None else None
        attempt = record.attempt if record is not None else None
        return Refusal(
            "committed",
            f"already done: {key} committed at {at}; do not retry",
            {**base, "refused": "committed", "committed_at": at, "attempt": attempt},
            exc=exc,
        )
    until = _iso(record.lease_expires_at) if record is not None else None
    return Refusal(
        "in_progress",
        f"in progress: {key} is being done by another call (its lease runs until {until}); do "
        f"not retry now",
        {**base, "refused": "in_progress", "lease_expires_at": until},
        exc=exc,
    )


def refusal_of(exc: BaseException, action: str, key: Optional[str] = None) -> Optional[Refusal]:
    """What the model is told of ``exc``, raised by a protected call of ``action`` (``key``:
    its effect key, when the exception does not carry it); ``None`` when ``exc`` is not a
    refusal, or came out of a body that ran (a nested protected call's refusal: the tool's
    own error, since this call did run)."""
    if getattr(exc, THROUGH_BODY, False):
        return None
    if isinstance(exc, errors.DuplicateEffect):
        return _duplicate(action, exc.effect_key or key, exc)
    base: Dict[str, Any] = {"action": action, "effect_key": key}
    if isinstance(exc, errors.AmbiguousEffect):
        key = exc.effect_key or key
        return Refusal(
            "ambiguous",
            f"outcome unknown: {key} may or may not have happened; a person must resolve it "
            f"(`ctrlrun resolve {key} --committed` or `--failed`). Do not retry",
            {**base, "effect_key": key, "refused": "ambiguous"},
            exc=exc,
        )
    if isinstance(exc, errors.ApprovalRequired):
        rid = exc.request_id
        return Refusal(
            "approval_required",
            f"waiting for approval {rid}: {action} runs once a person grants it (`ctrlrun "
            f"approve {rid} --by NAME`); then call again with the same arguments",
            {
                **base,
                "effect_key": exc.effect_key or key,
                "refused": "approval_required",
                "request_id": rid,
                "expires_at": _iso(exc.expires_at),
                "arguments": exc.arguments,
                "not_bound": list(exc.not_bound),
            },
            exc=exc,
        )
    if isinstance(exc, errors.ActionDenied):
        who = f" by {exc.denied_by}" if exc.denied_by else ""
        return Refusal(
            "denied",
            f"denied{who}: {exc}. Do not retry",
            {**base, "refused": "denied", "request_id": exc.request_id, "denied_by": exc.denied_by},
            exc=exc,
        )
    if isinstance(exc, errors.EffectKeyError):
        return Refusal(
            "invalid",
            f"refused: {exc}. Nothing was run; call again with arguments that name the consequence",
            {**base, "refused": "invalid"},
            retryable=True,
            exc=exc,
        )
    return None


def answering(fn: Callable[..., Any], on_refusal: Callable[[Refusal], Any]) -> Callable[..., Any]:
    """``fn`` (a protected function, sync or async), returning ``on_refusal(refusal)`` where
    it would raise a refusal. Its signature is ``fn``'s (``functools.wraps``), so a framework
    reading it sees the same parameters. Nothing is logged for a refusal: it is an answer."""
    about = protected(fn)
    action = about.action if about is not None else getattr(fn, "__qualname__", "tool")

    def refused(exc: BaseException, args: Any, kwargs: Any) -> Any:
        key = key_or_none(about, args, kwargs)
        own = getattr(exc, "effect_key", None)
        if key is not None and own is not None and own != key:
            raise exc  # a nested protected call's refusal: the tool's own error
        refusal = refusal_of(exc, action, key)
        if refusal is None:
            raise exc
        return on_refusal(refusal)

    return catching(fn, REFUSALS, refused)


def catching(
    fn: Callable[..., Any],
    caught: Tuple[Type[BaseException], ...],
    handle: Callable[[Any, Any, Any], Any],
) -> Callable[..., Any]:
    """``fn`` (sync or async) with what it raises of ``caught`` given to ``handle(exc, args,
    kwargs)``, whose return is the call's (or which raises). Its signature is ``fn``'s
    (``functools.wraps``): the integrations wrap the tools a framework reads the parameters of."""
    if inspect.iscoroutinefunction(fn):

        @functools.wraps(fn)
        async def catching_async(*args: Any, **kwargs: Any) -> Any:
            try:
                return await fn(*args, **kwargs)
            except caught as exc:
                return handle(exc, args, kwargs)

        return catching_async

    @functools.wraps(fn)
    def catching_sync(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except caught as exc:
            return handle(exc, args, kwargs)

    return catching_sync


def key_or_none(about: Optional[Protected], args: Any, kwargs: Any) -> Optional[str]:
    """The key this call of ``about``'s function reserves; ``None`` for a function not
    protected or arguments that make no key (what the model must hear is the refusal or the
    failure at hand, not that)."""
    try:
        return None if about is None else about.key(*args, **kwargs)
    except Exception:
        return None
