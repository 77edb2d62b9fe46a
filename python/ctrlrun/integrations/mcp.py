"""ctrlrun in MCP servers built on the MCP SDK's ``MCPServer`` (mcp 2.x; ``pip install
'ctrlrun[mcp]'``).

* :func:`protect` goes under ``@server.tool()``, next to the function (``@server.tool()``
  registers the function it is given and hands that same function back, so a decorator above
  it would wrap a copy the server never calls: :func:`ctrlrun.protect` refuses that order at
  decoration, naming this one). :func:`tool` registers and protects in one decorator.
* A refusal is the tool's result, never a raised exception: a ``CallToolResult`` with
  ``isError`` set, the gateway's one line of text and ``structuredContent`` ``{"ctrlrun":
  ...}``, as ``ctrlrun gateway`` answers (:mod:`ctrlrun.call.refusals`). The server
  logs no traceback for it. A body that raises :class:`ctrlrun.NotExecuted` (recorded
  ``failed``: a retry may run) is answered the same way.
* The MCP ``Context`` a tool is handed is never part of its key, fingerprint or approval
  (:mod:`ctrlrun.call.injected`).
* An approval still pending is answered ``waiting for approval <id>: ...``; with
  ``approval_url`` the person is also sent to the page where they approve, through a URL-mode
  elicitation (MCP 2025-11-25 ``elicitation/create`` mode ``url``; on 2026-07-28 connections
  the same request inside an ``InputRequiredResult``), after which the call is tried once more.
  The grant itself is only ever recorded by that page or ``ctrlrun approve``
  (``store.grant_approval``), never from the MCP client's answer: see docs/integrations/mcp.md.
"""

from __future__ import annotations

import functools
import inspect
import logging
import string
from typing import (
    TYPE_CHECKING,
    Any,
    Callable,
    Dict,
    List,
    NamedTuple,
    Optional,
    TypeVar,
    Union,
    cast,
)
from urllib.parse import quote

from ctrlrun.call.protect import protect as _protect
from ctrlrun.errors import InvalidArgument, NotExecuted
from ctrlrun.integrations._common import Refusal, Refused, answering, key_or_none, protected

if TYPE_CHECKING:
    from mcp.server import MCPServer
    from mcp.types import CallToolResult, Icon, InputRequiredResult, ToolAnnotations

__all__ = ["protect", "tool", "ApprovalUrl"]

F = TypeVar("F", bound=Callable[..., Any])

#: Where a person approves a request: a URL template (``{request_id}``, ``{action}``,
#: ``{effect_key}``, each URL-quoted), or a function of the request id giving the URL.
ApprovalUrl = Union[str, Callable[[str], str]]

log = logging.getLogger("ctrlrun.integrations.mcp")

# The Context parameter added to a tool that elicits for an approval but takes no Context.
_CONTEXT = "ctrlrun_context"
# The key of the approval's URL elicitation among an InputRequiredResult's input requests.
_ASKED = "ctrlrun_approval"
# The first protocol revision that carries elicitation inside an InputRequiredResult.
_INPUT_REQUIRED = "2026-07-28"
_URL_FIELDS = frozenset({"request_id", "action", "effect_key"})


def _result(text: str, payload: Dict[str, Any]) -> CallToolResult:
    """The gateway's tool error (imported when one is made: it needs the MCP SDK)."""
    from ctrlrun.gateway.results import error_result

    return error_result(text, payload)


def _answer(refusal: Refusal, **extra: Any) -> CallToolResult:
    """The tool result for a refusal: the gateway's words and payload (plus ``extra``)."""
    return _result(refusal.text, {**refusal.payload, **extra})


