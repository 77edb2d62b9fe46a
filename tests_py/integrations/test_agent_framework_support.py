"""What the Microsoft Agent Framework cases share (no tests here): a scripted chat client on the
framework's own chat-client interface (``BaseChatClient`` with its function-invocation layer:
real ``Agent`` runs, no API key), a tool built in either decorator order from a body in the
case's mode, and what the model was told."""

from __future__ import annotations

import asyncio
import threading
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

from agent_framework import (
    Agent,
    BaseChatClient,
    ChatResponse,
    Content,
    FunctionInvocationLayer,
    FunctionMiddleware,
    Message,
    tool,
)

from ctrlrun.integrations import agent_framework as af

#: What the framework tells the model when a function raised (never a refusal's words).
FRAMEWORK_ERROR = "Error: Function failed."

#: The decorator orders: the integration's protect under / above @tool, and under no @tool at
#: all (a plain function given to the Agent, which makes it a FunctionTool itself).
ORDERS = ("under", "above", "bare")

Call = Tuple[str, Dict[str, Any], str]  # (function name, arguments, call id)
Turn = Union[str, Sequence[Call]]  # a final text, or the calls of one model response


class ScriptedClient(FunctionInvocationLayer[Any], BaseChatClient[Any]):
    """A chat client answering each request with the next scripted turn; ``seen`` keeps the
    messages of every request (what the model was told)."""

    def __init__(self, turns: Sequence[Turn]) -> None:
        super().__init__()
        self.turns: List[Turn] = list(turns)
        self.seen: List[List[Message]] = []

    async def _inner_get_response(self, *, messages: Any, stream: bool, options: Any, **kw: Any):
        assert not stream
        self.seen.append(list(messages))
        turn = self.turns.pop(0)
        if isinstance(turn, str):
            return ChatResponse(messages=[Message(role="assistant", contents=[turn])])
        calls = [Content.from_function_call(call_id=c, name=n, arguments=a) for n, a, c in turn]
        return ChatResponse(messages=[Message(role="assistant", contents=calls)])


def agent(made: Any, *turns: Turn, middleware: Optional[List[Any]] = None) -> Agent:
    return Agent(client=ScriptedClient(turns), tools=[made], middleware=middleware)


def run(target: Agent, given: Any, session: Any = None) -> Any:
    """``agent.run`` to its end (or its pause for a person)."""
    return asyncio.run(target.run(given, session=session))


def answer(target: Agent, responses: List[Content], session: Any) -> Any:
    """The paused run resumed with a person's approval responses."""
    return run(target, [Message(role="user", contents=responses)], session)


def told(target: Agent) -> List[str]:
    """The function results the model was given in its last request, in order."""
    client = target.client
    assert isinstance(client, ScriptedClient)
    return [
        str(c.result) for m in client.seen[-1] for c in m.contents if c.type == "function_result"
    ]


def make(mode: Any, order: str, name: str, body: Callable[..., Any], **options: Any) -> Any:
    """``body`` (made this mode's executor) as a tool protected in ``order``."""
    approval_mode = options.pop("approval_mode", None)
    fn = mode.executor(body)
    if order == "under":
        return tool(af.protect(name, **options)(fn), approval_mode=approval_mode)
    if order == "above":
        return af.protect(name, **options)(tool(fn, approval_mode=approval_mode))
    assert order == "bare" and approval_mode is None, order
    return af.protect(name, **options)(fn)


class TwinSeen(FunctionMiddleware):
    """Sets ``seen`` once a function call has been answered with ``prefix``: the real call's
    body waits on it, so its twin is refused while the body still runs."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.seen = threading.Event()

    async def process(self, context: Any, call_next: Callable[[], Any]) -> None:
        await call_next()
        for item in context.result or ():
            if str(getattr(item, "text", "") or "").startswith(self.prefix):
                self.seen.set()


async def wait_for(event: threading.Event, mode: Any, timeout: float = 10.0) -> None:
    """In a body: until ``event`` is set (a thread's wait in sync mode, polled in async)."""
    if not mode.is_async:
        assert event.wait(timeout)
        return
    for _ in range(int(timeout / 0.005)):
        if event.is_set():
            return
        await asyncio.sleep(0.005)
    raise AssertionError("the twin was never answered")
