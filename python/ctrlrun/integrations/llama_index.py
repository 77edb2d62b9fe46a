"""ctrlrun for LlamaIndex agents and workflows (``pip install 'ctrlrun[llama_index]'``; package
``llama-index-core``).

:func:`protect` takes the keyword arguments of :func:`ctrlrun.protect` and works in either
order with LlamaIndex's tools:

* on a function (sync or async), which an agent then wraps itself (``FunctionAgent(tools=[fn])``)
  or ``FunctionTool.from_defaults(fn=...)`` does: the function keeps its signature (the model's
  schema is the same), and a refusal is its return value, the text the model reads ("already
  done: <key> committed at <time>; do not retry") instead of an exception LlamaIndex would
  hand the model as an error;
* on a ``FunctionTool`` (``protect(...)(FunctionTool.from_defaults(fn))``, or
  :func:`protect_tool`): a new ``FunctionTool`` with the same metadata (name, description,
  schema, ``return_direct``), callback and partial parameters, its function protected.

The workflow ``Context`` (a parameter annotated ``Context``, which ``FunctionTool`` fills in)
is never part of a call's key, fingerprint or approval (:mod:`ctrlrun.call.injected`).

Approvals (``decision="approve"``) are LlamaIndex workflow events, asked BEFORE the body runs:
inside an agent or workflow run, a call waiting for a person pauses the step with
``ctx.wait_for_event`` and writes :class:`ApprovalRequested` (an ``InputRequiredEvent`` naming
the ctrlrun request) to the event stream. The run is answered with :class:`ApprovalDecision`
(a ``HumanResponseEvent``; ``handler.ctx.send_event(...)``): the step runs again, the decision
is recorded in ctrlrun (:func:`ctrlrun.integrations._common.decide`) and a granted call runs
once. Outside a run the answer is the "waiting for approval <id>" text. A parallel twin of a
waiting call (the same request in the same run) is answered "waiting for approval" at once, so
one decision answers the run; a twin that comes after its call ran is answered by the key
("already done"), never by a person.

A body that pauses its own step (``await ctx.wait_for_event(...)`` inside a protected tool)
raises LlamaIndex's ``WaitingForEvent``: the attempt is recorded ``failed`` (the workflow runs
the step again when the event arrives, so the work before the wait must be safe to repeat, as
LlamaIndex says), never ``ambiguous``, and the step's replay runs the body again, once. (With
``decision="approve"`` too, that replay needs a new grant: a grant is used by one attempt.)"""

from __future__ import annotations

import functools
import inspect
import threading
import typing
from typing import Any, Callable, Dict, Optional, Tuple, Type

from llama_index.core.tools import BaseTool, FunctionTool
from llama_index.core.workflow import Context, HumanResponseEvent, InputRequiredEvent
from pydantic import Field

from ctrlrun.call import io_threads
from ctrlrun.call.protect import protect as _protect
from ctrlrun.errors import InvalidArgument, NotExecuted
from ctrlrun.integrations._common import (
    Protected,
    Refusal,
    Refused,
    adecide,
    answered_without_asking,
    answering,
    catching,
    decide,
    protected,
    refuse_twice,
)
from ctrlrun.store.api import Store

__all__ = [
    "protect",
    "protect_tool",
    "ApprovalRequested",
    "ApprovalDecision",
    "PAUSES",
    "DEFAULT_APPROVER",
]

#: Who a decision sent without ``by`` is recorded as.
DEFAULT_APPROVER = "llama-index"


def _pauses() -> Tuple[Type[BaseException], ...]:
    """The control-flow exceptions a workflow step raises to pause (and run again later)."""
    try:
        from workflows.runtime.types.results import WaitingForEvent
    except ImportError:  # a llama-index-workflows without it: nothing pauses a step this way
        return ()
    return (WaitingForEvent,)


#: What a step raises to pause until an event arrives: never an outcome of the body.
PAUSES: Tuple[Type[BaseException], ...] = _pauses()


