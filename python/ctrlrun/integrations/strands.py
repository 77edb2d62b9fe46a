"""ctrlrun for Strands Agents (``pip install 'ctrlrun[strands]'``; package ``strands``).

``protect(name, **options)`` takes the keyword arguments of :func:`ctrlrun.protect` and works in
either order with ``@tool``:

* **under it** (next to the function) it protects the function;
* **above it** it is handed the ``DecoratedFunctionTool`` and returns a new one (same name,
  spec and injected parameters) calling the protected function. The core ``ctrlrun.protect``
  handed a ``DecoratedFunctionTool`` delegates to :func:`protect_tool`.

A refusal is the tool's result, in the gateway's words ("already done: <key> committed at
<time>; do not retry"), never Strands' "Error: DuplicateEffect - ...". The parallel twin of a
call in the same model turn is answered "in progress" while the first runs on, uncancelled.

Approvals: with the :class:`Approvals` hook provider on the agent, a ``decision="approve"`` call
is checked before its body runs: while its request is pending the hook raises a Strands
interrupt (``result.stop_reason == "interrupt"``, named ``ctrlrun:<request id>``, its reason the
arguments a person is shown). The run resumed with the person's response records the decision
in ctrlrun (:func:`ctrlrun.integrations._common.decide`): ``True``/``"approve"``/``"yes"`` or
``{"approved": True, "by": "ops:alice"}`` grants, anything else denies; then the call runs once
(or is answered "denied"). Without the hook the answer is the "waiting for approval" text.

A ``tool_context.interrupt()`` raised from inside a protected body pauses the run without
recording an outcome for the key's side effect: the key is recorded ``failed`` (the body
stopped before its effect), so the resumed call, which gets the person's response from
``interrupt()``, runs the body once. Ask before doing the side effect, never after.

``tool_context: ToolContext`` and ``agent: Agent`` (annotated) are never part of a call's key,
fingerprint or approval (:mod:`ctrlrun.call.injected`)."""

from __future__ import annotations

import functools
import inspect
from typing import Any, Dict, Optional, Tuple

from strands.hooks import BeforeToolCallEvent, HookRegistry
from strands.interrupt import InterruptException
from strands.tools.decorator import DecoratedFunctionTool

from ctrlrun.call import io_threads
from ctrlrun.call.protect import protect as _protect
from ctrlrun.errors import CTRLRunError, InvalidArgument, NotExecuted
from ctrlrun.integrations._common import Protected, Refusal, adecide, answering, protected
from ctrlrun.store.approvals import ApprovalRecord, ApprovalState

__all__ = ["protect", "protect_tool", "answer", "Approvals", "DEFAULT_APPROVER"]

#: Who a decision made through a Strands interrupt is recorded as, when the response names nobody.
DEFAULT_APPROVER = "strands"

#: What an interrupt raised by :class:`Approvals` is named: this, then the request id.
INTERRUPT_PREFIX = "ctrlrun:"


def answer(refusal: Refusal) -> str:
    """What the model is told of a refusal: its text, as the tool's result."""
    return refusal.text


class _Paused(NotExecuted):
    """A Strands interrupt raised inside a protected body, carried out of the core as
    ``NotExecuted`` (the body stopped before its effect: the key is recorded failed)."""

    def __init__(self, exc: InterruptException) -> None:
        super().__init__(f"paused for the person's answer to interrupt {exc.interrupt.name!r}")
        self.interrupt_exception = exc


