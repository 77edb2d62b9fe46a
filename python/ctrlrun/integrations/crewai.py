"""ctrlrun for CrewAI (``pip install 'ctrlrun[crewai]'``; package ``crewai``).

``protect(name, **options)`` takes the keyword arguments of :func:`ctrlrun.protect` and works in
either order with ``@tool`` (``crewai.tools.tool``):

* **under it** (next to the function) it protects the function;
* **above it** it is handed the CrewAI ``Tool`` and returns a copy (same name, description,
  schema and settings) calling the protected function. Given any other ``BaseTool`` instance
  (a class with its own ``_run``), it returns a copy whose ``_run`` is protected. The core
  ``ctrlrun.protect`` handed a ``BaseTool`` delegates to :func:`protect_tool`.

A refusal is the tool's result, in the gateway's words ("already done: <key> committed at
<time>; do not retry"), never CrewAI's "Error executing tool: ...". A tool protected above
``@tool`` (or by :func:`protect_tool`) has :func:`never_cached` as its ``cache_function``:
CrewAI's text (ReAct) tool path caches results by input, and a cached "waiting for approval"
would otherwise answer the same call after the person granted it. Under ``@tool``, set
``tool.cache_function = never_cached`` yourself.

Approvals: :class:`Approvals` is a CrewAI ``before_tool_call`` hook
(``register_before_tool_call_hook(Approvals(ask))``, or ``Approvals(ask).register()``). Before a
protected tool with ``decision="approve"`` runs, a pending request is shown to a person through
``ask(context, record)`` (default: CrewAI's ``context.request_human_input``); the answer is
recorded in ctrlrun (:func:`ctrlrun.integrations._common.decide`), then the call goes on and
runs once (or is answered "denied by ..."). ``ask`` returning ``None`` leaves the request
pending: the model is told "waiting for approval <id>".

CrewAI injects no parameters into a function tool."""

from __future__ import annotations

from typing import Any, Callable, Dict, Optional, Tuple

from crewai.tools import BaseTool
from crewai.tools.base_tool import Tool

from ctrlrun.call.protect import protect as _protect
from ctrlrun.errors import CTRLRunError, InvalidArgument
from ctrlrun.integrations._common import Protected, Refusal, answering, decide, protected
from ctrlrun.store.approvals import ApprovalRecord, ApprovalState

__all__ = ["protect", "protect_tool", "answer", "never_cached", "Approvals", "DEFAULT_APPROVER"]

#: Who a decision made through a CrewAI hook is recorded as, when the answer names nobody.
DEFAULT_APPROVER = "crewai"

#: What a person's answer may be: a bool, a word ("approve", "yes", "no"), a dict
#: ``{"approved": bool, "by": str, "note": str}``, or ``None`` (no decision yet).
Ask = Callable[[Any, ApprovalRecord], Any]


def answer(refusal: Refusal) -> str:
    """What the model is told of a refusal: its text, as the tool's result."""
    return refusal.text


def never_cached(_args: Any = None, _result: Any = None) -> bool:
    """A ``cache_function`` for a protected tool: its results are never cached by CrewAI
    (ctrlrun's store says what ran)."""
    return False


def _guarded(fn: Any, name: str, options: Dict[str, Any]) -> Any:
    if not callable(fn) or isinstance(fn, type):
        raise InvalidArgument(
            f"protect({name!r}) decorates a function or a CrewAI tool, got {fn!r}"
        )
    return answering(_protect(name, **options)(fn), answer)


def protect(name: str, **options: Any) -> Callable[[Any], Any]:
    """``ctrlrun.protect(name, **options)`` for CrewAI: under ``@tool`` (a function) or above it
    (a ``BaseTool``, protected by :func:`protect_tool`)."""

    def decorate(fn: Any) -> Any:
        if isinstance(fn, BaseTool):
            return protect_tool(fn, name, options)
        return _guarded(fn, name, options)

    return decorate