class ApprovalRequested(InputRequiredEvent):
    """Written to the run's event stream when a protected call waits for a person: the ctrlrun
    request (``request_id``), its action, effect key and the arguments the person is shown."""

    request_id: str
    action: str
    effect_key: Optional[str] = None
    arguments: Dict[str, Any] = Field(default_factory=dict)
    expires_at: Optional[str] = None
    text: str = ""
    prefix: str = ""  # (what a console prints before reading an answer: the text too)


class ApprovalDecision(HumanResponseEvent):
    """A person's answer to :class:`ApprovalRequested`, sent to the paused run
    (``handler.ctx.send_event(ApprovalDecision(request_id=..., approved=True, by="ann"))``).
    ``approved``: grant (``True``) or deny (``False``); ``None`` decides nothing (a decision
    made meanwhile with ``ctrlrun approve`` / ``ctrlrun deny`` stands). ``by``: who decided
    (default ``"llama-index"``)."""

    request_id: str
    approved: Optional[bool] = None
    by: Optional[str] = None
    note: Optional[str] = None


class _Paused(NotExecuted):
    """A step paused inside the body: nothing is recorded as done (the step runs again)."""

    def __init__(self, pause: BaseException) -> None:
        super().__init__(
            f"the workflow step paused ({pause}); it runs again when the event arrives"
        )
        self.pause = pause


