"""ctrlrun for Google ADK agents (``pip install 'ctrlrun[google_adk]'``; package ``google.adk``).

ADK has no tool decorator: an agent's ``tools=[...]`` takes plain functions (wrapped in a
``FunctionTool``) and ``FunctionTool`` objects. :func:`protect` takes the keyword arguments of
:func:`ctrlrun.protect` (and ``approved_by``) and is given either:

* **a function**: it returns a protected function for ``tools=[...]`` or ``FunctionTool(...)``;
* **a FunctionTool**: it returns a ``FunctionTool`` of the same name, description and
  ``require_confirmation`` whose function is protected (:func:`protect_tool`).

A function already protected with ``ctrlrun.protect`` is made ready for ADK, unprotected twice,
by :func:`tool`; or the :class:`Refusals` plugin, given to the ``Runner``, answers the refusals
of every such function (approvals are then the "waiting for approval" text only).

A refusal is the tool's result, in the gateway's words ("already done: ...; do not retry"),
never an exception: ADK would end the run with it, and cancel the parallel calls of the same
model response (the real call of a twin among them, leaving its key ``ambiguous``). A body that
raised ``NotExecuted`` answers "failed: ...; a retry may run".

Approvals (``decision="approve"``, or the policy's) are ADK tool confirmations, asked BEFORE
the body runs: a call with no ctrlrun decision in force calls ``tool_context.
request_confirmation()`` (its payload ``{"ctrlrun": ...}`` names the request) and answers
"waiting for approval <id>"; ADK then asks the user. The call resumed with the user's
``ToolConfirmation`` records the decision in ctrlrun first (``confirmed``: a grant by
``approved_by``, default ``"google-adk"``; else a denial, the model told "denied"), then the
approved call runs once. A grant or denial made with ``ctrlrun approve`` / ``deny`` meanwhile
stands. A ``FunctionTool(..., require_confirmation=...)`` confirmation of a protected call is
recorded the same way.

A protected body that calls ``tool_context.request_confirmation()`` (or ``request_credential()``)
itself pauses the call: its key is recorded ``failed`` (nothing was done), not committed, so
the call ADK resumes once the user answers runs once.

``ToolContext`` (ADK's ``Context``, injected by its type or as a parameter named
``tool_context``) is never part of a call's key, fingerprint or approval."""

from __future__ import annotations

import functools
import inspect
import typing
from typing import Any, Callable, Dict, Optional, Tuple, Union

from google.adk.agents.context import Context
from google.adk.plugins.base_plugin import BasePlugin
from google.adk.tools.base_tool import BaseTool
from google.adk.tools.function_tool import FunctionTool

import ctrlrun
from ctrlrun.call import io_threads
from ctrlrun.call.approval import refusal
from ctrlrun.errors import InvalidArgument, NotExecuted
from ctrlrun.integrations._common import (
    REFUSALS,
    Protected,
    Refusal,
    answering,
    asks_approval,
    check_approver,
    decide,
    key_or_none,
    protected,
    refusal_of,
    refuse_twice,
    standing_request,
)
from ctrlrun.store.approvals import ApprovalRecord, ApprovalState

__all__ = ["protect", "protect_tool", "tool", "answer", "Refusals", "DEFAULT_APPROVER"]

#: Who a decision made through an ADK tool confirmation is recorded as, when nobody is named.
DEFAULT_APPROVER = "google-adk"

#: Who confirmed: a name, or what gives one from the call's ``ToolContext``.
Approver = Union[str, Callable[[Context], str], None]

# The parameter a tool function that takes no context is given, for ADK to hand it the
# ToolContext (the confirmation of the call); the model never sees it. ADK's fallback name.
_CONTEXT = "tool_context"


def answer(refusal: Refusal) -> str:
    """What the model is told of a refusal: its text, as the tool's result."""
    return refusal.text


class _Paused(NotExecuted):
    """A protected body asked the user for a confirmation or a credential and returned a
    placeholder: nothing was done, so its key is recorded ``failed``."""

    def __init__(self, value: Any) -> None:
        super().__init__("paused: the body asked the user (a confirmation or a credential)")
        self.value = value


