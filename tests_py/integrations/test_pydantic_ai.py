"""ctrlrun.integrations.pydantic_ai against a real pydantic-ai agent and its FunctionModel (no API
key), on SQLite and PostgreSQL, with sync and async tools: the decorator order, what the model
is told of a refusal, RunContext left out of a call's identity, two identical calls in one model
response, replay. The approvals are in test_pydantic_ai_approvals.py (it uses the helpers here)."""

from __future__ import annotations

import time
from typing import Any, Dict, List, Tuple

import pytest
from pydantic_ai import Agent, RunContext, Tool
from pydantic_ai.messages import ModelRequest, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.tools import DeferredToolRequests

import ctrlrun
from ctrlrun.errors import InvalidArgument
from ctrlrun.integrations import pydantic_ai as pai

HOWS = ["tool_plain", "tool", "Tool"]


def call(tool: str, id: str, **args: Any) -> ToolCallPart:
    return ToolCallPart(tool, args, tool_call_id=id)


class Script:
    """A FunctionModel's function: each model request gets the next turn's tool calls (all in
    one response, so they run in parallel); when none are left, a text that ends the run."""

    def __init__(self, *turns: List[ToolCallPart]) -> None:
        self.turns = list(turns)

    def add(self, *turns: List[ToolCallPart]) -> None:
        self.turns.extend(turns)

    def __call__(self, messages: List[Any], info: AgentInfo) -> ModelResponse:
        if self.turns:
            return ModelResponse(parts=list(self.turns.pop(0)))
        return ModelResponse(parts=[TextPart("finished")])


def returns(result: Any) -> Dict[str, ToolReturnPart]:
    """The tool returns of a run's new messages, by tool call id."""
    return {
        p.tool_call_id: p
        for m in result.new_messages()
        if isinstance(m, ModelRequest)
        for p in m.parts
        if isinstance(p, ToolReturnPart)
    }


class Shop:
    """A refund tool registered on an agent one of three ways (``how``): a function under
    ``@agent.tool_plain``, one taking ``RunContext`` under ``@agent.tool``, or a ``Tool``
    object protected by the core ``ctrlrun.protect`` (which hands it to the integration).
    ``approvals``: the agent's :class:`pai.Approvals` capability (``True``: a default one)."""

    def __init__(
        self,
        how: str,
        mode: Any,
        store: ctrlrun.Store,
        *turns: List[ToolCallPart],
        approvals: Any = True,
        seconds: float = 0.0,
        **options: Any,
    ) -> None:
        self.runs: List[Tuple[str, int]] = []
        self.script = Script(*turns)
        self.mode = mode
        options = {"effect": "refund:{payment_id}", "store": store, **options}
        runs, wait = self.runs, self._wait

        async def plain(payment_id: str, amount: int) -> str:
            runs.append((payment_id, amount))
            await wait(seconds)
            return f"refunded {payment_id} {amount}"

        async def with_ctx(ctx: RunContext[Any], payment_id: str, amount: int) -> str:
            assert isinstance(ctx, RunContext)
            return await plain(payment_id, amount)

        tools = []
        if how == "Tool":
            made = ctrlrun.protect("refund", **options)(Tool(mode.executor(plain), name="refund"))
            assert isinstance(made, Tool)
            tools.append(made)
        self.agent: Agent[Any, Any] = Agent(
            FunctionModel(self.script),
            output_type=[str, DeferredToolRequests],
            tools=tools,
            capabilities=[pai.Approvals() if approvals is True else approvals] if approvals else [],
        )
        if how == "tool_plain":
            self.tool = pai.protect("refund", **options)(mode.executor(plain))
            self.agent.tool_plain(name="refund")(self.tool)
        elif how == "tool":
            self.tool = pai.protect("refund", **options)(mode.executor(with_ctx))
            self.agent.tool(name="refund")(self.tool)
        else:
            self.tool = tools[0].function

    def _wait(self, seconds: float) -> Any:
        return self.mode.to_thread(time.sleep, seconds) if seconds else self.mode.pause()

    def run(self, *turns: List[ToolCallPart], **kwargs: Any) -> Any:
        self.script.add(*turns)
        if "message_history" not in kwargs:
            kwargs["user_prompt"] = "refund the customer"
        return self.agent.run_sync(**kwargs)