def _pausable(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` raising a step's pause as :class:`_Paused` (``NotExecuted``: recorded failed)."""

    def paused(exc: BaseException, args: Any, kwargs: Any) -> Any:
        raise _Paused(exc) from exc

    return catching(fn, PAUSES, paused) if PAUSES else fn


def _unpaused(exc: BaseException, args: Any, kwargs: Any) -> Any:
    """Out of the protected call: the step's own pause again, for the workflow to handle."""
    assert isinstance(exc, _Paused)
    raise exc.pause.with_traceback(None) from None


def _context(args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> Any:
    """The workflow ``Context`` of the step calling the tool: the one the tool was given, else
    the running step's; ``None`` outside a workflow run."""
    for value in (*args, *kwargs.values()):
        if isinstance(value, Context):
            return value
    try:
        from workflows.runtime.types.results import InternalContextVar

        ref = InternalContextVar.get()
    except (ImportError, LookupError):
        return None
    return ref() if callable(ref) else None


# The requests a call in a run waits on, by (run id, request id): the work item of the call
# that waits. A parallel twin of that call (the same request, another work item) is answered
# "waiting for approval" at once instead of waiting too, so one ApprovalRequested is written
# and one ApprovalDecision answers it (a twin's wait could begin after the decision arrived,
# and a second decision would run the resumed step twice).
_WAITING: Dict[Tuple[str, str], str] = {}
_WAITING_LOCK = threading.Lock()


def _work_item() -> Optional[Tuple[str, str]]:
    """(run id, work item id) of the step calling the tool; ``None`` when unknown."""
    try:
        from workflows.plugins.basic import get_current_run_id
        from workflows.runtime.types.results import StepWorkerStateContextVar

        run, item = get_current_run_id(), StepWorkerStateContextVar.get().state.work_item_id
    except (ImportError, LookupError, AttributeError):
        return None
    return None if run is None or item is None else (run, item)


def _claim(rid: str) -> Tuple[bool, Optional[Tuple[str, str]]]:
    """Whether this call may wait on ``rid`` (no other call of its run waits on it), and the
    mark to clear once it is answered."""
    here = _work_item()
    if here is None:
        return True, None
    mark = (here[0], rid)
    with _WAITING_LOCK:
        holder = _WAITING.setdefault(mark, here[1])
    return holder == here[1], mark


def _answered(mark: Optional[Tuple[str, str]]) -> None:
    if mark is not None:
        with _WAITING_LOCK:
            _WAITING.pop(mark, None)


def _ask(ctx: Any, refusal: Refusal) -> Any:
    """The coroutine waiting for the person's :class:`ApprovalDecision` on ``refusal``'s
    request: the first time it raises the step's pause, writing :class:`ApprovalRequested`."""
    p = refusal.payload
    rid = str(p.get("request_id"))
    asked = ApprovalRequested(
        request_id=rid,
        action=str(p.get("action")),
        effect_key=p.get("effect_key"),
        arguments=dict(p.get("arguments") or {}),
        expires_at=p.get("expires_at"),
        text=refusal.text,
        prefix=refusal.text,
    )
    return ctx.wait_for_event(
        ApprovalDecision, waiter_event=asked, requirements={"request_id": rid}, timeout=None
    )


def _drive(coro: Any) -> Any:
    """A coroutine that never suspends (``wait_for_event`` reads the step's state: it returns
    the event or raises the pause), run to its end on this thread."""
    try:
        coro.send(None)
    except StopIteration as done:
        return done.value
    coro.close()
    raise RuntimeError("ctrlrun: the workflow's wait_for_event suspended in a sync tool")


def _rid(refusal: Refusal) -> str:
    return str(refusal.payload.get("request_id"))


def _decision(refusal: Refusal, ev: Any) -> Tuple[str, Optional[bool], str, Optional[str]]:
    by = getattr(ev, "by", None) or DEFAULT_APPROVER
    return (
        str(refusal.payload["request_id"]),
        getattr(ev, "approved", None),
        by,
        getattr(ev, "note", None),
    )


def _asks(out: Any) -> bool:
    return isinstance(out, Refused) and out.refusal.kind == "approval_required"


def _keyed(store: Store, refusal: Refusal) -> bool:
    """Whether the call's key answers it without a person (committed, in progress, ambiguous:
    a twin that came after its call ran), so the call is made again instead of asking."""
    key = refusal.payload.get("effect_key")
    return isinstance(key, str) and answered_without_asking(store.get_effect(key))


def _tool_function(guarded: Callable[..., Any]) -> Callable[..., Any]:
    """``guarded`` (a protected, pausable function) as a LlamaIndex tool's function: a refusal
    is its text; a step's pause from its body is the pause again; an approval inside a run is
    asked through ``ctx.wait_for_event`` before the body runs."""
    about = protected(guarded)
    assert about is not None
    inner = catching(answering(guarded, Refused), (_Paused,), _unpaused)

    if inspect.iscoroutinefunction(guarded):

        @functools.wraps(guarded)
        async def tool_async(*args: Any, **kwargs: Any) -> Any:
            out = await inner(*args, **kwargs)
            if _asks(out) and await io_threads.run(_keyed, await about.astore(), out.refusal):
                out = await inner(*args, **kwargs)
            elif _asks(out):
                ctx = _context(args, kwargs)
                waits, mark = (False, None) if ctx is None else _claim(_rid(out.refusal))
                if waits:
                    try:
                        ev = await _ask(ctx, out.refusal)  # the first time: the step pauses
                    except PAUSES:
                        raise  # (still waiting: the mark stays)
                    except BaseException:
                        _answered(mark)
                        raise
                    try:  # twins are told "waiting" until this call has run
                        rid, approved, by, note = _decision(out.refusal, ev)
                        if approved is not None:
                            await adecide(await about.astore(), rid, approved, by, note)
                        out = await inner(*args, **kwargs)
                    finally:
                        _answered(mark)
            return out.refusal.text if isinstance(out, Refused) else out

        return _resolved(tool_async)

    @functools.wraps(guarded)
    def tool_sync(*args: Any, **kwargs: Any) -> Any:
        out = inner(*args, **kwargs)
        if _asks(out) and _keyed(about.store(), out.refusal):
            out = inner(*args, **kwargs)
        elif _asks(out):
            ctx = _context(args, kwargs)
            waits, mark = (False, None) if ctx is None else _claim(_rid(out.refusal))
            if waits:
                try:
                    ev = _drive(_ask(ctx, out.refusal))
                except PAUSES:
                    raise
                except BaseException:
                    _answered(mark)
                    raise
                try:
                    rid, approved, by, note = _decision(out.refusal, ev)
                    if approved is not None:
                        decide(about.store(), rid, approved, by, note)
                    out = inner(*args, **kwargs)
                finally:
                    _answered(mark)
        return out.refusal.text if isinstance(out, Refused) else out

    return _resolved(tool_sync)


def _resolved(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` showing its signature with string annotations resolved (``from __future__ import
    annotations``): LlamaIndex compares a parameter's annotation with ``Context`` as it is, so
    a string would be taken for an argument of the model's."""
    sig = inspect.signature(fn)
    try:
        hints = typing.get_type_hints(fn, include_extras=True)
    except Exception:  # an annotation that does not resolve here: left as it is
        return fn
    params = [
        p.replace(annotation=hints.get(p.name, p.annotation)) for p in sig.parameters.values()
    ]
    ret = hints.get("return", sig.return_annotation)
    fn.__signature__ = sig.replace(parameters=params, return_annotation=ret)  # type: ignore[attr-defined]
    return fn


def _protected_function(fn: Callable[..., Any], name: str, options: Dict[str, Any]) -> Any:
    refuse_twice(name, fn)
    return _tool_function(_protect(name, **options)(_pausable(fn)))


def _derived(fn: Any, helper: str) -> bool:
    """Whether ``fn`` is the sync (or async) twin FunctionTool made of the other one."""
    return str(getattr(fn, "__qualname__", "")).startswith(f"{helper}.")


def protect_tool(tool: FunctionTool, name: str, options: Dict[str, Any]) -> FunctionTool:
    """A new ``FunctionTool`` like ``tool`` (metadata, callbacks, partial parameters), its
    function(s) protected as :func:`protect` protects a function."""
    if not isinstance(tool, FunctionTool):
        raise InvalidArgument(
            f"protect({name!r}): only a FunctionTool can be protected as a tool, got "
            f"{type(tool).__name__}; protect the function and make the tool of it"
        )
    given = [tool.fn, tool.async_fn]
    sync_fn = None if _derived(tool.fn, "async_to_sync") else tool.fn
    async_fn = None if _derived(tool.async_fn, "sync_to_async") else tool.async_fn
    for fn in given:
        already: Optional[Protected] = protected(fn)
        if already is not None:
            raise InvalidArgument(
                f"protect({name!r}): the tool {tool.metadata.name!r}'s function is already "
                f"protected as {already.action!r}; protect it once"
            )
    return FunctionTool(
        fn=None if sync_fn is None else _protected_function(sync_fn, name, options),
        async_fn=None if async_fn is None else _protected_function(async_fn, name, options),
        metadata=tool.metadata,
        callback=tool._callback,
        async_callback=tool._async_callback,
        partial_params=dict(tool.partial_params),
    )


def protect(name: str, **options: Any) -> Callable[[Any], Any]:
    """``ctrlrun.protect(name, **options)`` for LlamaIndex, on a tool function (before
    ``FunctionTool.from_defaults`` or an agent's ``tools=[...]``) or on a ``FunctionTool``
    (:func:`protect_tool`); see the module's docstring."""
    _protect(name, **options)  # the options checked now, before any function is seen

    def decorate(target: Any) -> Any:
        if isinstance(target, FunctionTool):
            return protect_tool(target, name, dict(options))
        if isinstance(target, BaseTool):
            raise InvalidArgument(
                f"protect({name!r}) above a {type(target).__name__}: only a FunctionTool (or "
                f"its function) can be protected; protect the function, then make the tool"
            )
        if not callable(target):
            raise InvalidArgument(f"protect({name!r}) decorates a function, got {target!r}")
        return _protected_function(target, name, dict(options))

    return decorate