def protect_tool(tool: BaseTool, name: str, options: Dict[str, Any]) -> BaseTool:
    """A copy of ``tool`` calling its function (a ``Tool``) or its ``_run`` (any other
    ``BaseTool``) protected as ``protect(name, **options)`` does, never cached by CrewAI."""
    if isinstance(tool, Tool):
        guarded = _guarded(tool.func, name, options)
        return tool.model_copy(update={"func": guarded, "cache_function": never_cached})
    guarded = _guarded(tool._run, name, options)  # the bound method: `self` is no argument
    cls = type(tool)

    def _run(self: BaseTool, *args: Any, **kwargs: Any) -> Any:
        return guarded(*args, **kwargs)

    made_cls: type[BaseTool] = type(
        cls.__name__,
        (cls,),
        {"_run": _run, "ctrlrun_guarded": staticmethod(guarded), "__module__": cls.__module__},
    )
    fields = {f: getattr(tool, f) for f in type(tool).model_fields}
    made: BaseTool = made_cls.model_validate({**fields, "cache_function": never_cached})
    return made


# ---- the before_tool_call hook ---------------------------------------------------------------


def _about(structured: Any) -> Optional[Protected]:
    """The :class:`Protected` of the tool a hook context names (``context.tool``)."""
    tool = getattr(structured, "_original_tool", None)
    for fn in (getattr(tool, "func", None), getattr(type(tool), "ctrlrun_guarded", None)):
        about = protected(fn) if fn is not None else None
        if about is not None:
            return about
    return protected(getattr(structured, "func", None))


def _decision(response: Any, default: str) -> Tuple[Optional[bool], str, Optional[str]]:
    """(granted, by, note) of a person's answer; ``granted`` ``None``: no decision yet."""
    if response is None:
        return None, default, None
    if isinstance(response, dict):
        by, note = response.get("by"), response.get("note")
        return (
            response.get("approved") is True,
            by if isinstance(by, str) and by.strip() else default,
            note if isinstance(note, str) else None,
        )
    if isinstance(response, str):
        word = response.strip().lower()
        return word in ("y", "yes", "approve", "approved", "grant"), default, None
    return response is True, default, None


def _ask_in_console(context: Any, record: ApprovalRecord) -> Any:
    return context.request_human_input(
        prompt=f"ctrlrun: {record.action} needs approval ({record.request_id}): {record.arguments}",
        default_message="Type 'approve' to run it once; anything else denies it:",
    )


class Approvals:
    """A CrewAI ``before_tool_call`` hook recording a person's decision on a protected tool's
    pending approval request before the tool runs.

    ``ask(context, record)``: shows the request (``record.arguments``, ``record.request_id``)
    to a person and returns the answer (see :data:`Ask`); default CrewAI's
    ``context.request_human_input`` on the console. ``approver``: the name a decision is
    recorded under when the answer names nobody (default ``"crewai"``); CrewAI does not say
    who answered, so authenticate that person in ``ask``."""

    def __init__(self, ask: Optional[Ask] = None, approver: Optional[str] = None) -> None:
        self.ask: Ask = ask or _ask_in_console
        self.approver = approver or DEFAULT_APPROVER

    def register(self) -> Approvals:
        """Registered as a global ``before_tool_call`` hook (CrewAI's hooks are global)."""
        from crewai.hooks import register_before_tool_call_hook

        register_before_tool_call_hook(self)
        return self

    def unregister(self) -> None:
        from crewai.hooks import unregister_before_tool_call_hook

        unregister_before_tool_call_hook(self)

    def __call__(self, context: Any) -> None:
        about = _about(context.tool)
        if about is None:
            return None
        args = dict(context.tool_input or {})
        try:
            key = about.key(**args)
            store = about.store()
            row = None if key is None else store.get_effect(key)
            if row is not None and row.state.value != "failed":
                return None  # refused as a duplicate: nothing to ask a person
            record = about.approval(**args)
        except (CTRLRunError, TypeError):  # the call raises it again, and is answered then
            return None
        if record is None or record.state is not ApprovalState.PENDING:
            return None
        granted, by, note = _decision(self.ask(context, record), self.approver)
        if granted is not None:
            where = f"through a CrewAI before_tool_call hook (tool {context.tool_name})"
            decide(
                store, record, granted, by, note or ("approved " if granted else "denied ") + where
            )
        return None  # the call goes on: it runs once, or is answered "denied"/"waiting"
