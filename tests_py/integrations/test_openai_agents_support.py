"""What the OpenAI Agents SDK cases share (no tests here): a scripted model (the SDK's own
``agents.testing.ScriptedModel``: no API key), a run without tracing, a tool built in either
decorator order from a body in the case's mode, and the outputs the model was given."""

from __future__ import annotations

import asyncio
import threading
from typing import Any, Callable, Dict, List, Sequence, Tuple, Union

from agents import Agent, RunConfig, RunHooks, Runner, function_tool
from agents.items import ToolCallOutputItem
from agents.testing import ScriptedModel, assistant_message, function_call

import ctrlrun
from ctrlrun.integrations import openai_agents as oa

#: What the SDK tells the model when a tool raised (the words a refusal must never get).
SDK_ERROR = "An error occurred while running the tool. Please try again."

#: The decorator orders: the integration's protect under / above @function_tool, the core's
#: protect above it (delegating to the integration), the core's protect under it (protected,
#: the SDK's words on a refusal).
ORDERS = ("under", "above", "core_above", "plain_under")

Call = Tuple[str, Dict[str, Any], str]  # (tool name, arguments, call id)
Turn = Union[str, Sequence[Call]]  # a final text, or the calls of one model response


def script(*turns: Turn) -> ScriptedModel:
    steps: List[Any] = []
    for turn in turns:
        if isinstance(turn, str):
            steps.append([assistant_message(turn)])
        else:
            steps.append([function_call(n, a, call_id=c) for n, a, c in turn])
    return ScriptedModel(steps)


def agent(tool: Any, *turns: Turn) -> Agent[Any]:
    return Agent(name="shop", model=script(*turns), tools=[tool])


def run(target: Agent[Any], given: Any, context: Any = None, hooks: Any = None) -> Any:
    """``Runner.run`` to its end (or its interruption), without exporting traces."""
    config = RunConfig(tracing_disabled=True)
    return asyncio.run(Runner.run(target, given, context=context, hooks=hooks, run_config=config))


def outputs(result: Any) -> List[Any]:
    """The tool outputs of a run, in order: what the model read."""
    return [i.output for i in result.new_items if isinstance(i, ToolCallOutputItem)]


def tool(mode: Any, order: str, name: str, body: Callable[..., Any], **options: Any) -> Any:
    """``body`` (made this mode's executor) as a FunctionTool protected in ``order``."""
    fn = mode.executor(body)
    if order == "under":
        return function_tool(oa.protect(name, **options)(fn))
    if order == "above":
        return oa.protect(name, **options)(function_tool(fn))
    if order == "core_above":
        return ctrlrun.protect(name, **options)(function_tool(fn))
    assert order == "plain_under", order
    return function_tool(ctrlrun.protect(name, **options)(fn))


class TwinSeen(RunHooks[Any]):
    """Sets ``seen`` once a tool call has been answered with ``prefix``: the real call's body
    waits on it, so its twin is refused while the body still runs."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.seen = threading.Event()
        self.ended: List[str] = []

    async def on_tool_end(self, context: Any, agent: Any, tool: Any, result: object) -> None:
        self.ended.append(str(result))
        if str(result).startswith(self.prefix):
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
