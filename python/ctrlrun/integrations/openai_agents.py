"""ctrlrun for the OpenAI Agents SDK (``pip install 'ctrlrun[openai_agents]'``; package ``agents``).

``protect(name, **options)`` takes the keyword arguments of :func:`ctrlrun.protect` (and
``approved_by``) and works in either order with ``@function_tool``:

* **under it** (next to the function) it protects the function and makes every refusal the
  tool's output, in the gateway's words ("already done: <key> committed at <time>; do not
  retry"), instead of the SDK's "An error occurred while running the tool. Please try again.";
* **above it** it is handed the ``FunctionTool`` and returns a protected ``FunctionTool`` with
  the same name, description, schema and strictness (and failure function, guardrails, timeout).
  Only above it can it give the tool an SDK ``needs_approval``: a ``decision="approve"`` call
  then stops the run with ``result.interruptions`` instead of answering "waiting for approval".

The core ``ctrlrun.protect`` handed a ``FunctionTool`` delegates to :func:`protect_tool`.

Approvals: a person's ``state.approve(item)`` is recorded, when the resumed run calls the tool,
as a ctrlrun grant of the request standing for the call's arguments (``by``: ``approved_by``,
else ``"openai-agents"``), used once by that call. :func:`approve` and :func:`reject` record the
decision at once under a person's name (a rejection as a ctrlrun denial, the model told
"denied"); :func:`apply_decisions` carries decisions made with ``ctrlrun approve`` / ``ctrlrun
deny`` into a paused run's state. The SDK cannot edit a call's arguments on approval.

The SDK is imported only inside functions, so importing this module does not import it."""

from __future__ import annotations

import functools
import inspect
import json
import typing
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Tuple, Union

from ctrlrun.call import io_threads
from ctrlrun.call.approval import refusal
from ctrlrun.errors import InvalidArgument
from ctrlrun.integrations._common import (
    REFUSALS,
    Protected,
    answering,
    asks_approval,
    check_approver,
    decide,
    protected,
    refusal_of,
    refuse_twice,
    standing_request,
)
from ctrlrun.store.approvals import ApprovalRecord, ApprovalState

if TYPE_CHECKING:
    from agents import FunctionTool, RunContextWrapper
    from agents.items import ToolApprovalItem
    from agents.run_state import RunState

__all__ = ["protect", "protect_tool", "approve", "reject", "apply_decisions", "DEFAULT_APPROVER"]

#: The ``by`` of a grant recorded for ``state.approve(item)`` when no ``approved_by`` is given.
DEFAULT_APPROVER = "openai-agents"

#: Who approved: a name, or what gives one from the run's context (``ctx.context``).
Approver = Union[str, Callable[["RunContextWrapper[Any]"], str], None]

# The parameter put first on a tool function that takes no context, so that the SDK hands it
# the ToolContext (which says whether a person approved this call). The model never sees it.
_CONTEXT_PARAMETER = "ctrlrun_tool_context"


class _Tool:
    """What the integration knows of one protected tool function (``__ctrlrun_agents__``)."""

    __slots__ = ("about", "approved_by", "asks_anyway", "takes_context")

    def __init__(self, about: Protected, approved_by: Approver, takes_context: bool) -> None:
        self.about = about
        self.approved_by = approved_by
        self.takes_context = takes_context
        self.asks_anyway = False  # the tool's own needs_approval may ask whatever ctrlrun says

    def parts(self, ctx: Any, args: Tuple[Any, ...]) -> Tuple[Any, ...]:
        """The positional arguments of the protected function, given the tool function's."""
        return (ctx, *args) if self.takes_context else args

    def approver(self, ctx: Any) -> str:
        given = self.approved_by
        who = given(ctx) if callable(given) else given
        if not isinstance(who, str) or not who.strip():
            return DEFAULT_APPROVER
        return who


def _context_classes() -> Tuple[type, ...]:
    from agents import RunContextWrapper
    from agents.tool_context import ToolContext

    return (RunContextWrapper, ToolContext)