def test_protect_above_the_agents_decorator_is_refused_naming_the_order():
    agent = Agent(FunctionModel(Script()))
    with pytest.raises(InvalidArgument, match=r"below @agent\.tool / @agent\.tool_plain"):

        @pai.protect("refund", effect="refund:{payment_id}")
        @agent.tool_plain
        def refund(payment_id: str) -> str:
            return "ok"

    with pytest.raises(InvalidArgument, match=r"below @agent\.tool / @agent\.tool_plain"):

        @pai.protect("refund", effect="refund:{payment_id}")
        @agent.tool
        def refund_ctx(ctx: RunContext[None], payment_id: str) -> str:
            return "ok"

    def refund_tool(payment_id: str) -> str:
        return "ok"

    held = Tool(refund_tool)
    holder = Agent(FunctionModel(Script()), tools=[held])
    with pytest.raises(InvalidArgument, match="already in"):
        ctrlrun.protect("refund", effect="refund:{payment_id}")(held)
    assert holder.name is None  # (the agent holds the tool meanwhile)
    fresh = ctrlrun.protect("refund", effect="refund:{payment_id}")(Tool(refund_tool))
    assert isinstance(fresh, Tool) and fresh.name == "refund_tool"
    assert pai.protected(fresh.function) is not None


@pytest.mark.parametrize("how", HOWS)
def test_a_refusal_is_a_tool_return_and_the_run_goes_on(store_url, mode, how):
    store = ctrlrun.open_store(store_url)
    shop = Shop(how, mode, store)
    first = shop.run([call("refund", "c1", payment_id="pi_1", amount=5)])
    assert returns(first)["c1"].content == "refunded pi_1 5" and first.output == "finished"
    # the model asks again, in a new run: the refusal is what it reads, the run finishes
    again = shop.run([call("refund", "c2", payment_id="pi_1", amount=5)])
    told = returns(again)["c2"]
    assert told.outcome == "success" and again.output == "finished"
    assert told.content.startswith("already done: refund:pi_1 committed at ")
    assert told.content.endswith("; do not retry")
    conflict = shop.run([call("refund", "c3", payment_id="pi_1", amount=6)])
    assert returns(conflict)["c3"].content.startswith("conflict: refund:pi_1 was already used")
    assert shop.runs == [("pi_1", 5)]
    assert store.get_effect("refund:pi_1").state.value == "committed"  # type: ignore[union-attr]
    store.close()


def test_plain_ctrlrun_protect_under_the_decorator_keeps_protecting(store_url, mode):
    store = ctrlrun.open_store(store_url)
    runs: List[str] = []
    for approvals in (False, True):
        script = Script()
        agent = Agent(FunctionModel(script), capabilities=[pai.Approvals()] if approvals else [])

        @agent.tool_plain
        @mode.protect("refund", effect="refund:{payment_id}", store=store)
        def refund(payment_id: str) -> str:
            runs.append(payment_id)
            return "refunded"

        script.add([call("refund", "c1", payment_id="pi_1")])
        if not approvals:
            assert returns(agent.run_sync("go"))["c1"].content == "refunded"
            script.add([call("refund", "c2", payment_id="pi_1")])
            with pytest.raises(ctrlrun.DuplicateEffect):  # pydantic-ai ends the run with it
                agent.run_sync("go")
        else:  # the capability answers the core's refusal as the integration does
            assert returns(agent.run_sync("go"))["c1"].content.startswith("already done:")
    assert runs == ["pi_1"]
    store.close()


