"""ctrlrun for the Microsoft Agent Framework (``pip install 'ctrlrun[agent_framework]'``;
package ``agent-framework-core``, imported as ``agent_framework``).

``protect(name, **options)`` takes the keyword arguments of :func:`ctrlrun.protect` (and
``approved_by``) and works in either order with the framework's ``@tool``:

* **under it** (next to the function; also a plain function given to ``Agent(tools=[...])``)
  it protects the function and makes every refusal the function's result, in the gateway's
  words ("already done: <key> committed at <time>; do not retry"), instead of the framework's
  "Error: Function failed." and its ERROR log;
* **above it** it is handed the ``FunctionTool`` and returns a protected copy of it (the same
  name, description, input model, limits and result parser). Only above it can it set the
  tool's ``approval_mode``: an action that needs approval (``decision="approve"``, or the
  policy in force) gets ``approval_mode="always_require"``, so every call pauses the run with a
  ``function_approval_request`` in ``response.user_input_requests`` before anything runs.

Approvals: a call the framework runs after a person's approval response (``approved=True``,
on a tool whose ``approval_mode`` is ``always_require``) is recorded, before its body runs, as
the ctrlrun grant of the request standing for its arguments (``by``: ``approved_by``, else
``"agent-framework"``), used once by that call. :func:`approve` and :func:`reject` record the
decision at once under a person's name and give the response to send back (a rejection as a
ctrlrun denial: the same call asked again is told "denied by <name>"); :func:`apply_decisions`
turns decisions made with ``ctrlrun approve`` / ``ctrlrun deny`` into those responses. Under
``@tool`` with the tool's own ``approval_mode`` left at ``never_require``, a call that needs
approval is answered "waiting for approval <id>" (decided with ``ctrlrun approve``).

``FunctionInvocationContext`` (a parameter the framework fills in) is never part of a call's
key, fingerprint or approval (:mod:`ctrlrun.call.injected`); a function that takes none is
given a hidden one (``ctrlrun_invocation``) the model never sees, to tell an approved call."""

from __future__ import annotations

import copy
import functools
import inspect
import typing
from typing import Any, Callable, Dict, Iterable, List, Optional, Tuple, Union

from agent_framework import Content, FunctionInvocationContext, FunctionTool
from agent_framework.exceptions import UserInputRequiredException

from ctrlrun.call import io_threads
from ctrlrun.errors import InvalidArgument, NotExecuted
from ctrlrun.integrations._common import (
    Protected,
    Refusal,
    answering,
    asks_approval,
    catching,
    check_approver,
    decide,
    protected,
    refuse_twice,
    standing_request,
)
from ctrlrun.store.approvals import ApprovalRecord, ApprovalState

__all__ = [
    "protect",
    "protect_tool",
    "approve",
    "reject",
    "apply_decisions",
    "standing",
    "DEFAULT_APPROVER",
]

#: The ``by`` of a grant recorded for a framework approval when no ``approved_by`` is given.
DEFAULT_APPROVER = "agent-framework"

#: Who approved: a name, or what gives one from the call's ``FunctionInvocationContext``.
Approver = Union[str, Callable[[FunctionInvocationContext], str], None]

#: Where the tools of a paused run are found: the ``Agent``, or its tools.
Tools = Any

# The keyword-only parameter given to a function that takes no FunctionInvocationContext, so
# that the framework hands it one (which says whether a person approved the call).
_CONTEXT_PARAMETER = "ctrlrun_invocation"


class _Tool:
    """What the integration knows of one protected function (``__ctrlrun_af__``)."""

    __slots__ = ("about", "approved_by", "context", "hidden")

    def __init__(self, about: Protected, approved_by: Approver, context: str, hidden: bool):
        self.about = about
        self.approved_by = approved_by
        self.context = context  # the name of the FunctionInvocationContext parameter
        self.hidden = hidden  # that parameter is ours, not the function's

    def approver(self, ctx: Any) -> str:
        given = self.approved_by
        who = given(ctx) if callable(given) else given
        if not isinstance(who, str) or not who.strip():
            return DEFAULT_APPROVER
        return who

    def split(self, kwargs: Dict[str, Any]) -> Tuple[Any, Dict[str, Any]]:
        """The call's context, and the keyword arguments the protected function is given."""
        if self.hidden:
            rest = dict(kwargs)
            return rest.pop(self.context, None), rest
        return kwargs.get(self.context), kwargs


