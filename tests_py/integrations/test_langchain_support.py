"""Helpers of the LangChain/LangGraph integration tests (no tests here): tools made in either
decorator order for a ``mode``, tool calls, and a LangGraph agent (an ``agent`` node asking a
fake chat model, a prebuilt ``ToolNode``, ``tools_condition``) that records what the model
was given each turn."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any, Callable, Dict, List, Optional, Sequence

from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.tools import BaseTool, tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition

import ctrlrun
from ctrlrun.integrations import langchain as lc
from tests_py.support.modes import Mode

ORDERS = ("above", "below", "core_above")


def make_tool(
    mode: Mode, order: str, name: str, body: Callable[..., Any], **options: Any
) -> BaseTool:
    """``body`` (a plain function with a docstring) as a tool of ``mode``, protected in
    ``order``: ``above`` (the integration's protect above @tool), ``below`` (under @tool),
    ``core_above`` (``ctrlrun.protect`` above @tool), ``core_below`` (plain protect under
    @tool, refusals raised)."""
    fn = mode.executor(body)
    tool_options = {k: options.pop(k) for k in ("response_format",) if k in options}
    as_tool = tool(**tool_options)
    if order == "above":
        return lc.protect(name, **options)(as_tool(fn))
    if order == "below":
        return as_tool(lc.protect(name, **options)(fn))
    if order == "core_above":
        return ctrlrun.protect(name, **options)(as_tool(fn))
    assert order == "core_below", order
    return as_tool(ctrlrun.protect(name, **options)(fn))


def call(name: str, args: Dict[str, Any], call_id: Optional[str] = None) -> Dict[str, Any]:
    """A model's tool call, as ``invoke`` takes it."""
    return {"type": "tool_call", "id": call_id or uuid.uuid4().hex, "name": name, "args": args}


def invoke(mode: Mode, t: BaseTool, value: Any) -> Any:
    """``t.invoke(value)``, or ``t.ainvoke(value)`` run to its end."""
    if mode.is_async:
        return asyncio.run(t.ainvoke(value))
    return t.invoke(value)


def asks(*calls: Dict[str, Any]) -> AIMessage:
    """A model turn asking for ``calls`` (made with :func:`call`), in one message."""
    return AIMessage("", tool_calls=[{k: c[k] for k in ("id", "name", "args")} for c in calls])


class Agent:
    """A LangGraph agent over ``tools`` whose model answers ``turns`` in order; ``seen`` holds
    the messages the model was given, each time it was asked."""

    def __init__(
        self, tools: Sequence[BaseTool], turns: Sequence[BaseMessage], checkpoint: bool = False
    ) -> None:
        self.model = FakeMessagesListChatModel(responses=list(turns))
        self.seen: List[List[BaseMessage]] = []
        graph = StateGraph(MessagesState)
        graph.add_node("agent", self._agent)
        graph.add_node("tools", ToolNode(list(tools)))
        graph.add_edge(START, "agent")
        graph.add_conditional_edges("agent", tools_condition)
        graph.add_edge("tools", "agent")
        self.graph = graph.compile(checkpointer=InMemorySaver() if checkpoint else None)
        self.config: Dict[str, Any] = {"configurable": {"thread_id": uuid.uuid4().hex}}

    def _agent(self, state: MessagesState) -> Dict[str, Any]:
        self.seen.append(list(state["messages"]))
        return {"messages": [self.model.invoke(state["messages"])]}

    def run(self, mode: Mode, value: Any = None, **config: Any) -> Dict[str, Any]:
        """One run of the graph (``value``: the input, or a ``Command`` resuming it)."""
        return run_graph(mode, self.graph, value, {**self.config, **config})

    def told(self) -> List[ToolMessage]:
        """The tool messages the model was last given."""
        return [m for m in self.seen[-1] if isinstance(m, ToolMessage)]


def run_graph(mode: Mode, graph: Any, value: Any, config: Dict[str, Any]) -> Dict[str, Any]:
    """``graph.invoke`` (or ``ainvoke``, run to its end); ``value`` ``None``: a first message."""
    value = {"messages": [HumanMessage("go")]} if value is None else value
    if mode.is_async:
        return asyncio.run(graph.ainvoke(value, config))  # type: ignore[no-any-return]
    return graph.invoke(value, config)  # type: ignore[no-any-return]
