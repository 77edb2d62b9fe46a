"""ctrlrun for the Claude Agent SDK (``pip install 'ctrlrun[claude_agent_sdk]'``; package
``claude_agent_sdk``): its in-process tools, made with ``@tool`` and served with
``create_sdk_mcp_server``.

An ``@tool`` handler takes ONE ``args`` dict. :func:`protect` (the keyword arguments of
:func:`ctrlrun.protect`) goes ABOVE ``@tool``: it reads the tool's ``input_schema`` and binds
the effect template, the fingerprint and the arguments an approver is shown to the dict's keys
(``effect="refund:{payment_id}"`` for ``{"payment_id": str, "amount": int}``). Under ``@tool``
it has only the handler, which does not say what its dict holds, so it raises at decoration
naming the order to write. A key the schema does not list (the model may send one) is answered
"refused: unknown argument(s)" before anything is reserved; an optional key left out is ``None``
in the fingerprint (the handler still gets the dict as sent).

A refusal is the tool's result, the SDK's ``{"content": [{"type": "text", "text": ...}],
"is_error": True}`` in the gateway's words ("already done: <key> committed at <time>; do not
retry", "outcome unknown: ... a person must resolve it", "waiting for approval <id>: ..."): the
session goes on, nothing is logged. The twin of a call in the same model turn is told "in
progress" or "already done" while the first one runs on.

Approvals (``decision="approve"``): a call with no grant in force answers "waiting for approval
<id>" and runs nothing. :class:`Approvals` maps them onto the SDK's human-in-the-loop: its
``PreToolUse`` hook (:meth:`Approvals.hooks`) and/or its ``can_use_tool`` callback ask ctrlrun
BEFORE the tool runs, may ask a person (``ask``, bounded by ``timeout``, well within the SDK's
hook timeout) and record the answer with :func:`ctrlrun.integrations._common.decide`; a call
still undecided is denied with the "waiting for approval <id>" text. Once the request is
granted (there, or with ``ctrlrun approve``), the same call runs once."""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import keyword
import typing
from typing import (
    Any,
    Awaitable,
    Callable,
    Dict,
    FrozenSet,
    Iterable,
    List,
    Mapping,
    Optional,
    Tuple,
    Union,
)

import claude_agent_sdk
from claude_agent_sdk import (
    HookMatcher,
    PermissionResultAllow,
    PermissionResultDeny,
    SdkMcpTool,
    ToolPermissionContext,
)

from ctrlrun.call import io_threads
from ctrlrun.call.approval import refusal as _refusal_exc
from ctrlrun.call.protect import protect as _protect
from ctrlrun.errors import InvalidArgument
from ctrlrun.integrations._common import (
    Protected,
    Refusal,
    adecide,
    answering,
    protected,
    refusal_of,
    standing_request,
)
from ctrlrun.store.approvals import ApprovalRecord, ApprovalState
from ctrlrun.store.approvers import check_name

__all__ = ["protect", "protect_tool", "answer", "Approvals", "DEFAULT_APPROVER"]

#: Who a decision made through the SDK is recorded as, when ``approved_by`` names nobody.
DEFAULT_APPROVER = "claude-agent-sdk"

Result = Dict[str, Any]
#: A person asked about one request: True grants, False denies, None leaves it pending.
Ask = Callable[[ApprovalRecord], Union[Optional[bool], Awaitable[Optional[bool]]]]


def _result(text: str) -> Result:
    return {"content": [{"type": "text", "text": text}], "is_error": True}


def answer(refusal: Refusal) -> Result:
    """What the SDK hands the model for a refusal: the gateway's text as an error result."""
    return _result(refusal.text)


# ---- the args dict as named parameters ------------------------------------------------------


def _keys(sdk_tool: SdkMcpTool[Any]) -> Tuple[List[str], FrozenSet[str]]:
    """The keys of a tool's args dict, and the required ones: those of the JSON Schema the SDK
    sends for its ``input_schema`` (``{"name": type}``, a JSON Schema, or a ``TypedDict``)."""
    build = getattr(claude_agent_sdk, "_build_input_schema", None)
    wire = build(sdk_tool) if callable(build) else _wire_schema(sdk_tool.input_schema)
    props = wire.get("properties") if isinstance(wire, dict) else None
    if not isinstance(props, dict):
        return [], frozenset()
    return list(props), frozenset(wire.get("required") or ())


def _wire_schema(input_schema: Any) -> Dict[str, Any]:
    """What ``create_sdk_mcp_server`` sends, for an SDK without ``_build_input_schema``."""
    if isinstance(input_schema, dict):
        if isinstance(input_schema.get("type"), str) and "properties" in input_schema:
            return input_schema
        return {"properties": dict(input_schema), "required": list(input_schema)}
    if typing.is_typeddict(input_schema):
        hints = typing.get_type_hints(input_schema)
        required = getattr(input_schema, "__required_keys__", hints)
        return {"properties": hints, "required": list(required)}
    return {"properties": {}}