def _url_maker(action: str, approval_url: Optional[ApprovalUrl]) -> Optional[Callable[..., str]]:
    if approval_url is None:
        return None
    if callable(approval_url):
        made = approval_url
        return lambda request_id, effect_key: str(made(request_id))
    if not isinstance(approval_url, str) or not approval_url:
        raise InvalidArgument(
            f"protect({action!r}): approval_url is a URL template or a function of the request "
            f"id, got {approval_url!r}"
        )
    try:
        named = {f for _, f, _, _ in string.Formatter().parse(approval_url) if f is not None}
    except ValueError as exc:
        raise InvalidArgument(
            f"protect({action!r}): approval_url {approval_url!r}: {exc}"
        ) from None
    unknown = sorted(named - _URL_FIELDS)
    if unknown:
        raise InvalidArgument(
            f"protect({action!r}): approval_url names {', '.join(unknown)}; it may name only "
            f"{{request_id}}, {{action}} and {{effect_key}}"
        )
    template = approval_url

    def make(request_id: str, effect_key: Optional[str]) -> str:
        fill = {"request_id": request_id, "action": action, "effect_key": effect_key or ""}
        return template.format_map({k: quote(v, safe="") for k, v in fill.items()})

    return make


def _context_parameter(fn: Callable[..., Any]) -> Optional[str]:
    """The name of the parameter the SDK hands the ``Context`` to, as the SDK finds it."""
    from mcp.server.mcpserver.utilities.context_injection import find_context_parameter

    return find_context_parameter(fn)


def _with_context(wrapper: Callable[..., Any], fn: Callable[..., Any]) -> None:
    """Give ``wrapper`` a keyword-only ``Context`` parameter ``fn`` lacks (the SDK fills it)."""
    from mcp.server.mcpserver import Context

    try:
        signature = inspect.signature(fn, eval_str=True)
    except Exception:  # an annotation that does not resolve here: the SDK will say so
        signature = inspect.signature(fn)
    params = list(signature.parameters.values())
    if _CONTEXT in signature.parameters:
        raise InvalidArgument(f"{fn.__qualname__}: the parameter name {_CONTEXT!r} is ctrlrun's")
    extra = inspect.Parameter(
        _CONTEXT, inspect.Parameter.KEYWORD_ONLY, default=None, annotation=Context
    )
    at = len(params)
    if params and params[-1].kind is inspect.Parameter.VAR_KEYWORD:
        at -= 1
    params.insert(at, extra)
    wrapper.__signature__ = signature.replace(parameters=params)  # type: ignore[attr-defined]
    wrapper.__annotations__ = {**getattr(fn, "__annotations__", {}), _CONTEXT: Context}


class _Ask(NamedTuple):
    """A URL-mode elicitation to send before answering (a handshake-era connection)."""

    message: str
    url: str
    request_id: str


def _waiting(refusal: Refusal, url: str, answer: Optional[str] = None) -> CallToolResult:
    extra: Dict[str, Any] = {"approval_url": url}
    if answer is not None:
        extra["elicitation"] = answer
    return _answer(refusal, **extra)


class _Approval:
    """How a pending approval of one tool is put to a person: a URL-mode elicitation."""

    def __init__(self, action: str, url: Callable[..., str]) -> None:
        self.action = action
        self.url = url

    def answer(
        self, refusal: Refusal, ctx: Any
    ) -> Union[CallToolResult, InputRequiredResult, _Ask]:
        """What the client is given for ``refusal``: its result; on a 2026-07-28 connection
        first the elicitation, inside an ``InputRequiredResult`` (the client retries the call
        with the answer); on an earlier one an :class:`_Ask` to send before answering."""
        if refusal.kind != "approval_required":
            return _answer(refusal)
        rid = str(refusal.payload.get("request_id"))
        key = refusal.payload.get("effect_key")
        url = self.url(rid, key)
        if ctx is None or not _opens_urls(ctx):
            return _waiting(refusal, url)
        message = (
            f"{self.action} waits for a person's approval (ctrlrun request {rid}, effect "
            f"{key}): approve or deny it on this page"
        )
        if not _input_required(ctx):
            return _Ask(message, url, rid)
        asked = (_responses(ctx) or {}).get(_ASKED)
        if asked is not None:  # the call again, after the elicitation
            return _waiting(refusal, url, _action_of(asked))
        return _ask(message, url, rid)

    def after(self, out: Any, ask: _Ask, said: Optional[str]) -> Any:
        """What the call answers after the elicitation ``ask``: ``out``, its value (or its
        refusal's result: a call still refused)."""
        if not isinstance(out, Refused):
            return out
        if out.refusal.kind != "approval_required":
            return _answer(out.refusal)
        return _waiting(out.refusal, ask.url, said)


