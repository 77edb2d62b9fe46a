"""ctrlrun for LangChain tools and LangGraph graphs (``pip install 'ctrlrun[langchain]'``).

:func:`protect` takes the keyword arguments of :func:`ctrlrun.protect` and works in either
order with ``langchain_core.tools.tool``:

* above ``@tool`` (or ``ctrlrun.protect`` above it, which hands the tool here:
  :func:`protect_tool`), it returns a protected ``StructuredTool`` with the same name,
  description, argument schema and ``response_format``. A refusal is the call's answer: a
  ``ToolMessage`` with ``status="error"``, the refusal's text as its content and the
  structured payload as its ``artifact`` (invoked with a ``ToolCall``), or the text (invoked
  with plain arguments);
* under ``@tool``, it protects the function and makes a refusal its return value: the text
  (or ``(text, payload)`` when the function is annotated to return a tuple, as a
  ``content_and_artifact`` tool does). LangChain does not tell a function its call's id, so
  only the order above can answer with an error ``ToolMessage``.

In a LangGraph run with a checkpointer, a call that needs a person's approval pauses the
graph with ``interrupt`` (the value names the ctrlrun request) and the resume value decides it
(see :class:`Decision`). Outside such a graph the answer is the "waiting for approval" text.
Parameters LangChain or LangGraph fill in (``InjectedToolCallId``, ``InjectedState``,
``RunnableConfig``, ``ToolRuntime``, ``callbacks``) are never part of a call's key, fingerprint
or approval (:mod:`ctrlrun.call.injected`)."""

from __future__ import annotations

import contextvars
import functools
import inspect
from typing import Any, Callable, Dict, Optional, Tuple, TypeVar

from langchain_core.callbacks import AsyncCallbackManagerForToolRun, CallbackManagerForToolRun
from langchain_core.messages import ToolMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool, StructuredTool
from pydantic import BaseModel, ConfigDict, Field, create_model, field_validator, model_validator

from ctrlrun.call import io_threads
from ctrlrun.call.protect import protect as _protect
from ctrlrun.call.seams import tuple_maker
from ctrlrun.errors import InvalidArgument
from ctrlrun.integrations._common import Protected, Refusal, Refused, answering, decide, protected

__all__ = ["protect", "protect_tool", "ProtectedStructuredTool", "Decision", "decision_schema"]

T = TypeVar("T")

# The call a protected tool is running: (the tool's marker, its tool_call_id). Set by the
# tool's ``_run``/``_arun``, read by its function when it answers a refusal.
_CALL: contextvars.ContextVar[Optional[Tuple[object, Optional[str]]]] = contextvars.ContextVar(
    "ctrlrun_langchain_call", default=None
)
# The keyword a protected tool passes its call's id on with, from ``_to_args_and_kwargs`` to
# ``_run`` (no parameter can be named so).
_CALL_ID = "ctrlrun:tool_call_id"