def _takes_context(fn: Callable[..., Any]) -> bool:
    """Whether the SDK hands ``fn`` its context (a first parameter annotated with it)."""
    params = list(inspect.signature(fn).parameters.values())
    if not params:
        return False
    try:
        hints = typing.get_type_hints(fn)
    except Exception:  # an annotation that does not resolve: the raw one
        hints = {}
    ann = hints.get(params[0].name, params[0].annotation)
    origin = typing.get_origin(ann) or ann
    return any(origin is cls for cls in _context_classes())


def _refused_text(refused: Any) -> str:
    return str(refused.text)


def _sdk_approved(ctx: Any) -> bool:
    """Whether a person approved this very call through the SDK (``state.approve``)."""
    try:
        return bool(ctx.is_tool_approved(ctx.tool_name, ctx.tool_call_id))
    except AttributeError:  # not a ToolContext (the function called directly)
        return False


def _decided_here(tool: _Tool, record: Optional[ApprovalRecord], ctx: Any) -> None:
    """Record a person's SDK approval as the grant of ``record`` (none: no approval needed),
    unless it was decided meanwhile (granted already, or denied in ctrlrun: the denial stands)."""
    if record is None or record.state is not ApprovalState.PENDING:
        return  # (nothing to grant: the store is not asked)
    note = f"approved in an OpenAI Agents SDK run (tool call {getattr(ctx, 'tool_call_id', '?')})"
    decide(tool.about.store(), record, True, tool.approver(ctx), note)


def _tool_function(fn: Callable[..., Any], approved_by: Approver) -> Callable[..., Any]:
    """The function the SDK's ``function_tool`` wraps: ``fn`` (a protected function) answering
    refusals as text, taking the ToolContext first, and recording an SDK approval of the call
    as its ctrlrun grant before running it."""
    about = protected(fn)
    assert about is not None
    takes_context = _takes_context(fn)
    tool = _Tool(about, approved_by, takes_context)
    answered = answering(fn, _refused_text)

    if inspect.iscoroutinefunction(fn):

        @functools.wraps(fn)
        async def run_async(ctx: Any, *args: Any, **kwargs: Any) -> Any:
            parts = tool.parts(ctx, args)
            if _sdk_approved(ctx):  # the store's I/O on a worker thread
                await io_threads.run(
                    lambda: _decided_here(tool, standing_request(tool.about, parts, kwargs), ctx)
                )
            return await answered(*parts, **kwargs)

        wrapper: Callable[..., Any] = run_async
    else:

        @functools.wraps(fn)
        def run_sync(ctx: Any, *args: Any, **kwargs: Any) -> Any:
            parts = tool.parts(ctx, args)
            if _sdk_approved(ctx):
                _decided_here(tool, standing_request(tool.about, parts, kwargs), ctx)
            return answered(*parts, **kwargs)

        wrapper = run_sync

    if not takes_context:
        from agents.tool_context import ToolContext

        sig = inspect.signature(fn)
        first = inspect.Parameter(
            _CONTEXT_PARAMETER, inspect.Parameter.POSITIONAL_ONLY, annotation=ToolContext
        )
        wrapper.__signature__ = sig.replace(  # type: ignore[attr-defined]
            parameters=[first, *sig.parameters.values()]
        )
    wrapper.__ctrlrun_agents__ = tool  # type: ignore[attr-defined]
    return wrapper


def _ours(obj: Any) -> Optional[_Tool]:
    """The :class:`_Tool` of a tool function or of a FunctionTool built on one."""
    from agents import FunctionTool

    if isinstance(obj, FunctionTool):
        try:
            obj = obj.__wrapped__
        except AttributeError:  # not made by @function_tool
            return None
    found = getattr(obj, "__ctrlrun_agents__", None)
    return found if isinstance(found, _Tool) else None


def _needs_approval(tool: _Tool, own: Any, fn: Callable[..., Any]) -> Callable[..., Any]:
    """The SDK ``needs_approval`` of a protected tool: a person is asked when ctrlrun has no
    decision in force for the call's arguments (or when the tool's own setting says so)."""

    async def needs_approval(ctx: Any, params: Dict[str, Any], call_id: str) -> bool:
        # ctrlrun's request first, so that it stands (to be decided with `ctrlrun approve`)
        # even when the tool's own setting is what asks
        # the arguments as the function is given them (validated, coerced: `amount: float`
        # given 10 is 10.0), so the request asked is the one a grant and the call bind to
        try:
            args, kwargs = _call_args(fn, params)
        except Exception:  # arguments the schema refuses: the call itself will say so
            args, kwargs = None, None
        record = None
        if kwargs is not None:
            parts = tool.parts(ctx, tuple(args))
            record = await io_threads.run(lambda: standing_request(tool.about, parts, kwargs))
        if record is not None and record.state is ApprovalState.PENDING:
            return True
        said = own(ctx, params, call_id) if callable(own) else own
        if inspect.isawaitable(said):
            said = await said
        return bool(said)

    needs_approval.__ctrlrun_agents__ = tool  # type: ignore[attr-defined]
    return needs_approval