def _opens_urls(ctx: Any) -> bool:
    try:
        caps = ctx.client_capabilities
    except Exception:  # a Context outside a request
        return False
    return bool(caps is not None and caps.elicitation is not None and caps.elicitation.url)


def _input_required(ctx: Any) -> bool:
    from mcp_types.version import is_version_at_least

    version = ctx.protocol_version
    return isinstance(version, str) and is_version_at_least(version, _INPUT_REQUIRED)


def _responses(ctx: Any) -> Optional[Dict[str, Any]]:
    found = ctx.input_responses
    return dict(found) if found else None


def _action_of(answer: Any) -> Optional[str]:
    action = getattr(answer, "action", None)
    return action if isinstance(action, str) else None


def _ask(message: str, url: str, rid: str) -> InputRequiredResult:
    from mcp import types

    request = types.ElicitRequest(
        params=types.ElicitRequestURLParams(message=message, url=url, elicitation_id=rid)
    )
    return types.InputRequiredResult(input_requests={_ASKED: request})


async def _elicit(ctx: Any, ask: _Ask) -> Optional[str]:
    """The client's answer to the URL elicitation (accept: the person opens the page)."""
    try:
        answer = await ctx.elicit_url(ask.message, ask.url, ask.request_id)
    except Exception as exc:  # a client or transport that cannot ask: answered as without
        log.debug("approval %s: URL elicitation not sent: %s", ask.request_id, exc)
        return None
    return _action_of(answer)


def _elicit_from_thread(ctx: Any, ask: _Ask) -> Optional[str]:
    import anyio.from_thread

    try:  # a sync tool runs on the SDK's worker thread; the session is on its event loop
        return anyio.from_thread.run(_elicit, ctx, ask)
    except RuntimeError as exc:  # not on an anyio worker thread: nobody to ask
        log.debug("approval %s: URL elicitation not sent: %s", ask.request_id, exc)
        return None


def _not_executed(exc: NotExecuted, action: str, key: Optional[str]) -> CallToolResult:
    done = f"{key} recorded failed (nothing was done)" if key else "nothing was done"
    return _result(
        f"failed: {exc}; {done}, so a retry may run",
        {"action": action, "effect_key": key, "outcome": "failed"},
    )


def _mcp_tool(
    guarded: Callable[..., Any], fn: Callable[..., Any], make_url: Optional[Callable[..., str]]
) -> Callable[..., Any]:
    """``guarded`` (a protected ``fn``) as an MCP tool function: refusals are its results."""
    about = protected(guarded)
    action = about.action if about is not None else getattr(fn, "__qualname__", "tool")
    approval = _Approval(action, make_url) if make_url is not None else None
    inner = answering(guarded, Refused)
    own_ctx = _context_parameter(fn) if approval is not None else None
    added = approval is not None and own_ctx is None

    def context(kwargs: Dict[str, Any]) -> Any:
        if added:
            return kwargs.pop(_CONTEXT, None)
        return kwargs.get(own_ctx) if own_ctx is not None else None

    def first(out: Any, ctx: Any) -> Any:
        """What the call answers: its value, its refusal's result, or an :class:`_Ask` to send
        the person before answering (then :meth:`_Approval.after`)."""
        if not isinstance(out, Refused):
            return out
        if approval is None:
            return _answer(out.refusal)
        return approval.answer(out.refusal, ctx)

    # Twins but for ``await``: a sync tool runs on the SDK's worker thread, an async one on
    # its event loop, and each asks the person from where it runs.
    if inspect.iscoroutinefunction(guarded):

        @functools.wraps(guarded)
        async def mcp_tool_async(*args: Any, **kwargs: Any) -> Any:
            ctx = context(kwargs)
            try:
                out = await inner(*args, **kwargs)
                step = first(out, ctx)
                if approval is None or not isinstance(step, _Ask):  # (only an approval asks)
                    return step
                said = await _elicit(ctx, step)
                if said == "accept":  # the person may have decided meanwhile
                    out = await inner(*args, **kwargs)
                return approval.after(out, step, said)
            except NotExecuted as exc:
                return _not_executed(exc, action, key_or_none(about, args, kwargs))

        tool_fn: Callable[..., Any] = mcp_tool_async
    else:

        @functools.wraps(guarded)
        def mcp_tool_sync(*args: Any, **kwargs: Any) -> Any:
            ctx = context(kwargs)
            try:
                out = inner(*args, **kwargs)
                step = first(out, ctx)
                if approval is None or not isinstance(step, _Ask):  # (only an approval asks)
                    return step
                said = _elicit_from_thread(ctx, step)
                if said == "accept":
                    out = inner(*args, **kwargs)
                return approval.after(out, step, said)
            except NotExecuted as exc:
                return _not_executed(exc, action, key_or_none(about, args, kwargs))

        tool_fn = mcp_tool_sync

    if added:
        _with_context(tool_fn, fn)
    return tool_fn


