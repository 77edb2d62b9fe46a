"""What the LlamaIndex cases share (no tests here): a scripted function-calling model on
LlamaIndex's own LLM interface (``MockFunctionCallingLLM`` given a response generator: no API
key), a real ``FunctionAgent`` run driven to its end (answering the events a person would),
a tool built in each order from a body in the case's mode, and what the model was told."""

from __future__ import annotations

import asyncio
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

from llama_index.core.agent.workflow import FunctionAgent, ToolCallResult
from llama_index.core.base.llms.types import ChatMessage, MessageRole, ToolCallBlock
from llama_index.core.llms import MockFunctionCallingLLM
from llama_index.core.tools import FunctionTool

import ctrlrun
from ctrlrun.integrations import llama_index as li

#: How a tool is made: the integration's protect on the function (the agent makes the tool of
#: it, or FunctionTool.from_defaults does), on the FunctionTool, and the core's protect on the
#: function (protected; LlamaIndex words a refusal as the exception's text, an error).
ORDERS = ("agent_tools", "from_defaults", "above", "plain_core")

Call = Tuple[str, Dict[str, Any], str]  # (tool name, arguments, call id)
Turn = Union[str, Sequence[Call]]  # a final text, or the calls of one model response


class Script:
    """The model: each turn answers with the next text or tool calls; ``told`` is every tool
    message it was sent, in order."""

    def __init__(self, *turns: Turn) -> None:
        self.turns = list(turns)
        self.told: List[str] = []

    def __call__(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatMessage:
        self.told = [str(m.content) for m in messages if m.role == MessageRole.TOOL]
        turn = self.turns.pop(0) if self.turns else "done"
        if isinstance(turn, str):
            return ChatMessage(role="assistant", content=turn)
        blocks = [ToolCallBlock(tool_call_id=c, tool_name=n, tool_kwargs=a) for n, a, c in turn]
        return ChatMessage(role="assistant", blocks=blocks)  # type: ignore[arg-type]

    def llm(self) -> MockFunctionCallingLLM:
        return MockFunctionCallingLLM(response_generator=self, is_chat_model=True)


def agent(tools: Sequence[Any], *turns: Turn) -> Tuple[FunctionAgent, Script]:
    script = Script(*turns)
    return FunctionAgent(name="shop", tools=list(tools), llm=script.llm()), script


#: A person at the stream: given an event, the event to send back (or None).
Person = Callable[[Any], Optional[Any]]


class Run:
    """One run's record: the events streamed, the tool results, the final output."""

    def __init__(self) -> None:
        self.events: List[Any] = []
        self.results: List[ToolCallResult] = []
        self.output: Any = None

    def of(self, cls: type) -> List[Any]:
        return [e for e in self.events if isinstance(e, cls)]

    def said(self) -> List[str]:
        """The tool outputs, in the order they were produced."""
        return [str(r.tool_output.content) for r in self.results]


async def arun(target: Any, person: Optional[Person] = None, **kw: Any) -> Run:
    record = Run()
    handler = target.run(user_msg="go", **kw)
    async for ev in handler.stream_events():
        record.events.append(ev)
        if isinstance(ev, ToolCallResult):
            record.results.append(ev)
        answer = None if person is None else person(ev)
        if answer is not None:
            handler.ctx.send_event(answer)  # type: ignore[union-attr]
    record.output = await handler
    return record


def run(target: Any, person: Optional[Person] = None, timeout: float = 30) -> Run:
    """The agent's run to its end (a hung run fails the case instead of the suite)."""
    return asyncio.run(asyncio.wait_for(arun(target, person), timeout))


def approver(approved: Optional[bool], by: str = "ann", note: Optional[str] = None) -> Person:
    """A person answering every ApprovalRequested with ``approved``."""

    def answer(ev: Any) -> Optional[Any]:
        if isinstance(ev, li.ApprovalRequested):
            return li.ApprovalDecision(
                request_id=ev.request_id, approved=approved, by=by, note=note
            )
        return None

    return answer


def tool(mode: Any, order: str, name: str, body: Callable[..., Any], **options: Any) -> Any:
    """``body`` (made this mode's executor) protected in ``order``: a function or FunctionTool."""
    fn = mode.executor(body)
    if order == "agent_tools":
        return li.protect(name, **options)(fn)
    if order == "from_defaults":
        return FunctionTool.from_defaults(fn=li.protect(name, **options)(fn))
    if order == "above":
        return li.protect(name, **options)(FunctionTool.from_defaults(fn=fn))
    assert order == "plain_core", order
    return FunctionTool.from_defaults(fn=ctrlrun.protect(name, **options)(fn))
