"""ctrlrun for pydantic-ai agents (``pip install 'ctrlrun[pydantic_ai]'``).

:func:`protect` takes the keyword arguments of :func:`ctrlrun.protect` and goes under
``@agent.tool`` / ``@agent.tool_plain`` (or inside ``Tool(...)``), next to the function: those
decorators register the function they are given and hand it back, so a decorator above them
would wrap a copy the agent never calls; ``protect`` (like ``ctrlrun.protect``) refuses that
order at decoration. Given a ``pydantic_ai.Tool`` (also through ``ctrlrun.protect``), it returns
a protected copy of it (:func:`protect_tool`).

A refusal is the tool's return value, the text the model reads ("already done: ...; do not
retry"), and the run goes on. ``ModelRetry`` is raised only where a call again could succeed:
arguments that make no key (``Refusal.retryable``), and a body that raised ``NotExecuted`` (its
key recorded ``failed``). The parallel twin of a call in the same model response gets the
refusal text while the first call runs on, uncancelled.

A call that needs a person's approval (``decision="approve"``) raises pydantic-ai's own
``ApprovalRequired`` when the agent has the :class:`Approvals` capability, so the run ends with
``DeferredToolRequests`` (the agent's ``output_type`` must include it), each call's metadata
naming its ctrlrun request. The run resumed with ``DeferredToolResults`` records the person's
decision in ctrlrun before anything runs: ``ToolApproved()`` grants the request, ``ToolDenied``
denies it, ``ToolApproved(override_args=...)`` grants a request for the edited arguments and
denies the original one naming it. A grant made with ``ctrlrun approve`` meanwhile is honoured
as it is. Without the capability the answer is the "waiting for approval" text.

``RunContext`` (the first parameter of an ``@agent.tool`` function) is never part of a call's
key, fingerprint or approval (:mod:`ctrlrun.call.injected`)."""

from __future__ import annotations

import contextvars
import copy
import functools
import gc
import inspect
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Dict, List, Optional, Tuple

from pydantic_ai import CallToolsNode, RunContext, Tool
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.exceptions import ApprovalRequired, ModelRetry
from pydantic_ai.messages import ModelResponse
from pydantic_ai.tools import ToolDenied
from pydantic_ai.toolsets import AbstractToolset, WrapperToolset
from pydantic_ai.toolsets.abstract import ToolsetTool

from ctrlrun.call.protect import protect as _protect
from ctrlrun.errors import CTRLRunError, InvalidArgument, NotExecuted
from ctrlrun.integrations._common import (
    REFUSALS,
    Protected,
    Refusal,
    adecide,
    answering,
    catching,
    key_or_none,
    protected,
)
from ctrlrun.integrations._common import refusal_of as _refusal_of
from ctrlrun.store.approvals import ApprovalRecord

__all__ = ["protect", "protect_tool", "answer", "failed", "Approvals", "DEFAULT_APPROVER"]

#: Who a decision made through pydantic-ai is recorded as, when nobody is named.
DEFAULT_APPROVER = "pydantic-ai"

# True while an :class:`Approvals` capability calls a tool: an approval the tool needs is then a
# pydantic-ai deferral (its resume is recorded); without one it is the "waiting" text.
_DEFERS: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "ctrlrun_pydantic_ai_defers", default=False
)


def answer(refusal: Refusal) -> Any:
    """What pydantic-ai hands the model for a refusal: the text as the tool's return;
    ``ModelRetry`` when other arguments could succeed; ``ApprovalRequired`` (the run defers,
    its metadata ``{"ctrlrun": refusal.payload}``) under the :class:`Approvals` capability."""
    if refusal.kind == "approval_required" and _DEFERS.get():
        raise ApprovalRequired(metadata={"ctrlrun": refusal.payload})
    if refusal.retryable:
        raise ModelRetry(refusal.text)
    return refusal.text


def failed(exc: NotExecuted, key: Optional[str]) -> ModelRetry:
    """The ``ModelRetry`` for a body that raised ``NotExecuted`` (provably nothing was done;
    the key is recorded ``failed``, so a retry runs)."""
    done = f"{key} recorded failed (nothing was done)" if key else "nothing was done"
    return ModelRetry(f"failed: {exc}; {done}, so a retry may run")


def _answered(guarded: Callable[..., Any]) -> Callable[..., Any]:
    """A protected function answering as pydantic-ai expects: a refusal by :func:`answer`,
    ``NotExecuted`` by :func:`failed`."""
    about = protected(guarded)

    def not_executed(exc: NotExecuted, args: Any, kwargs: Any) -> Any:
        raise failed(exc, key_or_none(about, args, kwargs)) from exc

    return catching(answering(guarded, answer), (NotExecuted,), not_executed)