class Decision(BaseModel):
    """What a LangGraph run waiting for a ctrlrun approval is resumed with
    (``Command(resume={...})``), validated by ``interrupt`` itself: a value that does not fit
    is refused before anything is recorded, and the interrupt can be answered again.

    ``{"approved": True, "by": NAME, "note": TEXT}`` grants (``by`` is required);
    ``{"approved": False, "by": NAME, "note": TEXT}`` denies (recorded as by ``langgraph``
    when ``by`` is left out); ``"args": {...}`` with a grant edits arguments (by name, those
    the approver was shown); ``"request_id"`` names the request decided (a value naming another
    decides nothing for this call). Without ``"approved"`` (``{}``) nothing is decided: what
    the store holds stands, e.g. a grant made with ``ctrlrun approve``."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    approved: Optional[bool] = None
    by: Optional[str] = None
    note: Optional[str] = None
    args: Optional[Dict[str, Any]] = None
    request_id: Optional[str] = None

    @field_validator("by")
    @classmethod
    def _a_name(cls, by: Optional[str]) -> Optional[str]:
        if by is not None and not by.strip():
            raise ValueError("'by' must name a person")
        return by

    @model_validator(mode="after")
    def _coherent(self) -> Decision:
        if self.approved and self.by is None:
            raise ValueError("a grant must say who approved it: {'approved': True, 'by': NAME}")
        if self.args is not None and not self.approved:
            raise ValueError("'args' (edited arguments) come with a grant")
        return self

    def edits(self) -> Dict[str, Any]:
        """The edited arguments by name (none: ``{}``)."""
        args = self.args
        if isinstance(args, BaseModel):
            return args.model_dump(by_alias=True, exclude_unset=True)
        return dict(args or {})


@functools.lru_cache(maxsize=256)
def decision_schema(names: Tuple[str, ...]) -> type[Decision]:
    """:class:`Decision` whose ``args`` may name only ``names`` (the call's arguments)."""
    fields: Dict[str, Any] = {
        f"arg{i}": (Any, Field(default=None, alias=name)) for i, name in enumerate(names)
    }
    edited = create_model(
        "EditedArguments", __config__=ConfigDict(extra="forbid", frozen=True), **fields
    )
    return create_model("ApprovalDecision", __base__=Decision, args=(Optional[edited], None))


# ---- approvals through LangGraph's interrupt ---------------------------------------------


def _can_interrupt() -> bool:
    """Inside a LangGraph run that can be resumed (a checkpointer)."""
    try:
        from langgraph.config import get_config
    except ImportError:  # langchain-core alone: no graph
        return False
    try:
        conf = get_config().get("configurable") or {}
    except RuntimeError:  # not inside a runnable
        return False
    return "__pregel_scratchpad" in conf and conf.get("__pregel_checkpointer") is not None


def _ask(refusal: Refusal, call_id: Optional[str]) -> Decision:
    """Pause the graph on the approval ``refusal`` stands for (raises ``GraphInterrupt`` the
    first time); once resumed, the decision."""
    from langgraph.types import interrupt

    p = refusal.payload
    value = {
        "ctrlrun": "approval_required",
        "request_id": p.get("request_id"),
        "action": p.get("action"),
        "effect_key": p.get("effect_key"),
        "arguments": p.get("arguments"),
        "not_bound": p.get("not_bound", []),
        "expires_at": p.get("expires_at"),
        "tool_call_id": call_id,
        "text": refusal.text,
    }
    schema = decision_schema(tuple(sorted(p.get("arguments") or {})))
    return interrupt(value, response_schema=schema)


def _apply(
    about: Protected, refusal: Refusal, decision: Decision, args: Any, kwargs: Dict[str, Any]
) -> Tuple[Any, Dict[str, Any]]:
    """Record ``decision`` for the request ``refusal`` names; the arguments to call with."""
    rid = str(refusal.payload["request_id"])
    if decision.approved is None or decision.request_id not in (None, rid):
        return args, kwargs  # the store's say stands (a grant made with `ctrlrun approve`)
    by = decision.by or "langgraph"
    if not decision.approved:
        decide(about.store(), rid, False, by, decision.note)
        return args, kwargs
    edits = decision.edits()
    if not edits:
        decide(about.store(), rid, True, by, decision.note)
        return args, kwargs
    edited = {**kwargs, **edits}
    record = about.approval(**edited)
    if record is None or record.request_id == rid:
        decide(about.store(), rid, True, by, decision.note)
        return (), edited
    said = f": {decision.note}" if decision.note else ""
    decide(about.store(), record, True, by, f"edited from {rid}{said}")
    decide(about.store(), rid, False, by, f"edited: replaced by {record.request_id}{said}")
    return (), edited


def _bound(fn: Callable[..., Any], args: Any, kwargs: Dict[str, Any]) -> Dict[str, Any]:
    """The call's arguments by name (LangChain passes them by name; a positional one too)."""
    if not args:
        return kwargs
    return dict(inspect.signature(fn).bind_partial(*args, **kwargs).arguments)


def _tool_function(
    fn: Callable[..., Any],
    answer: Callable[[Refusal], Any],
    marker: Optional[object] = None,
    after: Callable[[Any], Any] = lambda out: out,
) -> Callable[..., Any]:
    """``fn`` (a protected function) as a tool's function: a refusal becomes ``answer(it)``;
    an approval in a LangGraph run asks through ``interrupt`` first. ``marker``: the
    protected tool's, whose calls' ids the function then knows."""
    about = protected(fn)
    inner = answering(fn, Refused)

    if inspect.iscoroutinefunction(fn):

        @functools.wraps(fn)
        async def tool_async(*args: Any, **kwargs: Any) -> Any:
            out = await inner(*args, **kwargs)
            if isinstance(out, Refused):
                refusal = out.refusal
                if refusal.kind == "approval_required" and about is not None and _can_interrupt():
                    decision = _ask(refusal, _call_id(marker))
                    kw = _bound(fn, args, kwargs)
                    args, kwargs = await io_threads.run(_apply, about, refusal, decision, (), kw)
                    out = await inner(*args, **kwargs)
                if isinstance(out, Refused):
                    return answer(out.refusal)
            return after(out)

        return tool_async

    @functools.wraps(fn)
    def tool_sync(*args: Any, **kwargs: Any) -> Any:
        out = inner(*args, **kwargs)
        if isinstance(out, Refused):
            refusal = out.refusal
            if refusal.kind == "approval_required" and about is not None and _can_interrupt():
                decision = _ask(refusal, _call_id(marker))
                args, kwargs = _apply(about, refusal, decision, (), _bound(fn, args, kwargs))
                out = inner(*args, **kwargs)
            if isinstance(out, Refused):
                return answer(out.refusal)
        return after(out)

    return tool_sync


def _call_id(marker: Optional[object]) -> Optional[str]:
    """The tool_call_id of the call the protected tool ``marker`` stands for is running."""
    current = _CALL.get()
    if current is None or marker is None or current[0] is not marker:
        return None
    return current[1]


# ---- the protected tool ------------------------------------------------------------------


class ProtectedStructuredTool(StructuredTool):
    """A ``StructuredTool`` whose function is protected: what :func:`protect_tool` returns.
    It passes each call's ``tool_call_id`` on to its function, which answers a refusal with an
    error ``ToolMessage`` for that call."""

    @property
    def __ctrlrun__(self) -> Optional[Protected]:
        return protected(self.func or self.coroutine)

    def _marker(self) -> object:
        return getattr(self.func or self.coroutine, "__ctrlrun_tool__", None)

    def _to_args_and_kwargs(
        self, tool_input: str | dict[str, Any], tool_call_id: str | None
    ) -> tuple[tuple[str, ...], dict[str, Any]]:
        args, kwargs = super()._to_args_and_kwargs(tool_input, tool_call_id)
        return args, {**kwargs, _CALL_ID: tool_call_id}

    def _run(
        self,
        *args: Any,
        config: RunnableConfig,
        run_manager: CallbackManagerForToolRun | None = None,
        **kwargs: Any,
    ) -> Any:
        if _CALL_ID not in kwargs:  # the sync function of an async call (already set)
            return super()._run(*args, config=config, run_manager=run_manager, **kwargs)
        token = _CALL.set((self._marker(), kwargs.pop(_CALL_ID)))
        try:
            return super()._run(*args, config=config, run_manager=run_manager, **kwargs)
        finally:
            _CALL.reset(token)

    async def _arun(
        self,
        *args: Any,
        config: RunnableConfig,
        run_manager: AsyncCallbackManagerForToolRun | None = None,
        **kwargs: Any,
    ) -> Any:
        token = _CALL.set((self._marker(), kwargs.pop(_CALL_ID, None)))
        try:
            return await super()._arun(*args, config=config, run_manager=run_manager, **kwargs)
        finally:
            _CALL.reset(token)


def protect_tool(tool: BaseTool, name: str, options: Dict[str, Any]) -> ProtectedStructuredTool:
    """``tool`` (a ``StructuredTool``, as ``@tool`` makes) with its function protected by
    ``ctrlrun.protect(name, **options)``: the same name, description, argument schema and
    ``response_format``; a refusal answered as an error ``ToolMessage`` (or its text)."""
    for fn in (getattr(tool, "func", None), getattr(tool, "coroutine", None)):
        already = protected(fn)
        if already is not None:
            raise InvalidArgument(
                f"protect({name!r}) above @tool: {tool.name!r}'s function is already protected "
                f"as {already.action!r}; protect it once"
            )
    if type(tool) is not StructuredTool:
        raise InvalidArgument(
            f"protect({name!r}) above a {type(tool).__name__}: only a StructuredTool (what "
            f"@tool makes of a function) can be protected as a tool; put "
            f"ctrlrun.integrations.langchain.protect below @tool, next to the function"
        )
    marker = object()
    tool_name, pair = tool.name, tool.response_format == "content_and_artifact"

    def answer(refusal: Refusal) -> Any:
        call_id = _call_id(marker)
        if call_id is None:
            return (refusal.text, refusal.payload) if pair else refusal.text
        message = ToolMessage(
            content=refusal.text,
            artifact=refusal.payload,
            tool_call_id=call_id,
            name=tool_name,
            status="error",
        )
        return (message, None) if pair else message

    def after(out: Any) -> Any:  # a replayed (content, artifact) comes back from JSON a list
        return tuple(out) if pair and type(out) is list and len(out) == 2 else out

    made: Dict[str, Any] = {}
    for field, fn in (("func", tool.func), ("coroutine", tool.coroutine)):
        if fn is not None:
            wrapped = _tool_function(_protect(name, **options)(fn), answer, marker, after)
            wrapped.__ctrlrun_tool__ = marker  # type: ignore[attr-defined]
            fn = wrapped
        made[field] = fn
    fields = {k: getattr(tool, k) for k in type(tool).model_fields}
    return ProtectedStructuredTool(**{**fields, **made})


def _plain_answer(fn: Callable[..., Any]) -> Callable[[Refusal], Any]:
    """Under ``@tool``: a refusal as the function's return value."""
    pair = tuple_maker(fn) is not None
    return lambda refusal: (refusal.text, refusal.payload) if pair else refusal.text


def protect(name: str, **options: Any) -> Callable[[T], T]:
    """``ctrlrun.protect(name, **options)`` for LangChain, in either order with ``@tool``:
    above it, the protected tool (:func:`protect_tool`); below it, the protected function,
    answering a refusal with its text instead of raising."""
    deco = _protect(name, **options)

    def decorate(obj: T) -> T:
        if isinstance(obj, BaseTool):
            return deco(obj)  # type: ignore[type-var]  # core protect hands it to protect_tool
        fn = deco(obj)  # type: ignore[type-var]
        return _tool_function(fn, _plain_answer(obj))  # type: ignore[arg-type, return-value]

    return decorate
