"""The MCP gateway: an MCP server on stdio in front of one upstream MCP server (a subprocess on
stdio), giving the upstream's tool calls the decorator's guarantees.

The upstream's tool ``T`` is the action ``mcp.<alias>.T``. A tool whose policy entry has an
``effect:`` template is reserved under the rendered key before the call is forwarded, through
the same steps as ``protect`` (``ctrlrun.call.runner_async``): fingerprints, approvals, receipts and the
refusals all come from there. Outcomes follow the rule that only proof of non-execution means
``failed`` (``ctrlrun.call.outcome``): the upstream's result is ``committed``; a call never sent (the upstream is down) is
``failed``; a call sent with no answer, or answered with a tool error, is ``ambiguous`` unless
the policy says ``on_tool_error: failed``.

Imports the MCP SDK (the ``gateway`` extra); ``import ctrlrun`` never imports this module.
Starting the upstream and serving agents is in ``serve.py``; what the agent is answered, in
``results.py`` (:func:`answer`, from the :class:`Forwarded` value each call ends in).
"""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any, Dict, List, Optional, Tuple

import anyio
from mcp import types
from mcp.client.session import ClientSession
from pydantic import ValidationError

import ctrlrun._core as _core
from ctrlrun.call import runner_async as _runner_async
from ctrlrun.call.binding import render_value
from ctrlrun.call.outcome import state_after
from ctrlrun.call.protect import DEFAULT_LEASE
from ctrlrun.call.steps import Call, Spec, replayable
from ctrlrun.call.telemetry import UNOBSERVED, observe
from ctrlrun.errors import (
    ActionDenied,
    AmbiguousEffect,
    ApprovalRequired,
    CTRLRunError,
    DuplicateEffect,
    EffectKeyError,
    NotExecuted,
)
from ctrlrun.gateway.relay import Relay
from ctrlrun.gateway.results import Forwarded, answer
from ctrlrun.gateway.upstream import NotSent, Upstream, brief, progress_of
from ctrlrun.policy import ActionPolicy, current_policy
from ctrlrun.store.api import Store

#: The seconds a forwarded call may take unless ``--call-timeout`` or the policy says.
DEFAULT_CALL_TIMEOUT = 60.0


class UpstreamToolError(CTRLRunError):
    """The upstream answered with a tool error: the effect may or may not have happened."""


def render_key(template: _core.Template, arguments: Dict[str, Any]) -> str:
    """The effect key from the call's arguments, with the decorator's grammar and errors."""
    values = []
    for name in template.placeholders:
        if name not in arguments:
            raise EffectKeyError(
                f"effect template {template.source!r}: no value for placeholder '{name}'; "
                f"the call's arguments are {', '.join(sorted(arguments)) or '(none)'}"
            )
        values.append(render_value(template.source, name, arguments[name]))
    return template.render(values)