def test_arguments_that_make_no_key_ask_the_model_to_retry(store_url, mode):
    store = ctrlrun.open_store(store_url)
    shop = Shop("tool_plain", mode, store)
    result = shop.run(
        [call("refund", "c1", payment_id="", amount=5)],
        [call("refund", "c2", payment_id="pi_1", amount=5)],
    )
    told = returns(result)
    assert told["c1"].outcome == "retried" and "refused:" in str(told["c1"].content)
    assert told["c2"].content == "refunded pi_1 5" and result.output == "finished"
    assert shop.runs == [("pi_1", 5)]
    store.close()


def test_a_body_that_did_nothing_lets_the_model_retry(store_url, mode):
    store = ctrlrun.open_store(store_url)
    script = Script()
    agent = Agent(FunctionModel(script))
    tries: List[int] = []

    @agent.tool_plain
    @pai.protect("refund", effect="refund:{payment_id}", store=store)
    @mode.executor
    def refund(payment_id: str) -> str:
        tries.append(1)
        if len(tries) == 1:
            raise ctrlrun.NotExecuted("the card network refused the connection")
        return "refunded"

    script.add([call("refund", "c1", payment_id="pi_1")], [call("refund", "c2", payment_id="pi_1")])
    told = returns(agent.run_sync("go"))
    assert told["c1"].outcome == "retried" and told["c2"].content == "refunded"
    assert "failed: the card network refused the connection; refund:pi_1 recorded failed" in str(
        told["c1"].content
    )
    row = store.get_effect("refund:pi_1")
    assert row is not None and row.state.value == "committed" and row.attempt == 2
    store.close()


def test_run_context_is_not_part_of_a_calls_identity(store_url, mode):
    store = ctrlrun.open_store(store_url)
    for replay in (False, True):
        key = f"pi_{replay}"
        shop = Shop("tool", mode, store, replay=replay)
        shop.run([call("refund", "a", payment_id=key, amount=5)])
        # a retry in a new run: new RunContext, run id, tool call id, retry count
        told = returns(shop.run([call("refund", "b", payment_id=key, amount=5)]))["b"].content
        if replay:
            assert told == f"refunded {key} 5"  # replayed, not a conflict
        else:
            assert told.startswith(f"already done: refund:{key} committed")
        assert shop.runs == [(key, 5)]
        row = store.get_effect(f"refund:{key}")
        assert row is not None and row.state.value == "committed" and row.attempt == 1
    store.close()


@pytest.mark.parametrize("how", HOWS)
def test_two_identical_calls_in_one_response_run_once_and_none_is_cancelled(store_url, mode, how):
    store = ctrlrun.open_store(store_url)
    shop = Shop(how, mode, store, seconds=0.15)
    twins = [call("refund", "c1", payment_id="pi_1", amount=5)]
    twins.append(call("refund", "c2", payment_id="pi_1", amount=5))
    result = shop.run(twins)
    told = sorted(str(p.content) for p in returns(result).values())
    assert told[1] == "refunded pi_1 5"
    assert told[0].startswith(("in progress: refund:pi_1", "already done: refund:pi_1"))
    assert result.output == "finished" and shop.runs == [("pi_1", 5)]
    row = store.get_effect("refund:pi_1")
    assert row is not None and row.state.value == "committed"  # not ambiguous
    store.close()


def test_replay_gives_back_the_stored_value_a_tuple_as_a_tuple(store_url, mode):
    store = ctrlrun.open_store(store_url)
    runs: List[str] = []
    script = Script()
    agent = Agent(FunctionModel(script))

    def refund(payment_id: str) -> Tuple[str, Dict[str, int]]:
        runs.append(payment_id)
        return ("refunded", {"cents": 500})

    agent.tool_plain(
        pai.protect("refund", effect="refund:{payment_id}", store=store, replay=True)(
            mode.executor(refund)
        )
    )
    script.add([call("refund", "c1", payment_id="pi_1")])
    first = returns(agent.run_sync("go"))["c1"].content
    script.add([call("refund", "c2", payment_id="pi_1")])
    again = returns(agent.run_sync("go"))["c2"].content
    assert first == again == ("refunded", {"cents": 500}) and type(again) is tuple
    assert runs == ["pi_1"]
    store.close()