def protect(name: str, **options: Any) -> Callable[[Any], Any]:
    """``ctrlrun.protect(name, **options)`` whose refusals are pydantic-ai tool results
    (:func:`answer`). Decorates a function (under ``@agent.tool`` / ``@agent.tool_plain``; a
    function an agent already registered is refused, naming that order) or a ``Tool``."""
    core = _protect(name, **options)

    def decorate(fn: Any) -> Any:
        if isinstance(fn, Tool):
            return protect_tool(fn, name, options)
        held = [fn]
        del fn  # (see _fresh)
        return _answered(_fresh(core, held))

    return decorate


def protect_tool(tool: Tool[Any], name: str, options: Dict[str, Any]) -> Tool[Any]:
    """A copy of ``tool`` (name, description, schema, settings) whose function is protected
    as ``protect(name, **options)`` does. A ``Tool`` an agent or toolset already holds is
    refused: that one would still run unprotected."""
    holder = _holder(tool)
    if holder is not None:
        raise InvalidArgument(
            f"protect({name!r}): the Tool {tool.name!r} is already in {holder}, which would call "
            f"it unprotected; protect the Tool (or its function) before giving it to the agent"
        )
    guarded = _answered(_fresh(_protect(name, **options), [_passing(tool.function)]))
    made = copy.copy(tool)
    made.function = guarded
    made.function_schema = replace(tool.function_schema, function=guarded)
    return made


def _passing(inner: Callable[..., Any]) -> Callable[..., Any]:
    """A new function calling ``inner`` (sync or async, with its signature), for ``protect`` to
    wrap: ``inner`` itself is held by the ``Tool`` being replaced."""
    if inspect.iscoroutinefunction(inner):

        @functools.wraps(inner)
        async def call_async(*args: Any, **kwargs: Any) -> Any:
            return await inner(*args, **kwargs)

        return call_async

    @functools.wraps(inner)
    def call(*args: Any, **kwargs: Any) -> Any:
        return inner(*args, **kwargs)

    return call


def _fresh(core: Callable[[Any], Any], held: List[Any]) -> Any:
    """``core(fn)`` for the one function in ``held``, with no other reference to it on this
    side: the core protect counts a function's references to tell one handed straight to it
    from one a framework already holds (only then does it search the heap for the holder), so
    the frames between the decorator and it must not add any."""
    return core(held.pop())


def _holder(tool: Tool[Any]) -> Optional[str]:
    """The toolset already holding ``tool``, if any (its ``tools`` dict refers to it)."""
    for ref in gc.get_referrers(tool):
        if type(ref) is dict:
            for owner in gc.get_referrers(ref):
                if isinstance(owner, AbstractToolset) and getattr(owner, "tools", None) is ref:
                    return owner.label
    return None


# ---- the capability ------------------------------------------------------------------------


def _schema_of(tool: ToolsetTool[Any]) -> Any:
    """The ``FunctionSchema`` a listed tool calls (through combined and renamed toolsets), or
    ``None`` for a tool that is not a function's."""
    seen = 0
    current: Any = tool
    while current is not None and seen < 50:
        call = getattr(current, "call_func", None)
        if call is not None:
            return getattr(call, "__self__", None)
        current = getattr(current, "source_tool", None)
        seen += 1
    return None


def _about(tool: Optional[ToolsetTool[Any]]) -> Tuple[Optional[Protected], bool]:
    """The :class:`Protected` of a listed tool's function, and whether it takes ``RunContext``."""
    schema = None if tool is None else _schema_of(tool)
    if schema is None:
        return None, False
    return protected(getattr(schema, "function", None)), bool(getattr(schema, "takes_ctx", False))


def _validated(tool: ToolsetTool[Any], args: Any) -> Optional[Dict[str, Any]]:
    """A call's raw arguments as the tool's validator makes them (``None``: they do not
    validate)."""
    try:
        if isinstance(args, str):
            out = tool.args_validator.validate_json(args or "{}")
        else:
            out = tool.args_validator.validate_python(args or {})
    except Exception:  # arguments the tool would refuse: no approval stands for them
        return None
    return dict(out) if isinstance(out, dict) else None


def _asked(call_id: Optional[str], messages: List[Any]) -> Any:
    """The arguments the model gave tool call ``call_id`` (before any edit)."""
    for message in reversed(messages):
        if isinstance(message, ModelResponse):
            for part in message.tool_calls:
                if part.tool_call_id == call_id:
                    return part.args
    return None


def _decider(metadata: Any, default: str) -> str:
    by = metadata.get("decided_by") if isinstance(metadata, dict) else None
    return by if isinstance(by, str) and by.strip() else default


async def _standing(
    about: Protected, takes_ctx: bool, ctx: RunContext[Any], args: Dict[str, Any]
) -> Optional[ApprovalRecord]:
    """The request standing for these arguments (``None``: none needed, or no key)."""
    try:
        return await about.aapproval(*([ctx] if takes_ctx else []), **args)
    except CTRLRunError:  # the call itself raises it again, and is answered then
        return None