class Gateway:
    """What the gateway's MCP server does with each request."""

    def __init__(
        self,
        alias: str,
        store: Store,
        upstream: Upstream,
        call_timeout: float,
        tools: List[types.Tool],
        relay: Optional[Relay] = None,
        requested_by: Optional[str] = None,
    ) -> None:
        self.alias = alias
        #: Who asks for the approvals this gateway's calls need (``--requested-by``): that
        #: principal can never grant them.
        self.requested_by = requested_by
        self.relay = relay or Relay()
        self.relay.tools_changed = self.forget_tools
        self.store = store
        self.upstream = upstream
        self.call_timeout = call_timeout
        self.templates: Dict[str, _core.Template] = {}
        self.known = {t.name for t in tools}

    def forget_tools(self) -> None:
        """The upstream's tool list changed: read it again before the next reserved call."""
        self.known = set()

    async def _has_tool(self, tool: str) -> bool:
        """Whether the upstream offers ``tool`` (its list read again on a miss). An upstream
        that never started cannot say: the call goes on and is recorded failed, unsent."""
        if self.upstream.session is None:
            return True
        if tool not in self.known:
            await self.upstream.alive()
            self.known = {t.name for t in await upstream_tools(self.upstream.session)}
        return tool in self.known

    async def list_tools(
        self, ctx: Any, params: Optional[types.PaginatedRequestParams]
    ) -> types.ListToolsResult:
        """The upstream's tools; a reserved one says so in its description."""
        self.relay.saw(ctx)
        if self.upstream.session is None:
            return types.ListToolsResult(tools=[])  # the upstream never started
        result = await self.upstream.ask(lambda s: s.list_tools(params=params))
        try:
            policy = current_policy()
        except CTRLRunError:
            return result  # a broken policy refuses calls; the listing stays the upstream's
        tools = []
        for tool in result.tools:
            entry = None if policy is None else policy.actions.get(f"mcp.{self.alias}.{tool.name}")
            if entry is not None and entry.effect is not None and entry.decision != "deny":
                note = (
                    f"[ctrlrun] Runs at most once per effect key {entry.effect!r}; a repeated "
                    f"call is refused with the reason."
                )
                if entry.decision == "approve":
                    note += " Each call's arguments need a person's approval."
                text = f"{tool.description}\n\n{note}" if tool.description else note
                tool = tool.model_copy(update={"description": text})
            tools.append(tool)
        return result.model_copy(update={"tools": tools})

    def _entry(self, tool: str) -> Tuple[Optional[ActionPolicy], Optional[str]]:
        """The tool's policy entry, and the policy file's path."""
        policy = current_policy()
        if policy is None:
            return None, None
        return policy.actions.get(f"mcp.{self.alias}.{tool}"), policy.path

    async def call_tool(
        self, ctx: Any, params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        """The agent's answer for one tool call: what :meth:`forward` says became of it."""
        return answer(await self.forward(ctx, params))

    async def forward(self, ctx: Any, params: types.CallToolRequestParams) -> Forwarded:
        """Forward one tool call (reserved first when the policy gives it an effect template),
        and say what became of it."""
        self.relay.saw(ctx)
        tool, arguments = params.name, dict(params.arguments or {})
        action = f"mcp.{self.alias}.{tool}"
        try:
            entry, path = self._entry(tool)
        except CTRLRunError as exc:  # a broken policy file refuses, never forwards unguarded
            return Forwarded(action, None, "policy", str(exc))
        timeout = self.call_timeout
        if entry is not None and entry.call_timeout is not None:
            timeout = entry.call_timeout.total_seconds()
        if entry is not None and entry.decision == "deny":
            return Forwarded(
                action,
                None,
                "refused",
                refusal=ActionDenied(
                    f"action {action!r} is denied by the policy {path} (line {entry.line}); nothing was sent",
                    action=action,
                    policy=path,
                ),
            )
        if entry is None or entry.effect is None:
            if entry is not None and entry.decision == "approve":
                return Forwarded(
                    action,
                    None,
                    "invalid",
                    (
                        f"action {action!r} needs approval, but the policy gives it no effect "
                        f"template; an approval is used with the reservation of its effect key, so "
                        f"the call is refused; nothing was sent"
                    ),
                )
            return await self._forward_unreserved(ctx, action, tool, arguments, timeout)
        return await self._forward_reserved(ctx, entry, tool, arguments, timeout)

    async def _send(
        self, ctx: Any, tool: str, arguments: Dict[str, Any], timeout: float
    ) -> types.CallToolResult:
        """The call to the upstream, on behalf of the agent behind ``ctx`` (what the upstream
        asks meanwhile goes to that agent, its progress too when the agent asked for it)."""
        with self.relay.calling(ctx):
            return await self.upstream.call(tool, arguments, timeout, progress_of(ctx))

    async def _forward_unreserved(
        self, ctx: Any, action: str, tool: str, arguments: Dict[str, Any], timeout: float
    ) -> Forwarded:
        try:
            return Forwarded(
                action, None, "answered", answer=await self._send(ctx, tool, arguments, timeout)
            )
        except NotSent as exc:
            return Forwarded(action, None, "upstream", str(exc))
        except Exception as exc:  # a tool result, never a protocol error, for the agent
            return Forwarded(
                action,
                None,
                "upstream",
                (f"the unreserved call got no answer from the upstream ({brief(exc)})"),
            )

    async def _forward_reserved(
        self, ctx: Any, entry: ActionPolicy, tool: str, arguments: Dict[str, Any], timeout: float
    ) -> Forwarded:
        action = entry.name
        try:
            with anyio.fail_after(timeout):
                offered = await self._has_tool(tool)
        except Exception as exc:  # a tool result, never a protocol error, for the agent
            return Forwarded(
                action,
                None,
                "upstream",
                (
                    f"the upstream's tool list could not be read ({brief(exc)}); nothing was reserved or sent"
                ),
            )
        if not offered:
            return Forwarded(
                action,
                None,
                "invalid",
                (f"the upstream has no tool {tool!r}; nothing was reserved or sent"),
            )
        template = self.templates.get(entry.effect or "")
        if template is None:
            template = self.templates[entry.effect or ""] = _core.Template(entry.effect or "")
        try:
            key = render_key(template, arguments)
            ttl = (
                (entry.approval_ttl or timedelta(minutes=15))
                if entry.decision == "approve"
                else None
            )
            spec = Spec(
                action,
                arguments,
                frozenset(),
                ttl,
                0.0,
                requested_by=self.requested_by,
                approvals_needed=getattr(entry, "approvals", None) or 1,
            )
        except CTRLRunError as exc:
            return Forwarded(action, None, "invalid", f"{exc}; nothing was sent")
        if ttl is not None and spec.left_out:
            return Forwarded(
                action,
                key,
                "invalid",
                (
                    f"action {action!r} needs approval, but its argument(s) "
                    f"{', '.join(spec.left_out)} have no canonical form; nothing was sent"
                ),
            )
        # The lease outlives the call's own bounds (at most two waits for a reconnection, then
        # the call), so a slow answer is never lapsed by another caller while this one still
        # waits for it.
        lease = max(DEFAULT_LEASE, timedelta(seconds=3 * timeout + 60))
        lease_us = int(lease / timedelta(microseconds=1))
        got: List[types.CallToolResult] = []
        sent: List[bool] = []

        async def send() -> Any:
            await self.upstream.alive(timeout)
            sent.append(True)
            try:
                result = await self._send(ctx, tool, arguments, timeout)
            except NotSent:
                sent.clear()  # proven never written: not sent after all
                raise
            got.append(result)
            if result.is_error:
                text = _result_text(result)
                if entry.on_tool_error == "failed":
                    raise NotExecuted(f"the upstream's tool error (on_tool_error: failed): {text}")
                raise UpstreamToolError(f"the upstream answered with a tool error: {text}")
            return result.model_dump(mode="json", by_alias=True, exclude_none=True)

        try:
            with observe(action, key) or UNOBSERVED as seen:
                try:
                    await _runner_async.run(Call(self.store, key, lease_us, spec), send, (), {})
                except DuplicateEffect as exc:
                    if not (not sent and entry.replay and replayable(exc)):
                        raise
                    assert exc.record is not None
                    stored = _stored_answer(exc.record.result)
                    if stored is None:  # not a tool's answer (a decorated function's value)
                        raise
                    seen.replayed = True  # the stored answer of the call that committed it
                    return Forwarded(action, key, "answered", answer=stored)
        except (ApprovalRequired, ActionDenied, DuplicateEffect, AmbiguousEffect) as exc:
            if sent:  # the outcome write was refused after the call went out
                return Forwarded(
                    action,
                    key,
                    "store",
                    (
                        f"the call was sent to the upstream, but recording its outcome was refused: {exc}; do not retry"
                    ),
                )
            return Forwarded(action, key, "refused", refusal=exc)
        except (NotExecuted, UpstreamToolError) as exc:
            if got:  # the upstream's tool error, with what was recorded for it
                return Forwarded(action, key, state_after(exc), answer=got[0])
            return Forwarded(
                action, key, state_after(exc), f"{exc}; recorded failed, a retry may run"
            )
        except CTRLRunError as exc:
            if got:  # the upstream ran it; its outcome could not be recorded
                return Forwarded(
                    action,
                    key,
                    "store",
                    (
                        f"the upstream ran the call, but recording its outcome failed: {exc}; do not retry"
                    ),
                )
            if sent:  # sent, no answer, and that could not be recorded either
                return Forwarded(
                    action,
                    key,
                    "store",
                    (
                        f"the call was sent to the upstream and no answer came, and recording its "
                        f"outcome failed: {exc}; whether it happened is unknown: do not retry"
                    ),
                )
            return Forwarded(action, key, "store", f"{exc}; nothing was sent")
        except Exception as exc:  # sent, and no answer: nobody knows whether it ran
            return Forwarded(
                action,
                key,
                "ambiguous",
                (
                    f"the call was sent to the upstream and no answer came ({brief(exc)}); "
                    f"{key} is recorded ambiguous: check whether it happened, then settle it with "
                    f"`ctrlrun resolve {key} --committed` or `--failed`; do not retry"
                ),
            )
        return Forwarded(action, key, "answered", answer=got[0])


async def upstream_tools(session: ClientSession) -> List[types.Tool]:
    """Every tool the upstream lists (all pages)."""
    tools: List[types.Tool] = []
    cursor: Optional[str] = None
    while True:
        page = await session.list_tools(
            params=types.PaginatedRequestParams(cursor=cursor) if cursor else None
        )
        tools.extend(page.tools)
        cursor = page.next_cursor
        if not cursor:
            return tools


def _stored_answer(value: Any) -> Optional[types.CallToolResult]:
    """The tool result a committed key stored, or ``None`` when what it stored is not one (a
    decorated function's return value, a key settled by a person)."""
    try:
        return types.CallToolResult.model_validate(value)
    except ValidationError:
        return None


def _result_text(result: types.CallToolResult) -> str:
    texts = [c.text for c in result.content if isinstance(c, types.TextContent)]
    text = " ".join(texts).strip() or json.dumps(result.structured_content, default=str)
    return text[:500]