def _is_context(annotation: Any) -> bool:
    """The framework's own test of a context parameter's annotation."""
    candidates = typing.get_args(annotation) or (annotation,)
    return any(
        c is FunctionInvocationContext or c == "FunctionInvocationContext" for c in candidates
    )


def _context_parameter(fn: Callable[..., Any]) -> Optional[str]:
    """The name of ``fn``'s FunctionInvocationContext parameter, if it takes one."""
    sig = inspect.signature(fn)
    try:
        hints = typing.get_type_hints(fn)
    except Exception:  # an annotation that does not resolve here: the raw one
        hints = {}
    for name, p in sig.parameters.items():
        if _is_context(hints.get(name, p.annotation)):
            return name
    return None


def _framework_approved(ctx: Any) -> bool:
    """Whether the framework runs this call after a person's approval: a call of a tool whose
    ``approval_mode`` is ``always_require``, run by the function-calling loop (which runs
    one only for an approval response granting it)."""
    if not isinstance(ctx, FunctionInvocationContext):
        return False
    if getattr(ctx.function, "approval_mode", None) != "always_require":
        return False
    return ctx.tools is not None or ctx.metadata.get("approval_response") is not None


def _granted_here(tool: _Tool, ctx: Any, args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> None:
    """Record the framework approval of this call as the grant of the request standing for
    its arguments, unless it was decided meanwhile (a denial in ctrlrun stands)."""
    record = standing_request(tool.about, args, kwargs)
    if record is None or record.state is not ApprovalState.PENDING:
        return
    call_id = ctx.metadata.get("call_id") or "?"
    note = f"approved in a Microsoft Agent Framework run (function call {call_id})"
    decide(tool.about.store(), record, True, tool.approver(ctx), note)


def _text(said: Refusal) -> str:
    return said.text


def _pausing(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` with the framework's pause from inside it (``UserInputRequiredException``: the
    tool asks a person before it acts) raised as ``NotExecuted``: the key is recorded
    ``failed``, never ``ambiguous`` nor committed, and the call after the person's answer runs
    the body once, as its next attempt. :func:`_paused` raises the pause again outside."""

    def paused(exc: BaseException, args: Any, kwargs: Any) -> Any:
        raise NotExecuted(f"paused for user input: {exc}") from exc

    return catching(fn, (UserInputRequiredException,), paused)


def _paused(exc: NotExecuted) -> Optional[BaseException]:
    """The framework's pause a body raised (see :func:`_pausing`), if ``exc`` is one."""
    cause = exc.__cause__
    return cause if isinstance(cause, UserInputRequiredException) else None


def _protected(name: str, options: Dict[str, Any], fn: Callable[..., Any]) -> Callable[..., Any]:
    import ctrlrun

    return ctrlrun.protect(name, **options)(_pausing(fn))


def _tool_function(fn: Callable[..., Any], approved_by: Approver) -> Callable[..., Any]:
    """The function a ``FunctionTool`` wraps: ``fn`` (a protected function) answering
    refusals as its result, taking the call's FunctionInvocationContext, and recording a
    framework approval of the call as its ctrlrun grant before running it."""
    about = protected(fn)
    assert about is not None
    own = _context_parameter(fn)
    tool = _Tool(about, approved_by, own or _CONTEXT_PARAMETER, own is None)
    answered = answering(fn, _text)

    if inspect.iscoroutinefunction(fn):

        @functools.wraps(fn)
        async def run_async(*args: Any, **kwargs: Any) -> Any:
            ctx, rest = tool.split(kwargs)
            if _framework_approved(ctx):  # the store's I/O on a worker thread
                await io_threads.run(_granted_here, tool, ctx, args, rest)
            try:
                return await answered(*args, **rest)
            except NotExecuted as exc:
                pause = _paused(exc)
                if pause is None:
                    raise
                raise pause from None

        wrapper: Callable[..., Any] = run_async
    else:

        @functools.wraps(fn)
        def run_sync(*args: Any, **kwargs: Any) -> Any:
            ctx, rest = tool.split(kwargs)
            if _framework_approved(ctx):
                _granted_here(tool, ctx, args, rest)
            try:
                return answered(*args, **rest)
            except NotExecuted as exc:
                pause = _paused(exc)
                if pause is None:
                    raise
                raise pause from None

        wrapper = run_sync

    if own is None:
        sig = inspect.signature(fn)
        params = list(sig.parameters.values())
        hidden = inspect.Parameter(
            _CONTEXT_PARAMETER,
            inspect.Parameter.KEYWORD_ONLY,
            default=None,
            annotation=FunctionInvocationContext,
        )
        at = len(params)
        if params and params[-1].kind is inspect.Parameter.VAR_KEYWORD:
            at -= 1
        params.insert(at, hidden)
        wrapper.__signature__ = sig.replace(parameters=params)  # type: ignore[attr-defined]
        wrapper.__annotations__ = {
            **getattr(fn, "__annotations__", {}),
            _CONTEXT_PARAMETER: FunctionInvocationContext,
        }
    wrapper.__ctrlrun_af__ = tool  # type: ignore[attr-defined]
    return wrapper


def _ours(obj: Any) -> Optional[_Tool]:
    """The :class:`_Tool` of a tool function or of a FunctionTool built on one."""
    if isinstance(obj, FunctionTool):
        obj = obj.func
    found = getattr(obj, "__ctrlrun_af__", None)
    return found if isinstance(found, _Tool) else None


def protect_tool(
    tool: FunctionTool, name: str, options: Dict[str, Any], approved_by: Approver = None
) -> FunctionTool:
    """A protected copy of ``tool`` (a ``FunctionTool``, made by ``@tool`` or by hand): every
    setting of the tool kept; its function protected with ``ctrlrun.protect(name,
    **options)``, refusals answered as its result, and ``approval_mode="always_require"`` when
    the action needs approval."""
    if not isinstance(tool, FunctionTool):
        raise InvalidArgument(f"protect({name!r}) expected a FunctionTool, got {tool!r}")
    fn = tool.func
    if fn is None or isinstance(fn, FunctionTool):
        raise InvalidArgument(
            f"protect({name!r}): the tool {tool.name!r} has no function of its own to protect "
            f"(declaration only, or wrapping another tool); protect the function it runs"
        )
    if protected(fn) is not None:
        raise InvalidArgument(f"protect({name!r}): the tool {tool.name!r} is already protected")
    shown = {k: v for k, v in options.items() if k != "approved_by"}
    runs = _tool_function(_protected(name, shown, fn), approved_by)
    out = copy.copy(tool)
    out.func = runs
    out._context_parameter_name = None  # found again: the function now takes one
    out._discover_injected_parameters()
    if asks_approval(name, shown):
        out.approval_mode = "always_require"
    return out


def protect(name: str, *, approved_by: Approver = None, **options: Any) -> Callable[[Any], Any]:
    """``ctrlrun.protect(name, **options)`` for the Agent Framework, in either order with
    ``@tool`` (see the module's docstring). ``approved_by``: who a person's approval through
    the framework is recorded as (the grant's ``by``): a name, or a function of the call's
    ``FunctionInvocationContext`` giving one; default ``"agent-framework"``."""
    import ctrlrun

    ctrlrun.protect(name, **options)  # the options checked now, before any function is seen
    check_approver(name, approved_by, "the FunctionInvocationContext")

    def decorate(target: Any) -> Any:
        if isinstance(target, FunctionTool):
            return protect_tool(target, name, dict(options), approved_by)
        refuse_twice(name, target)
        return _tool_function(_protected(name, options, target), approved_by)

    return decorate


# ---- a person's decision, outside the run ------------------------------------------------


def _tools_of(where: Tools) -> Iterable[Any]:
    options = getattr(where, "default_options", None)
    if isinstance(options, dict):
        return list(options.get("tools") or ())
    if isinstance(where, FunctionTool):
        return [where]
    return list(where or ())


def _call_of(where: Tools, request: Content) -> Tuple[Optional[_Tool], Any, Any]:
    """The protected tool an approval request is for, and the call's arguments (positional,
    by name) as its protected function is given them; ``(None, None, None)`` for a tool
    ctrlrun does not protect."""
    call = request.function_call
    if request.type != "function_approval_request" or call is None:
        raise InvalidArgument(f"expected a function_approval_request, got {request.type!r}")
    for candidate in _tools_of(where):
        if isinstance(candidate, FunctionTool) and candidate.name == call.name:
            ours = _ours(candidate)
            if ours is None:
                return None, None, None
            kwargs = candidate._prepare_arguments(call.parse_arguments() or {})
            if not ours.hidden:
                kwargs[ours.context] = None
            return ours, (), kwargs
    return None, None, None


def standing(where: Tools, request: Content) -> Optional[ApprovalRecord]:
    """The ctrlrun approval request standing for the call ``request`` (a
    ``function_approval_request`` of a run of the agent ``where``, or of a run given the
    tools ``where``) asks a person about; asked (pending) when none stands, so that ``ctrlrun
    approve`` can decide it. ``None`` for a tool ctrlrun does not protect, or a call that
    needs no person."""
    tool, args, kwargs = _call_of(where, request)
    return None if tool is None else standing_request(tool.about, args, kwargs)


def approve(where: Tools, request: Content, *, by: str, note: Optional[str] = None) -> Content:
    """The response approving ``request`` (send it back with ``agent.run(...)`` on the same
    session), and for a protected tool the ctrlrun grant of the request standing for the
    call's arguments, recorded now under ``by``. A request denied in ctrlrun meanwhile stays
    denied: the approved call is answered "denied"."""
    return _respond(where, request, True, by, note)


def reject(where: Tools, request: Content, *, by: str, note: Optional[str] = None) -> Content:
    """The response rejecting ``request``, and for a protected tool a ctrlrun denial of the
    request standing for the call's arguments under ``by``: the framework tells the model the
    call was rejected, and the same call asked again is answered "denied by <by>". A request
    granted in ctrlrun meanwhile keeps its grant; the framework still does not run this call."""
    return _respond(where, request, False, by, note)


def _respond(where: Tools, request: Content, grant: bool, by: str, note: Optional[str]) -> Content:
    """The framework's response to ``request``, the ctrlrun decision of the request standing
    for a protected tool's call recorded first."""
    tool, args, kwargs = _call_of(where, request)
    if tool is not None:
        record = standing_request(tool.about, args, kwargs)
        if record is not None:
            decide(tool.about.store(), record, grant, by, note)
    return request.to_function_approval_response(approved=grant)


def apply_decisions(
    where: Tools, requests: Iterable[Content]
) -> Tuple[List[Content], List[Content]]:
    """The decisions people made in ctrlrun (``ctrlrun approve`` / ``ctrlrun deny``,
    ``Store.grant_approval``) for a paused run's ``requests`` (``response.user_input_requests``
    of the agent ``where``): ``(responses, waiting)``. A granted request gives an approving
    response, a denied one a rejecting response, and a call that needs no person any more (its
    key was done meanwhile: the call will answer "already done") an approving one. Requests of
    tools ctrlrun does not protect, and those still pending, are ``waiting``. Resume with
    ``agent.run(Message(role="user", contents=responses), session=session)``."""
    responses: List[Content] = []
    waiting: List[Content] = []
    for request in requests:
        if request.type != "function_approval_request":
            waiting.append(request)
            continue
        tool, args, kwargs = _call_of(where, request)
        record = None if tool is None else standing_request(tool.about, args, kwargs)
        if tool is None or (record is not None and record.state is ApprovalState.PENDING):
            waiting.append(request)
        elif record is None or record.state is ApprovalState.GRANTED:
            responses.append(request.to_function_approval_response(approved=True))
        else:
            responses.append(request.to_function_approval_response(approved=False))
    return responses, waiting