def protect_tool(
    tool: FunctionTool, name: str, options: Dict[str, Any], approved_by: Approver = None
) -> FunctionTool:
    """A protected copy of ``tool`` (a ``FunctionTool`` made by ``@function_tool``): the same
    name, description, parameters schema, strictness, failure function, guardrails and
    timeout; its function protected with ``ctrlrun.protect(name, **options)``, refusals
    answered as its output, and an SDK ``needs_approval`` when the action needs approval."""
    import copy

    from agents import FunctionTool, function_tool

    if not isinstance(tool, FunctionTool):
        raise InvalidArgument(f"protect({name!r}) expected a FunctionTool, got {tool!r}")
    try:
        fn = tool.__wrapped__
    except AttributeError:
        raise InvalidArgument(
            f"protect({name!r}): the tool {tool.name!r} was not made by @function_tool, so its "
            f"function cannot be protected; put protect under @function_tool, next to the "
            f"function"
        ) from None
    if protected(fn) is not None:
        raise InvalidArgument(f"protect({name!r}): the tool {tool.name!r} is already protected")
    import ctrlrun

    shown = {k: v for k, v in options.items() if k != "approved_by"}
    runs = _tool_function(ctrlrun.protect(name, **shown)(fn), approved_by)
    built = function_tool(
        runs,
        name_override=tool.name,
        strict_mode=tool.strict_json_schema,
        allowed_callers=tool.allowed_callers,
        output_json_schema=tool.output_json_schema,
    )
    out = copy.copy(tool)  # every setting of the tool, the model's schema included
    invoke: Any = built.on_invoke_tool
    bind = getattr(invoke, "__agents_bind_function_tool__", None)
    out.on_invoke_tool = bind(out) if callable(bind) else invoke
    ours = _ours(runs)
    assert ours is not None
    ours.asks_anyway = tool.needs_approval is not False
    if asks_approval(name, options):
        out.needs_approval = _needs_approval(ours, tool.needs_approval, fn)
    return out


def protect(name: str, *, approved_by: Approver = None, **options: Any) -> Callable[[Any], Any]:
    """``ctrlrun.protect(name, **options)`` for the Agents SDK, in either order with
    ``@function_tool`` (see the module's docstring). ``approved_by``: who a person's
    ``state.approve(item)`` is recorded as (the grant's ``by``): a name, or a function of the
    run's context giving one; default ``"openai-agents"``."""
    import ctrlrun

    ctrlrun.protect(name, **options)  # the options checked now, before any function is seen
    check_approver(name, approved_by, "the run context")

    def decorate(target: Any) -> Any:
        from agents import FunctionTool

        if isinstance(target, FunctionTool):
            return protect_tool(target, name, dict(options), approved_by)
        refuse_twice(name, target)
        return _tool_function(ctrlrun.protect(name, **options)(target), approved_by)

    return decorate


# ---- a person's decision, outside the run ------------------------------------------------


def _tool_of(item: ToolApprovalItem) -> Tuple[Optional[_Tool], Any]:
    """The protected tool an interruption is for, and that tool's FunctionTool."""
    from agents import FunctionTool

    agent = getattr(item, "agent", None)
    name = item.tool_name or getattr(item.raw_item, "name", None)
    for candidate in getattr(agent, "tools", None) or ():
        if isinstance(candidate, FunctionTool) and candidate.name == name:
            return _ours(candidate), candidate
    return None, None


def _arguments(tool: _Tool, function_tool: Any, item: ToolApprovalItem) -> Tuple[Any, Any]:
    """The call's arguments (positional, by name) as the tool function would be given them."""
    raw = item.arguments
    data = json.loads(raw) if raw else {}
    args, kwargs = _call_args(function_tool.__wrapped__, data or {})
    return tool.parts(None, tuple(args)), kwargs