def _pausable(fn: Any) -> Any:
    """``fn`` with a Strands interrupt it raises turned into :class:`_Paused`."""
    if inspect.iscoroutinefunction(fn):

        @functools.wraps(fn)
        async def pausable_async(*args: Any, **kwargs: Any) -> Any:
            try:
                return await fn(*args, **kwargs)
            except InterruptException as exc:
                raise _Paused(exc) from None

        return pausable_async

    @functools.wraps(fn)
    def pausable(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except InterruptException as exc:
            raise _Paused(exc) from None

    return pausable


def _resumable(fn: Any) -> Any:
    """``fn`` (protected) raising again the Strands interrupt a :class:`_Paused` carries."""
    if inspect.iscoroutinefunction(fn):

        @functools.wraps(fn)
        async def resumable_async(*args: Any, **kwargs: Any) -> Any:
            try:
                return await fn(*args, **kwargs)
            except _Paused as paused:
                raise paused.interrupt_exception from None

        return resumable_async

    @functools.wraps(fn)
    def resumable(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except _Paused as paused:
            raise paused.interrupt_exception from None

    return resumable


def _guarded(fn: Any, name: str, options: Dict[str, Any]) -> Any:
    """``fn`` protected, its refusals answered, a Strands interrupt from its body passed on."""
    if isinstance(fn, DecoratedFunctionTool):
        fn = fn._tool_func
    if not callable(fn) or isinstance(fn, type):
        raise InvalidArgument(
            f"protect({name!r}) decorates a function or a Strands tool, got {fn!r}"
        )
    return answering(_resumable(_protect(name, **options)(_pausable(fn))), answer)


def protect(name: str, **options: Any) -> Any:
    """``ctrlrun.protect(name, **options)`` for Strands: under ``@tool`` (a function) or above
    it (a ``DecoratedFunctionTool``, protected by :func:`protect_tool`)."""

    def decorate(fn: Any) -> Any:
        if isinstance(fn, DecoratedFunctionTool):
            return protect_tool(fn, name, options)
        return _guarded(fn, name, options)

    return decorate


def protect_tool(
    tool: DecoratedFunctionTool[Any, Any], name: str, options: Dict[str, Any]
) -> DecoratedFunctionTool[Any, Any]:
    """A new ``DecoratedFunctionTool`` with ``tool``'s name, spec and injected parameters, its
    function protected as ``protect(name, **options)`` does."""
    guarded = _guarded(tool._tool_func, name, options)
    made = DecoratedFunctionTool(tool.tool_name, tool.tool_spec.copy(), guarded, tool._metadata)
    return made


# ---- the hook provider ---------------------------------------------------------------------


def _about(tool: Any) -> Optional[Protected]:
    func = getattr(tool, "_tool_func", None) if isinstance(tool, DecoratedFunctionTool) else None
    return None if func is None else protected(func)


def _arguments(tool: DecoratedFunctionTool[Any, Any], raw: Any) -> Optional[Dict[str, Any]]:
    """A call's input as the tool validates it, its injected parameters given as ``None``
    (they are never part of a call's identity); ``None`` when the input does not validate."""
    try:
        args = tool._metadata.validate_input(dict(raw or {}))
    except Exception:  # the tool answers invalid input itself
        return None
    for param in tool._metadata.signature.parameters:
        if tool._metadata._is_special_parameter(param) and param not in ("self", "cls"):
            args.setdefault(param, None)
    return dict(args)


async def _settled(about: Protected, args: Dict[str, Any]) -> bool:
    """Whether the key these arguments reserve is taken (any state but ``failed``): the call
    is then answered by its refusal, and asking a person would only make a request nobody uses."""
    key = about.key(**args)
    if key is None:
        return False
    store = await about.astore()
    row = await io_threads.run(store.get_effect, key)
    return row is not None and row.state.value != "failed"


def _response(response: Any, default: str) -> Tuple[bool, str, Optional[str]]:
    """(granted, by, note) of a person's response to an approval interrupt."""
    if isinstance(response, dict):
        granted = response.get("approved", response.get("approve")) is True
        by = response.get("by")
        note = response.get("note")
        return (
            granted,
            by if isinstance(by, str) and by.strip() else default,
            note if isinstance(note, str) else None,
        )
    if isinstance(response, str):
        return (
            response.strip().lower() in ("y", "yes", "approve", "approved", "grant"),
            default,
            None,
        )
    return response is True, default, None


class Approvals:
    """A Strands hook provider (``Agent(..., hooks=[Approvals()])``; Strands' ``HookProvider``
    is a protocol): before a protected tool
    with ``decision="approve"`` runs, its pending request becomes a Strands interrupt, and the
    person's response is recorded in ctrlrun as a grant or a denial.

    ``approver``: the name a decision is recorded under when the response names nobody
    (``{"approved": True, "by": "ops:alice"}``); default ``"strands"``. Strands does not say
    who answered: the name is what the application resuming the run vouches for."""

    def __init__(self, approver: Optional[str] = None) -> None:
        self.approver = approver or DEFAULT_APPROVER

    def register_hooks(self, registry: HookRegistry, **kwargs: Any) -> None:
        registry.add_callback(BeforeToolCallEvent, self.before_tool_call)

    async def before_tool_call(self, event: BeforeToolCallEvent) -> None:
        tool = event.selected_tool
        about = _about(tool)
        if about is None or not isinstance(tool, DecoratedFunctionTool):
            return
        args = _arguments(tool, event.tool_use.get("input"))
        if args is None:
            return
        try:
            if await _settled(about, args):
                return  # the call is refused as a duplicate: nothing to ask a person
            record = await about.aapproval(**args)
        except CTRLRunError:  # the call raises it again, and is answered then
            return
        if record is None or record.state is not ApprovalState.PENDING:
            return  # no approval needed, or decided already: the call answers for itself
        await self._ask(event, about, record)

    async def _ask(
        self, event: BeforeToolCallEvent, about: Protected, record: ApprovalRecord
    ) -> None:
        reason = {
            "ctrlrun": {
                "action": about.action,
                "request_id": record.request_id,
                "effect_key": record.effect_key,
                "arguments": record.arguments,
            }
        }
        response = event.interrupt(INTERRUPT_PREFIX + record.request_id, reason=reason)
        granted, by, note = _response(response, self.approver)
        where = f"through a Strands interrupt (tool call {event.tool_use.get('toolUseId')})"
        await adecide(
            await about.astore(),
            record,
            granted,
            by,
            note or ("approved " if granted else "denied ") + where,
        )
