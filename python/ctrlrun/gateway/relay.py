"""What passes between the agent and the upstream besides tool calls: resources and prompts
(forwarded unchanged), the upstream's requests to the agent (sampling, elicitation, roots), its notifications (log
messages, changed tool, resource and prompt lists, updated resources), and the agent's own
(logging level, resource subscriptions, completions, changed roots).

The gateway holds one session with the upstream for its whole life, and serves one agent on
stdio or several over HTTP. A request or log message from the upstream goes to the agent whose
tool call is in flight (on that call's own channel, as the upstream sent it for that call);
with no call in flight it goes to the agent when there is exactly one. When calls of several
agents are in flight the upstream's request cannot be placed, and it gets an error rather
than a guess. Changed-list and updated-resource notifications go to every agent.

These are the handshake-era (2025) messages: the gateway speaks that protocol to the upstream.
"""

from __future__ import annotations

import logging
import warnings
from contextlib import contextmanager
from typing import Any, Callable, Dict, Iterator, List, Optional, Set, Tuple

import anyio
from mcp import types
from mcp.server.lowlevel import NotificationOptions
from mcp.shared.exceptions import MCPDeprecationWarning, MCPError
from mcp.shared.message import ServerMessageMetadata

from ctrlrun.gateway.upstream import Upstream

log = logging.getLogger("ctrlrun.gateway")

#: The upstream's notifications every agent is told of (the gateway's view changed too).
BROADCAST = (
    types.ToolListChangedNotification,
    types.ResourceListChangedNotification,
    types.PromptListChangedNotification,
    types.ResourceUpdatedNotification,
)