def _call_args(fn: Callable[..., Any], data: Dict[str, Any]) -> Tuple[Any, Dict[str, Any]]:
    """The model's JSON arguments validated by the tool's schema, as the function is given
    them (positional, by name)."""
    from agents.function_schema import function_schema

    schema = function_schema(fn, strict_json_schema=False)
    args, kwargs = schema.to_call_args(schema.params_pydantic_model(**data))
    return args, kwargs


def _standing(
    item: ToolApprovalItem, gated: bool = False
) -> Tuple[Optional[_Tool], Optional[ApprovalRecord], Any]:
    """The protected tool of ``item``, the request standing for its arguments, and those
    arguments. ``gated``: only for a tool whose SDK ``needs_approval`` is ctrlrun's."""
    tool, function_tool = _tool_of(item)
    if tool is None:
        return None, None, None
    if gated and getattr(function_tool.needs_approval, "__ctrlrun_agents__", None) is not tool:
        return None, None, None
    args, kwargs = _arguments(tool, function_tool, item)
    return tool, standing_request(tool.about, args, kwargs), (args, kwargs)


def _denied_text(tool: _Tool, record: ApprovalRecord, bound: Any) -> str:
    try:
        key = tool.about.key(*bound[0], **bound[1])
    except REFUSALS:
        key = record.effect_key
    said = refusal_of(refusal(record), tool.about.action, key)
    return said.text if said is not None else f"denied (approval request {record.request_id})"


def approve(
    state: RunState[Any, Any], item: ToolApprovalItem, *, by: str, note: Optional[str] = None
) -> Optional[ApprovalRecord]:
    """``state.approve(item)``, and for a protected tool the ctrlrun grant of the request
    standing for the call's arguments, recorded now under ``by`` (a person's name). Returns
    that request (``None`` for a tool ctrlrun does not protect, or a call needing none). A
    request denied in ctrlrun meanwhile stays denied: the resumed call answers "denied"."""
    tool, record, _ = _standing(item)
    if tool is not None and record is not None:
        record = decide(tool.about.store(), record, True, by, note)
    state.approve(item)
    return record


def reject(
    state: RunState[Any, Any], item: ToolApprovalItem, *, by: str, note: Optional[str] = None
) -> Optional[ApprovalRecord]:
    """``state.reject(item)``, and for a protected tool a ctrlrun denial of the request
    standing for the call's arguments under ``by``; the model is told "denied by <by>: ...".
    Returns that request. A request granted in ctrlrun meanwhile keeps its grant (a denial
    cannot undo it); the SDK still does not run this call."""
    tool, record, bound = _standing(item)
    message = None
    if tool is not None and record is not None:
        record = decide(tool.about.store(), record, False, by, note) or record
        if record.state is ApprovalState.DENIED:
            message = _denied_text(tool, record, bound)
    if message is None:
        why = f" ({note})" if note else ""
        message = f"denied by {by}{why}: this call was not run. Do not retry"
    state.reject(item, rejection_message=message)
    return record


def apply_decisions(state: RunState[Any, Any]) -> List[ToolApprovalItem]:
    """Carry the decisions people made in ctrlrun (``ctrlrun approve`` / ``ctrlrun deny``,
    ``Store.grant_approval``) into a paused run's ``state``: a granted request approves its
    interruption, a denied one rejects it (the model told "denied"), and a call that needs no
    person any more (its key was done meanwhile: the call will answer "already done") is let
    through. Only interruptions raised by ctrlrun (a tool protected above ``@function_tool``)
    are touched. Returns the interruptions still waiting for a person. Resume with
    ``Runner.run(agent, state)``."""
    waiting: List[ToolApprovalItem] = []
    for item in state.get_interruptions():
        tool, record, bound = _standing(item, gated=True)
        if tool is None or (record is None and tool.asks_anyway):
            waiting.append(item)
        elif record is None or record.state is ApprovalState.GRANTED:
            state.approve(item)
        elif record.state is ApprovalState.DENIED:
            state.reject(item, rejection_message=_denied_text(tool, record, bound))
        else:
            waiting.append(item)
    return waiting