def _context_name(fn: Callable[..., Any], sig: inspect.Signature) -> Optional[str]:
    """The parameter ADK hands the ToolContext: the first annotated with it, else one named
    ``tool_context``; ``None`` when ``fn`` takes none."""
    try:
        hints = typing.get_type_hints(fn)
    except Exception:  # an annotation that does not resolve here: the raw ones
        hints = {}
    for name, p in sig.parameters.items():
        ann = hints.get(name, p.annotation)
        if isinstance(ann, type) and issubclass(ann, Context):
            return name
    return _CONTEXT if _CONTEXT in sig.parameters else None


def _context_of(name: Optional[str], sig: inspect.Signature, args: Any, kwargs: Any) -> Any:
    if name is None or name in kwargs:
        return None if name is None else kwargs[name]
    at = list(sig.parameters).index(name)
    return args[at] if at < len(args) else None


def _annotated(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` with an unannotated ``tool_context`` parameter annotated as ADK's ``Context``, so
    that ctrlrun recognises it as injected (never part of a key, fingerprint or approval)."""
    sig = inspect.signature(fn)
    p = sig.parameters.get(_CONTEXT)
    if p is None or p.annotation is not inspect.Parameter.empty:
        return fn
    params = [q.replace(annotation=Context) if q is p else q for q in sig.parameters.values()]
    if inspect.iscoroutinefunction(fn):

        @functools.wraps(fn)
        async def call_async(*args: Any, **kwargs: Any) -> Any:
            return await fn(*args, **kwargs)

        out: Callable[..., Any] = call_async
    else:

        @functools.wraps(fn)
        def call(*args: Any, **kwargs: Any) -> Any:
            return fn(*args, **kwargs)

        out = call
    out.__signature__ = sig.replace(parameters=params)  # type: ignore[attr-defined]
    return out


def _pausing(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` (the body, not protected yet) raising :class:`_Paused` when it asked the user's
    confirmation of its call (``tool_context.request_confirmation()``), or a credential
    (``tool_context.request_credential()``), instead of acting."""
    sig = inspect.signature(fn)
    name = _context_name(fn, sig)
    if name is None:
        return fn

    def asked(ctx: Any) -> bool:
        try:
            actions, call_id = ctx.actions, ctx.function_call_id
            return (
                call_id in actions.requested_tool_confirmations
                or call_id in actions.requested_auth_configs
            )
        except AttributeError:  # not a ToolContext (the function called directly)
            return False

    if inspect.iscoroutinefunction(fn):

        @functools.wraps(fn)
        async def body_async(*args: Any, **kwargs: Any) -> Any:
            ctx = _context_of(name, sig, args, kwargs)
            before = asked(ctx)
            value = await fn(*args, **kwargs)
            if not before and asked(ctx):
                raise _Paused(value)
            return value

        return body_async

    @functools.wraps(fn)
    def body(*args: Any, **kwargs: Any) -> Any:
        ctx = _context_of(name, sig, args, kwargs)
        before = asked(ctx)
        value = fn(*args, **kwargs)
        if not before and asked(ctx):
            raise _Paused(value)
        return value

    return body


def _failed_text(exc: NotExecuted, key: Optional[str]) -> str:
    done = f"{key} recorded failed (nothing was done)" if key else "nothing was done"
    return f"failed: {exc}; {done}, so a retry may run"


class _Tool:
    """What the integration knows of one protected tool function."""

    __slots__ = ("about", "added", "approved_by", "context", "sig")

    def __init__(self, fn: Callable[..., Any], about: Protected, approved_by: Approver) -> None:
        self.about = about
        self.approved_by = approved_by
        self.sig = inspect.signature(fn)
        self.context = _context_name(fn, self.sig)
        self.added = self.context is None  # the ToolContext parameter is the integration's

    def approver(self, ctx: Any) -> str:
        given = self.approved_by
        who = given(ctx) if callable(given) else given
        return who if isinstance(who, str) and who.strip() else DEFAULT_APPROVER

    def split(self, args: Any, kwargs: Dict[str, Any]) -> Tuple[Any, Any, Dict[str, Any]]:
        """The ToolContext, and the arguments of the protected function."""
        if self.added:
            kwargs = dict(kwargs)
            return kwargs.pop(_CONTEXT, None), args, kwargs
        return _context_of(self.context, self.sig, args, kwargs), args, kwargs


def _request_for(tool: _Tool, args: Any, kwargs: Dict[str, Any]) -> Optional[ApprovalRecord]:
    """:func:`standing_request`, with no store I/O for a call no person decides."""
    about = tool.about
    if not asks_approval(about.action, about.options):
        return None
    return standing_request(about, args, kwargs)


def _pending(record: Optional[ApprovalRecord], ctx: Any) -> bool:
    return record is not None and record.state is ApprovalState.PENDING and ctx is not None


def _ask(tool: _Tool, record: ApprovalRecord, ctx: Any) -> str:
    """Ask the user, through ADK, to confirm the call ``record`` stands for; the answer now."""
    said = refusal_of(refusal(record), tool.about.action, record.effect_key)
    assert said is not None
    ctx.request_confirmation(
        hint=f"{said.text} (or confirm it here)", payload={"ctrlrun": said.payload}
    )
    return said.text


def _record(tool: _Tool, record: ApprovalRecord, ctx: Any, confirmed: bool, who: str) -> None:
    """The user's ADK confirmation (or rejection) of the call, recorded as the ctrlrun grant
    (or denial) of ``record``, unless it was decided meanwhile (that decision stands)."""
    verb = "confirmed" if confirmed else "rejected"
    note = f"{verb} in a Google ADK run (tool call {getattr(ctx, 'function_call_id', '?')})"
    decide(tool.about.store(), record, confirmed, who, note)


def _adk_function(fn: Callable[..., Any], approved_by: Approver) -> Callable[..., Any]:
    """The function ADK calls: ``fn`` (protected) with ctrlrun approvals asked as ADK
    confirmations before it runs, and its refusals, pauses and failures as its result."""
    about = protected(fn)
    assert about is not None
    t = _Tool(fn, about, approved_by)
    sig = t.sig
    answered = answering(fn, answer)

    def paused_or_failed(exc: NotExecuted, args: Any, kwargs: Any) -> Any:
        if isinstance(exc, _Paused):
            return exc.value
        return _failed_text(exc, key_or_none(about, args, kwargs))

    if inspect.iscoroutinefunction(fn):

        @functools.wraps(fn)
        async def run_async(*args: Any, **kwargs: Any) -> Any:
            ctx, args, kwargs = t.split(args, kwargs)
            record = None if ctx is None else await io_threads.run(_request_for, t, args, kwargs)
            if record is not None and _pending(record, ctx):
                confirmation = getattr(ctx, "tool_confirmation", None)
                if confirmation is None:
                    return _ask(t, record, ctx)
                confirmed, who = bool(confirmation.confirmed), t.approver(ctx)
                await io_threads.run(_record, t, record, ctx, confirmed, who)
            try:
                return await answered(*args, **kwargs)
            except NotExecuted as exc:
                return paused_or_failed(exc, args, kwargs)

        wrapper: Callable[..., Any] = run_async
    else:

        @functools.wraps(fn)
        def run_sync(*args: Any, **kwargs: Any) -> Any:
            ctx, args, kwargs = t.split(args, kwargs)
            record = None if ctx is None else _request_for(t, args, kwargs)
            if record is not None and _pending(record, ctx):
                confirmation = getattr(ctx, "tool_confirmation", None)
                if confirmation is None:
                    return _ask(t, record, ctx)
                _record(t, record, ctx, bool(confirmation.confirmed), t.approver(ctx))
            try:
                return answered(*args, **kwargs)
            except NotExecuted as exc:
                return paused_or_failed(exc, args, kwargs)

        wrapper = run_sync

    params = list(sig.parameters.values())
    if t.added:
        extra = inspect.Parameter(_CONTEXT, inspect.Parameter.KEYWORD_ONLY, annotation=Context)
        at = next((i for i, p in enumerate(params) if p.kind is p.VAR_KEYWORD), len(params))
        params.insert(at, extra)
    wrapper.__signature__ = sig.replace(parameters=params)  # type: ignore[attr-defined]
    wrapper.__ctrlrun_adk__ = t  # type: ignore[attr-defined]
    return wrapper


def _protected(fn: Callable[..., Any], name: str, options: Dict[str, Any]) -> Any:
    return ctrlrun.protect(name, **options)(_pausing(_annotated(fn)))


def tool(fn: Callable[..., Any], *, approved_by: Approver = None) -> Callable[..., Any]:
    """A function already protected with ``ctrlrun.protect``, made ready for ADK's
    ``tools=[...]``: refusals as results, approvals as ADK confirmations (as :func:`protect`
    does). An in-body ``request_confirmation()`` needs :func:`protect` instead."""
    if protected(fn) is None:
        raise InvalidArgument(
            f"tool(): {getattr(fn, '__qualname__', fn)!r} is not protected; use "
            f"ctrlrun.integrations.google_adk.protect(name, ...) on it"
        )
    if getattr(fn, "__ctrlrun_adk__", None) is not None:
        return fn
    return _adk_function(fn, approved_by)


def _dropping_context(check: Callable[..., Any]) -> Callable[..., Any]:
    """A ``require_confirmation`` function written for the tool's own function, called without
    the ``tool_context`` the integration's function adds."""
    if inspect.iscoroutinefunction(check):

        @functools.wraps(check)
        async def checking_async(**kwargs: Any) -> Any:
            kwargs.pop(_CONTEXT, None)
            return await check(**kwargs)

        return checking_async

    @functools.wraps(check)
    def checking(**kwargs: Any) -> Any:
        kwargs.pop(_CONTEXT, None)
        return check(**kwargs)

    return checking


def protect_tool(
    adk_tool: FunctionTool, name: str, options: Dict[str, Any], approved_by: Approver = None
) -> FunctionTool:
    """A ``FunctionTool`` of the same name, description and ``require_confirmation`` as
    ``adk_tool``, its function protected with ``ctrlrun.protect(name, **options)``."""
    if type(adk_tool) is not FunctionTool:  # a subclass's own behaviour a copy would lose
        kind = type(adk_tool).__name__
        raise InvalidArgument(
            f"protect({name!r}) takes a FunctionTool, got a {kind}; protect its function "
            f"before building it: {kind}(google_adk.protect({name!r}, ...)(fn))"
        )
    fn = adk_tool.func
    if protected(fn) is not None:
        raise InvalidArgument(f"protect({name!r}): the tool {adk_tool.name!r} is already protected")
    runs = _adk_function(_protected(fn, name, options), approved_by)
    check = adk_tool._require_confirmation
    if callable(check) and runs.__ctrlrun_adk__.added:  # type: ignore[attr-defined]
        check = _dropping_context(check)  # ADK hands it every parameter of the function
    made = FunctionTool(runs, require_confirmation=check)
    made.name = adk_tool.name
    made.description = adk_tool.description
    return made


def protect(name: str, *, approved_by: Approver = None, **options: Any) -> Callable[[Any], Any]:
    """``ctrlrun.protect(name, **options)`` for Google ADK (see the module's docstring), given a
    function or a ``FunctionTool``. ``approved_by``: who a user's ADK confirmation is recorded
    as (the grant's ``by``): a name, or a function of the ToolContext giving one; default
    ``"google-adk"``."""
    ctrlrun.protect(name, **options)  # the options checked now, before any function is seen
    check_approver(name, approved_by, "the ToolContext")

    def decorate(target: Any) -> Any:
        if isinstance(target, FunctionTool):
            return protect_tool(target, name, dict(options), approved_by)
        refuse_twice(
            name,
            target,
            " (ctrlrun.integrations.google_adk.tool makes a function protected with ctrlrun.protect ready for ADK)",
        )
        return _adk_function(_protected(target, name, options), approved_by)

    return decorate


class Refusals(BasePlugin):
    """An ADK plugin (``Runner(..., plugins=[Refusals()])``) answering the refusal of any
    function protected with ``ctrlrun.protect`` (wrapped by ADK or in a ``FunctionTool``) as
    the tool's result, in the same words, instead of the exception that would end the run and
    cancel its parallel calls. Other errors are left to ADK. Approvals are not asked as ADK
    confirmations here (the model is told "waiting for approval"): use :func:`protect` or
    :func:`tool` for that."""

    def __init__(self, name: str = "ctrlrun_refusals") -> None:
        super().__init__(name=name)

    async def on_tool_error_callback(
        self, *, tool: BaseTool, tool_args: Dict[str, Any], tool_context: Any, error: Exception
    ) -> Optional[Dict[str, Any]]:
        about = protected(getattr(tool, "func", None))
        if about is None or not isinstance(error, REFUSALS):
            return None
        own = getattr(error, "effect_key", None)
        key = key_or_none(about, (), tool_args)
        if key is not None and own is not None and own != key:
            return None  # a nested protected call's refusal: the tool's own error
        said = refusal_of(error, about.action, key)
        return None if said is None else {"result": answer(said)}