@contextmanager
def handshake_era() -> Iterator[None]:
    """Silence the SDK's warnings that these messages are deprecated at protocol 2026-07-28:
    the gateway relays them on purpose, for the agents and upstreams that speak 2025-11-25."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", MCPDeprecationWarning)
        yield


def _connection(session: Any) -> Any:
    """What identifies an agent: its connection. The SDK builds a ``ServerSession`` per
    request, all of one connection sharing it; it has no public name, hence the attribute."""
    return getattr(session, "_connection", session)


class Relay:
    """The agents the gateway serves and their requests in flight to the upstream, and the
    callbacks the upstream session and the gateway's server call. ``timeout`` bounds the
    wait for an agent's answer to an upstream request."""

    def __init__(self, timeout: float = 60.0) -> None:
        self.timeout = timeout
        self.agents: Dict[int, Any] = {}  # id(connection) -> that agent's latest session
        self.calls: Dict[int, Tuple[Any, Any]] = {}  # token -> (session, request id)
        self.subscribers: Dict[str, Set[int]] = {}  # resource URI -> the agents subscribed
        self.upstream: Any = None  # the gateway's ``Upstream``, once started
        self.level: Optional[types.SetLevelRequestParams] = None  # the log level set last
        self.tools_changed: Optional[Callable[[], None]] = None

    # the agents ------------------------------------------------------------------------------
    def saw(self, ctx: Any) -> None:
        """Note the agent behind a request (called for every request it makes); it is
        forgotten when its connection closes."""
        session = getattr(ctx, "session", None)
        if session is None:
            return
        connection = _connection(session)
        key = id(connection)
        if key not in self.agents:
            stack = getattr(connection, "exit_stack", None)
            if stack is not None:  # unwound by the SDK when the connection closes
                stack.push_async_callback(self._left, key)
        self.agents[key] = session

    async def _left(self, key: int) -> None:
        """An agent's connection closed: forget it and end the subscriptions only it held
        (within the timeout, and whatever the upstream says: this runs as the SDK closes the
        connection)."""
        self.agents.pop(key, None)
        for uri in [u for u, who in self.subscribers.items() if key in who]:
            try:
                with anyio.fail_after(self.timeout):
                    await self._drop_subscriber(uri, key)
            except Exception as exc:
                log.debug("the upstream subscription to %s not ended: %s", uri, exc)

    @contextmanager
    def calling(self, ctx: Any) -> Iterator[None]:
        """While a request of the agent behind ``ctx`` is with the upstream: the upstream's
        requests and log messages meanwhile belong to that agent."""
        self.saw(ctx)
        token = object()
        session = getattr(ctx, "session", None)
        if session is not None:
            self.calls[id(token)] = (session, getattr(ctx, "request_id", None))
        try:
            yield
        finally:
            self.calls.pop(id(token), None)

    def _target(self) -> Tuple[Any, Any]:
        """The agent session (and the request id it is for, or None) an upstream request goes
        to: the agent whose requests are in flight, on the channel of its most recent one;
        raises :class:`MCPError` when there is none or no way to choose."""
        calls = list(self.calls.values())
        if calls:
            if len({id(_connection(s)) for s, _ in calls}) > 1:
                raise MCPError(
                    types.INTERNAL_ERROR,
                    (
                        "ctrlrun gateway: requests of several agents are in flight, so it cannot "
                        "tell which agent this request is for"
                    ),
                )
            return calls[-1]
        if len(self.agents) == 1:
            return next(iter(self.agents.values())), None
        raise MCPError(
            types.INTERNAL_ERROR,
            (
                "ctrlrun gateway: no agent is connected"
                if not self.agents
                else "ctrlrun gateway: several agents are connected and none has a request in flight, "
                "so it cannot tell which agent this request is for"
            ),
        )

    async def _ask(
        self, request: Any, result_type: Any, capability: types.ClientCapabilities, what: str
    ) -> Any:
        """Send the upstream's ``request`` to the agent it belongs to; its answer, or the
        error to give the upstream."""
        try:
            session, request_id = self._target()
            if not session.check_client_capability(capability):
                return types.ErrorData(
                    code=types.INVALID_REQUEST,
                    message=(f"ctrlrun gateway: the agent does not support {what}"),
                )
            metadata = (
                ServerMessageMetadata(related_request_id=request_id)
                if request_id is not None
                else None
            )
            return await session.send_request(
                request, result_type, request_read_timeout_seconds=self.timeout, metadata=metadata
            )
        except MCPError as exc:
            return exc.error
        except Exception as exc:  # the agent went away, or answered with something invalid
            return types.ErrorData(
                code=types.INTERNAL_ERROR,
                message=(
                    f"ctrlrun gateway: the agent did not answer the {what} request ({exc})"[:500]
                ),
            )

    # the upstream asks the agent ---------------------------------------------------------------
    async def sampling(self, context: Any, params: types.CreateMessageRequestParams) -> Any:
        with_tools = params.tools is not None or params.tool_choice is not None
        needs = (
            types.SamplingCapability(tools=types.SamplingToolsCapability())
            if with_tools
            else types.SamplingCapability()
        )
        return await self._ask(
            types.CreateMessageRequest(params=params),
            types.CreateMessageResultWithTools if with_tools else types.CreateMessageResult,
            types.ClientCapabilities(sampling=needs),
            "sampling with tools" if with_tools else "sampling",
        )

    async def elicitation(self, context: Any, params: types.ElicitRequestParams) -> Any:
        return await self._ask(
            types.ElicitRequest(params=params),
            types.ElicitResult,
            types.ClientCapabilities(elicitation=types.ElicitationCapability()),
            "elicitation",
        )

    async def list_roots(self, context: Any) -> Any:
        return await self._ask(
            types.ListRootsRequest(),
            types.ListRootsResult,
            types.ClientCapabilities(roots=types.RootsCapability()),
            "roots",
        )

    # the upstream's notifications -------------------------------------------------------------
    async def logged(self, params: types.LoggingMessageNotificationParams) -> None:
        """A log message of the upstream's: to the agent whose call is in flight, else to
        every agent."""
        try:
            targets: List[Tuple[Any, Any]] = (
                [self._target()] if self.calls else [(s, None) for s in self.agents.values()]
            )
        except MCPError as exc:
            log.debug("upstream log message not relayed: %s", exc.error.message)
            return
        for session, request_id in targets:
            with handshake_era():  # at 2026-07-28 the SDK gates it by the request's opt-in
                sending = session.send_log_message(
                    params.level, params.data, params.logger, related_request_id=request_id
                )
            await self._deliver(session, sending)

    async def notified(self, message: Any) -> None:
        """The upstream's other notifications: changed lists go to every agent (a changed
        tool list also refreshes the gateway's own), an updated resource to the agents
        subscribed to it, a completed URL elicitation to the agent it is for."""
        if isinstance(message, types.ElicitCompleteNotification):
            try:
                session, request_id = self._target()
            except MCPError as exc:
                log.debug("elicitation completion not relayed: %s", exc.error.message)
                return
            await self._deliver(
                session, session.send_notification(message, related_request_id=request_id)
            )
            return
        if not isinstance(message, BROADCAST):
            return  # log messages, progress and cancellation have their own paths
        if isinstance(message, types.ToolListChangedNotification) and self.tools_changed:
            self.tools_changed()
        to = list(self.agents.items())
        if isinstance(message, types.ResourceUpdatedNotification):
            subscribed = self.subscribers.get(str(message.params.uri), set())
            to = [(key, s) for key, s in to if key in subscribed]
        for _, session in to:
            await self._deliver(session, session.send_notification(message))

    async def _deliver(self, session: Any, sending: Any) -> None:
        try:
            await sending
        except Exception as exc:  # that agent is gone: forget it
            log.debug("notification not delivered to an agent: %s", exc)
            self.agents.pop(id(_connection(session)), None)

    # the agent's messages for the upstream ----------------------------------------------------
    async def set_level(self, ctx: Any, params: types.SetLevelRequestParams) -> Any:
        """The upstream has one session: the level set last holds for every agent."""
        self.saw(ctx)
        result = await self.upstream.ask(
            lambda s: s.send_request(types.SetLevelRequest(params=params), types.EmptyResult)
        )
        self.level = params  # set again on a new connection
        return result

    async def subscribe(self, ctx: Any, params: types.SubscribeRequestParams) -> Any:
        """One subscription upstream per resource, whatever the number of agents on it."""
        self.saw(ctx)
        uri, key = str(params.uri), id(_connection(ctx.session))
        who = self.subscribers.setdefault(uri, set())
        if not who:
            with self.calling(ctx):
                await self.upstream.ask(
                    lambda s: s.send_request(
                        types.SubscribeRequest(params=params), types.EmptyResult
                    )
                )
        who.add(key)
        return types.EmptyResult()

    async def unsubscribe(self, ctx: Any, params: types.UnsubscribeRequestParams) -> Any:
        """Ends this agent's subscription; the upstream's ends with the last one."""
        self.saw(ctx)
        await self._drop_subscriber(str(params.uri), id(_connection(ctx.session)))
        return types.EmptyResult()

    async def _drop_subscriber(self, uri: str, key: int) -> None:
        who = self.subscribers.get(uri)
        if who is None or key not in who:
            return
        who.discard(key)
        if not who:
            del self.subscribers[uri]
            await self.upstream.ask(
                lambda s: s.send_request(
                    types.UnsubscribeRequest(params=types.UnsubscribeRequestParams(uri=uri)),
                    types.EmptyResult,
                )
            )

    async def restore(self) -> List[str]:
        """After a reconnection: set the new upstream session's log level as an agent set it
        last, and subscribe it to every resource an agent is still subscribed to; what it
        refused."""
        refused = []
        session = self.upstream.session
        if self.level is not None:
            try:
                await session.send_request(
                    types.SetLevelRequest(params=self.level), types.EmptyResult
                )
            except Exception:
                refused.append(f"the log level {self.level.level}")
        for uri in list(self.subscribers):
            try:
                await session.send_request(
                    types.SubscribeRequest(params=types.SubscribeRequestParams(uri=uri)),
                    types.EmptyResult,
                )
            except Exception:
                refused.append(uri)
        return refused

    async def complete(self, ctx: Any, params: types.CompleteRequestParams) -> Any:
        with self.calling(ctx):
            return await self.upstream.ask(
                lambda s: s.send_request(types.CompleteRequest(params=params), types.CompleteResult)
            )

    async def roots_changed(self, ctx: Any, params: Any) -> None:
        self.saw(ctx)
        try:
            await self.upstream.ask(
                lambda s: s.send_notification(types.RootsListChangedNotification())
            )
        except MCPError as exc:  # a notification has nobody to answer to
            log.debug("roots change not relayed: %s", exc.error.message)

    # wiring ---------------------------------------------------------------------------------
    def client_callbacks(self) -> Dict[str, Any]:
        """For the upstream's ``ClientSession``."""
        return dict(
            sampling_callback=self.sampling,
            elicitation_callback=self.elicitation,
            list_roots_callback=self.list_roots,
            logging_callback=self.logged,
            message_handler=self.notified,
        )

    def server_handlers(self, capabilities: types.ServerCapabilities) -> Dict[str, Any]:
        """The gateway server's handlers for what the upstream offers."""
        out: Dict[str, Any] = {"on_roots_list_changed": self.roots_changed}
        if capabilities.logging is not None:
            out["on_set_logging_level"] = self.set_level
        if capabilities.resources is not None and capabilities.resources.subscribe:
            out.update(
                on_subscribe_resource=self.subscribe, on_unsubscribe_resource=self.unsubscribe
            )
        if capabilities.completions is not None:
            out["on_completion"] = self.complete
        return out