def _signature(name: str, tool_name: str, keys: List[str], required: FrozenSet[str]) -> Any:
    bad = [k for k in keys if not (isinstance(k, str) and k.isidentifier()) or keyword.iskeyword(k)]
    if bad:
        named = ", ".join(map(repr, bad))
        raise InvalidArgument(
            f"protect({name!r}): the tool {tool_name!r} takes the key(s) {named}, which cannot "
            f"name a parameter; an effect key and a fingerprint are bound to the args dict's "
            f"keys, so name them as Python identifiers"
        )
    kind = inspect.Parameter.KEYWORD_ONLY
    params = [
        inspect.Parameter(k, kind) if k in required else inspect.Parameter(k, kind, default=None)
        for k in keys
    ]
    return inspect.Signature(params)


class _Tool:
    """What the integration knows of one protected tool (``handler.__ctrlrun_claude__``)."""

    __slots__ = ("about", "keys", "name")

    def __init__(self, about: Protected, keys: List[str], name: str) -> None:
        self.about = about
        self.keys = keys
        self.name = name

    def unknown(self, args: Mapping[str, Any]) -> List[str]:
        return sorted(str(k) for k in args if k not in self.keys)


def protect_tool(sdk_tool: SdkMcpTool[Any], name: str, options: Dict[str, Any]) -> SdkMcpTool[Any]:
    """A protected copy of ``sdk_tool`` (made by ``@tool``): the same name, description, input
    schema and annotations; its handler run through ``ctrlrun.protect(name, **options)`` with
    the args dict's keys as the parameters, refusals answered as its result."""
    if not isinstance(sdk_tool, SdkMcpTool):
        raise InvalidArgument(f"protect({name!r}) expected an @tool (SdkMcpTool), got {sdk_tool!r}")
    if getattr(sdk_tool.handler, "__ctrlrun_claude__", None) is not None:
        raise InvalidArgument(f"protect({name!r}): the tool {sdk_tool.name!r} is already protected")
    handler = sdk_tool.handler
    if not inspect.iscoroutinefunction(handler):
        raise InvalidArgument(
            f"protect({name!r}): the handler of {sdk_tool.name!r} must be an async def (the SDK "
            f"awaits it)"
        )
    keys, required = _keys(sdk_tool)

    async def body(**arguments: Any) -> Any:
        return await handler(dict(arguments))

    signature = _signature(name, sdk_tool.name, keys, required)
    body.__signature__ = signature  # type: ignore[attr-defined]
    body.__name__ = getattr(handler, "__name__", sdk_tool.name)
    body.__qualname__ = getattr(handler, "__qualname__", sdk_tool.name)
    body.__module__ = getattr(handler, "__module__", __name__)
    body.__doc__ = getattr(handler, "__doc__", None)
    guarded = _protect(name, **options)(body)
    about = protected(guarded)
    assert about is not None
    answered = answering(guarded, answer)
    ours = _Tool(about, keys, sdk_tool.name)

    async def run(args: Dict[str, Any]) -> Any:
        args = dict(args or {})
        unknown = ours.unknown(args)
        if unknown:
            return _result(
                f"refused: unknown argument(s) {', '.join(unknown)}; {sdk_tool.name} takes "
                f"{', '.join(keys) or 'no arguments'}. Nothing was run; call again with those"
            )
        return await answered(**args)

    run.__name__ = body.__name__
    run.__qualname__ = body.__qualname__
    run.__doc__ = body.__doc__
    run.__wrapped__ = guarded  # type: ignore[attr-defined]
    run.__ctrlrun_claude__ = ours  # type: ignore[attr-defined]
    return dataclasses.replace(sdk_tool, handler=run)


def protect(name: str, **options: Any) -> Callable[[Any], Any]:
    """``ctrlrun.protect(name, **options)`` for an ``@tool`` of the Claude Agent SDK, written
    ABOVE ``@tool`` (see the module's docstring)."""
    _protect(name, **options)  # the options checked now, before any tool is seen

    def decorate(target: Any) -> Any:
        if isinstance(target, SdkMcpTool):
            return protect_tool(target, name, dict(options))
        what = getattr(target, "__qualname__", repr(target))
        raise InvalidArgument(
            f"protect({name!r}) was given {what!r}, not an @tool: an @tool handler takes one "
            f"args dict, whose keys only @tool's input_schema names. Put "
            f"@ctrlrun.integrations.claude_agent_sdk.protect(...) ABOVE @tool(...), so the effect "
            f"template binds to the dict's keys"
        )

    return decorate


def _ours(sdk_tool: Any) -> Optional[_Tool]:
    found = getattr(getattr(sdk_tool, "handler", None), "__ctrlrun_claude__", None)
    return found if isinstance(found, _Tool) else None


# ---- approvals through the SDK's human-in-the-loop ------------------------------------------