@dataclass
class _ProtectedToolset(WrapperToolset[Any]):
    """The agent's toolset as :class:`Approvals` sees it: the tools it lists, and every call of
    a protected tool (its approval recorded first; a refusal answered)."""

    approvals: Optional[Approvals] = None

    async def get_tools(self, ctx: RunContext[Any]) -> Dict[str, ToolsetTool[Any]]:
        tools = await super().get_tools(ctx)
        if self.approvals is not None:
            self.approvals._listed.update(tools)
        return tools

    async def call_tool(
        self, name: str, tool_args: Dict[str, Any], ctx: RunContext[Any], tool: ToolsetTool[Any]
    ) -> Any:
        about, takes_ctx = _about(tool)
        if about is None:
            return await super().call_tool(name, tool_args, ctx, tool)
        if ctx.tool_call_approved and self.approvals is not None:
            await self.approvals._approved(about, takes_ctx, ctx, tool, tool_args)
        token = _DEFERS.set(True)
        try:
            return await super().call_tool(name, tool_args, ctx, tool)
        except NotExecuted as exc:  # (a function protected by ctrlrun.protect itself)
            raise failed(exc, key_or_none(about, [ctx] if takes_ctx else [], tool_args)) from exc
        except REFUSALS as exc:
            key = key_or_none(about, [ctx] if takes_ctx else [], tool_args)
            own = getattr(exc, "effect_key", None)
            refusal = None if key and own and own != key else _refusal_of(exc, about.action, key)
            if refusal is None:
                raise  # a nested protected call's refusal: the tool's own error
            return answer(refusal)
        finally:
            _DEFERS.reset(token)


@dataclass
class Approvals(AbstractCapability[Any]):
    """A pydantic-ai capability (``Agent(..., capabilities=[Approvals()])``, or one run's
    ``capabilities=``): a protected tool's approval defers the run, and the decisions the run
    is resumed with are recorded in ctrlrun.

    ``approver``: the name a decision is recorded under (``decided_by``) when the resumed
    results' metadata for the call names nobody (``metadata={call_id: {"decided_by": "ops:alice"}}``);
    default ``"pydantic-ai"``. pydantic-ai does not say who answered: the name is what the
    application resuming the run vouches for, so authenticate that person first.

    It also answers the refusals of tools protected with plain ``ctrlrun.protect`` as
    :func:`protect` does."""

    approver: Optional[str] = None
    _listed: Dict[str, ToolsetTool[Any]] = field(default_factory=dict, init=False, repr=False)

    @classmethod
    def get_serialization_name(cls) -> Optional[str]:
        return None

    async def for_run(self, ctx: RunContext[Any]) -> AbstractCapability[Any]:
        return replace(self)  # a run's own (the tools it lists are its own)

    def get_wrapper_toolset(self, toolset: AbstractToolset[Any]) -> AbstractToolset[Any]:
        return _ProtectedToolset(toolset, self)

    def _by(self, metadata: Any) -> str:
        return _decider(metadata, self.approver or DEFAULT_APPROVER)

    async def _approved(
        self,
        about: Protected,
        takes_ctx: bool,
        ctx: RunContext[Any],
        tool: ToolsetTool[Any],
        args: Dict[str, Any],
    ) -> None:
        """A call approved through pydantic-ai: grant the request for the arguments it runs
        with; when they were edited, deny the request for the model's own, naming the new one."""
        new = await _standing(about, takes_ctx, ctx, args)
        if new is None:
            return
        by = self._by(ctx.tool_call_metadata)
        asked = _asked(ctx.tool_call_id, ctx.messages)
        original = None if asked is None else _validated(tool, asked)
        old = None
        if original is not None and original != args:
            old = await _standing(about, takes_ctx, ctx, original)
            if old is not None and old.request_id == new.request_id:
                old = None
        where = f"through pydantic-ai (tool call {ctx.tool_call_id})"
        store = await about.astore()
        if old is None:
            await adecide(store, new, True, by, f"approved {where}")
            return
        await adecide(
            store, new, True, by, f"approved {where}, the arguments edited from {old.request_id}"
        )
        await adecide(
            store, old, False, by, f"edited then approved {where}: granted as {new.request_id}"
        )

    async def after_node_run(self, ctx: RunContext[Any], *, node: Any, result: Any) -> Any:
        if isinstance(node, CallToolsNode) and node.tool_call_results:
            for call_id, decided in node.tool_call_results.items():
                if isinstance(decided, ToolDenied):
                    metadata = (node.tool_call_metadata or {}).get(call_id)
                    await self._denied(ctx, node.model_response, call_id, decided, metadata)
        return result

    async def _denied(
        self,
        ctx: RunContext[Any],
        response: ModelResponse,
        call_id: str,
        denied: ToolDenied,
        metadata: Any,
    ) -> None:
        part = next((p for p in response.tool_calls if p.tool_call_id == call_id), None)
        tool = None if part is None else self._listed.get(part.tool_name)
        about, takes_ctx = _about(tool)
        if part is None or tool is None or about is None:
            return
        args = _validated(tool, part.args)
        record = None if args is None else await _standing(about, takes_ctx, ctx, args)
        if record is not None:
            await adecide(await about.astore(), record, False, self._by(metadata), denied.message)