def protect(
    name: str, *, approval_url: Optional[ApprovalUrl] = None, **options: Any
) -> Callable[[F], F]:
    """:func:`ctrlrun.protect` for a tool of an ``MCPServer``, placed under ``@server.tool()``.

    ``options`` are :func:`ctrlrun.protect`'s keyword arguments. The function the server
    registers answers a refusal with a ``CallToolResult`` (``isError``, the gateway's text,
    ``structuredContent["ctrlrun"]``) instead of raising, so the client gets words it can act
    on and the server logs no traceback; anything else the body raises is left to the SDK.
    Sync stays sync, async stays async; the signature is the function's.

    ``approval_url``: where a person approves a pending request (a template naming
    ``{request_id}``, or a function of the request id). When the client can open URLs
    (``elicitation.url``), it is sent there by a URL-mode elicitation, and the call is tried
    once more when it answers; the result's ``structuredContent["ctrlrun"]`` carries the URL
    (``approval_url``) and the client's answer (``elicitation``). A tool that takes no MCP
    ``Context`` gets a keyword-only ``ctrlrun_context`` parameter for it (filled by the SDK,
    never part of the call's identity).

    Above ``@server.tool()`` it raises ``InvalidArgument`` naming this order: the server
    would call the unprotected function."""

    make_url = _url_maker(name, approval_url)
    protect_as = _protect(name, **options)

    def decorate(fn: F) -> F:
        return cast(F, _mcp_tool(protect_as(fn), fn, make_url))

    return decorate


def tool(
    server: MCPServer,
    name: str,
    *,
    tool_name: Optional[str] = None,
    title: Optional[str] = None,
    description: Optional[str] = None,
    annotations: Optional[ToolAnnotations] = None,
    icons: Optional[List[Icon]] = None,
    meta: Optional[Dict[str, Any]] = None,
    structured_output: Optional[bool] = None,
    approval_url: Optional[ApprovalUrl] = None,
    **options: Any,
) -> Callable[[F], F]:
    """Register the decorated function as ``server``'s tool, protected as action ``name``:
    ``@server.tool(...)`` over :func:`protect` in one decorator. ``tool_name`` (default: the
    function's name), ``title``, ``description``, ``annotations``, ``icons``, ``meta`` and
    ``structured_output`` are ``server.tool()``'s; ``approval_url`` and ``options`` are
    :func:`protect`'s."""

    def decorate(fn: F) -> F:
        registered = protect(name, approval_url=approval_url, **options)(fn)
        server.add_tool(
            registered,
            name=tool_name,
            title=title,
            description=description,
            annotations=annotations,
            icons=icons,
            meta=meta,
            structured_output=structured_output,
        )
        return registered

    return decorate