class PassThrough:
    """Resources and prompts, forwarded unchanged (registered when the upstream offers them),
    on the upstream's current session (``ctrlrun.gateway.upstream.Upstream``: reconnected when it
    can be)."""

    def __init__(self, upstream: Upstream, relay: Relay) -> None:
        self.upstream = upstream
        self.relay = relay

    async def list_resources(self, ctx: Any, params: Any) -> types.ListResourcesResult:
        with self.relay.calling(ctx):
            return await self.upstream.ask(lambda s: s.list_resources(params=params))

    async def list_resource_templates(
        self, ctx: Any, params: Any
    ) -> types.ListResourceTemplatesResult:
        with self.relay.calling(ctx):
            return await self.upstream.ask(lambda s: s.list_resource_templates(params=params))

    async def read_resource(self, ctx: Any, params: types.ReadResourceRequestParams) -> Any:
        with self.relay.calling(ctx):
            return await self.upstream.ask(lambda s: s.read_resource(str(params.uri)))

    async def list_prompts(self, ctx: Any, params: Any) -> types.ListPromptsResult:
        with self.relay.calling(ctx):
            return await self.upstream.ask(lambda s: s.list_prompts(params=params))

    async def get_prompt(self, ctx: Any, params: types.GetPromptRequestParams) -> Any:
        with self.relay.calling(ctx):
            return await self.upstream.ask(lambda s: s.get_prompt(params.name, params.arguments))

    def handlers(self, capabilities: types.ServerCapabilities) -> Dict[str, Any]:
        out: Dict[str, Any] = {}
        if capabilities.resources is not None:
            out.update(
                on_list_resources=self.list_resources,
                on_list_resource_templates=self.list_resource_templates,
                on_read_resource=self.read_resource,
            )
        if capabilities.prompts is not None:
            out.update(on_list_prompts=self.list_prompts, on_get_prompt=self.get_prompt)
        return out


def notification_options(capabilities: types.ServerCapabilities) -> NotificationOptions:
    """The list-changed notifications the gateway announces: those the upstream does."""

    def changed(cap: Any) -> bool:
        return bool(cap is not None and getattr(cap, "list_changed", False))

    return NotificationOptions(
        prompts_changed=changed(capabilities.prompts),
        resources_changed=changed(capabilities.resources),
        tools_changed=changed(capabilities.tools),
    )