class Approvals:
    """The SDK's human-in-the-loop for the protected tools of ``servers`` (the
    ``mcp_servers`` keys mapped to the tools given to ``create_sdk_mcp_server``): pass
    ``hooks=approvals.hooks()`` and/or ``can_use_tool=approvals.can_use_tool`` to
    ``ClaudeAgentOptions``.

    Before a protected call runs, the approval request standing for its arguments is looked
    up (asked, pending, when none stands). A grant lets the call through (it runs once); a
    denial denies it, the model told "denied by <who>: ... Do not retry". A pending request is
    put to ``ask`` (the request -> True grants, False denies, None: no answer yet), recorded
    under ``approved_by``; no ``ask``, no answer, or none within ``timeout`` seconds: the call
    is denied with "waiting for approval <id>: ..." (nothing reserved or run), and the run goes
    on. ``can_use_tool`` hands any other tool to ``fallback`` (default: denied, as the SDK
    does without a callback)."""

    def __init__(
        self,
        servers: Mapping[str, Iterable[SdkMcpTool[Any]]],
        *,
        ask: Optional[Ask] = None,
        approved_by: str = DEFAULT_APPROVER,
        timeout: float = 30.0,
        fallback: Optional[Callable[..., Awaitable[Any]]] = None,
    ) -> None:
        check_name("Approvals: approved_by", approved_by)  # a name the store keeps
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0:
            raise InvalidArgument(f"Approvals: timeout must be seconds > 0, got {timeout!r}")
        self.tools: Dict[str, _Tool] = {}
        for server, tools in servers.items():
            for t in tools:
                ours = _ours(t)
                if ours is not None:
                    self.tools[f"mcp__{server}__{ours.name}"] = ours
        self.ask = ask
        self.approved_by = approved_by
        self.timeout = float(timeout)
        self.fallback = fallback

    def hooks(self) -> Dict[str, List[HookMatcher]]:
        """``ClaudeAgentOptions(hooks=...)``: a ``PreToolUse`` hook for the protected tools."""
        names = "|".join(sorted(self.tools)) or None
        return {
            "PreToolUse": [
                HookMatcher(matcher=names, hooks=[self.pre_tool_use], timeout=self.timeout + 30)
            ]
        }

    async def pre_tool_use(self, data: Any, tool_use_id: Optional[str], context: Any) -> Any:
        """The ``PreToolUse`` hook: ``{}`` lets the call through, a ``deny`` says why."""
        said = await self.check(data.get("tool_name", ""), data.get("tool_input") or {})
        if said is None:
            return {}
        return {
            "hookSpecificOutput": {
                "hookEventName": "PreToolUse",
                "permissionDecision": "deny",
                "permissionDecisionReason": said,
            }
        }

    async def can_use_tool(
        self, tool_name: str, tool_input: Dict[str, Any], context: ToolPermissionContext
    ) -> Any:
        """The ``can_use_tool`` callback."""
        if tool_name not in self.tools:
            if self.fallback is not None:
                return await self.fallback(tool_name, tool_input, context)
            return PermissionResultDeny(message=f"{tool_name} is not allowed in this session")
        said = await self.check(tool_name, tool_input)
        return PermissionResultAllow() if said is None else PermissionResultDeny(message=said)

    async def check(self, tool_name: str, tool_input: Mapping[str, Any]) -> Optional[str]:
        """``None``: the call may go on (no approval needed, or granted); else what the model
        is told in its place."""
        ours = self.tools.get(tool_name)
        if ours is None or ours.unknown(tool_input):
            return None  # not ours; or the call itself answers "unknown argument(s)"
        args = dict(tool_input)
        record = await io_threads.run(_request_for, ours, args)
        if record is None or record.state is ApprovalState.GRANTED:
            return None
        if record.state is ApprovalState.PENDING and self.ask is not None:
            record = await self._asked(ours, record)
            if record is not None and record.state is ApprovalState.GRANTED:
                return None
        if record is None:
            return None
        return _told(ours, record)

    async def _asked(self, ours: _Tool, record: ApprovalRecord) -> Optional[ApprovalRecord]:
        assert self.ask is not None
        try:
            said = self.ask(record)
            if inspect.isawaitable(said):
                said = await asyncio.wait_for(said, self.timeout)
        except asyncio.TimeoutError:
            return record
        if said is None:
            return record
        store = await ours.about.astore()
        note = f"decided in a Claude Agent SDK session ({ours.name})"
        try:
            return await adecide(store, record, bool(said), self.approved_by, note)
        except InvalidArgument:  # a decision the store will not keep (self-approval...)
            return record


def _request_for(ours: _Tool, args: Dict[str, Any]) -> Optional[ApprovalRecord]:
    """:func:`standing_request` for a call with ``args``; ``None`` too for arguments the call
    refuses by itself (it says so when it runs)."""
    try:
        return standing_request(ours.about, (), args)
    except (TypeError, InvalidArgument):
        return None


def _told(ours: _Tool, record: ApprovalRecord) -> str:
    """The gateway's words for a request still pending or denied."""
    said = refusal_of(_refusal_exc(record), ours.about.action, record.effect_key)
    return said.text if said is not None else f"waiting for approval {record.request_id}"
