"""ctrlrun.integrations.strands against real Strands Agents loops driven by a scripted model on
Strands' model interface (no API key), on SQLite and PostgreSQL, with sync and async tools: the
decorator order, what the model is told of a refusal, ToolContext/Agent left out of a call's
identity, two identical calls in one model turn. Approvals and interrupts are in
test_strands_approvals.py (it uses the helpers here)."""

from __future__ import annotations

import logging
import time
from typing import Any, List, Tuple

import pytest
from strands import Agent, ToolContext, tool
from strands.tools.decorator import DecoratedFunctionTool

import ctrlrun
from ctrlrun.integrations import strands as cs
from tests_py.integrations.strands_support import ScriptedModel, call, results

# under: protect under @tool; above: protect above @tool; core: ctrlrun.protect above @tool
HOWS = ["under", "above", "core"]


class Shop:
    """A refund tool made one of the HOWS ways, of this mode (sync or async), on an agent
    driven by a scripted model; ``context``: the tool takes ``tool_context`` and ``agent``."""

    def __init__(
        self,
        how: str,
        mode: Any,
        store: ctrlrun.Store,
        *,
        hooks: Any = (),
        seconds: float = 0.0,
        context: bool = False,
        **options: Any,
    ) -> None:
        self.runs: List[Tuple[str, int]] = []
        self.seen: List[Any] = []
        self.mode = mode
        options = {"effect": "refund:{payment_id}", "store": store, **options}
        runs, seen, wait = self.runs, self.seen, self._wait

        async def plain(payment_id: str, amount: int) -> str:
            """Refund a payment.

            Args:
                payment_id: the payment
                amount: how much
            """
            runs.append((payment_id, amount))
            await wait(seconds)
            return f"refunded {payment_id} {amount}"

        async def with_context(
            payment_id: str, amount: int, tool_context: ToolContext, agent: Agent
        ) -> str:
            """Refund a payment."""
            seen.append((tool_context.tool_use["toolUseId"], agent))
            return await plain(payment_id, amount)

        body = mode.executor(with_context if context else plain)
        body.__name__ = "refund"
        made = tool(context=context)
        if how == "under":
            self.tool = made(cs.protect("refund", **options)(body))
        elif how == "above":
            self.tool = cs.protect("refund", **options)(made(body))
        else:
            self.tool = ctrlrun.protect("refund", **options)(made(body))
        assert isinstance(self.tool, DecoratedFunctionTool) and self.tool.tool_name == "refund"
        self.model = ScriptedModel()
        self.agent = Agent(
            model=self.model, tools=[self.tool], hooks=list(hooks), callback_handler=None
        )

    def _wait(self, seconds: float) -> Any:
        return self.mode.to_thread(time.sleep, seconds) if seconds else self.mode.pause()

    def run(self, *turns: Any, prompt: Any = "refund the customer") -> Any:
        self.model.add(*turns)
        return self.agent(prompt)

    def told(self, id: str) -> str:
        answer = results(self.agent)[id]
        assert answer["status"] == "success", answer
        return str(answer["text"])


@pytest.mark.parametrize("how", HOWS)
def test_either_order_protects_and_a_refusal_is_the_tools_result(store_url, mode, how, caplog):
    store = ctrlrun.open_store(store_url)
    shop = Shop(how, mode, store)
    caplog.set_level(logging.DEBUG)
    first = shop.run([call("refund", "c1", payment_id="pi_1", amount=5)])
    assert first.stop_reason == "end_turn" and shop.told("c1") == "refunded pi_1 5"
    # the model asks again: the refusal is what it reads, the run finishes
    again = shop.run([call("refund", "c2", payment_id="pi_1", amount=5)])
    told = shop.told("c2")
    assert again.stop_reason == "end_turn"
    assert told.startswith("already done: refund:pi_1 committed at ") and told.endswith(
        "; do not retry"
    )
    shop.run([call("refund", "c3", payment_id="pi_1", amount=6)])
    assert shop.told("c3").startswith("conflict: refund:pi_1 was already used")
    assert shop.runs == [("pi_1", 5)]
    assert store.get_effect("refund:pi_1").state.value == "committed"  # type: ignore[union-attr]
    # no traceback, no ERROR log for a refusal: it is an answer
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]
    store.close()


def test_an_unknown_outcome_is_told_as_the_gateway_says(store_url, mode):
    store = ctrlrun.open_store(store_url)
    runs: List[str] = []

    @cs.protect("refund", effect="refund:{payment_id}", store=store)
    @tool
    @mode.executor
    def refund(payment_id: str) -> str:
        """Refund a payment."""
        runs.append(payment_id)
        raise RuntimeError("the card network timed out")

    model = ScriptedModel([call("refund", "c1", payment_id="pi_1")])
    model.add([call("refund", "c2", payment_id="pi_1")])
    agent = Agent(model=model, tools=[refund], callback_handler=None)
    assert agent("go").stop_reason == "end_turn"
    told = results(agent)
    assert told["c1"]["status"] == "error" and "the card network timed out" in told["c1"]["text"]
    assert told["c2"]["status"] == "success"
    assert told["c2"]["text"].startswith(
        "outcome unknown: refund:pi_1 may or may not have happened"
    )
    assert "a person must resolve it" in told["c2"]["text"] and runs == ["pi_1"]
    assert store.get_effect("refund:pi_1").state.value == "ambiguous"  # type: ignore[union-attr]
    store.close()


def test_a_body_that_did_nothing_lets_the_model_retry(store_url, mode):
    store = ctrlrun.open_store(store_url)
    tries: List[int] = []

    @tool
    @cs.protect("refund", effect="refund:{payment_id}", store=store)
    @mode.executor
    def refund(payment_id: str) -> str:
        """Refund a payment."""
        tries.append(1)
        if len(tries) == 1:
            raise ctrlrun.NotExecuted("the card network refused the connection")
        return "refunded"

    model = ScriptedModel([call("refund", "c1", payment_id="pi_1")])
    model.add([call("refund", "c2", payment_id="pi_1")])
    agent = Agent(model=model, tools=[refund], callback_handler=None)
    agent("go")
    told = results(agent)
    assert told["c1"]["status"] == "error" and "refused the connection" in told["c1"]["text"]
    assert told["c2"]["text"] == "refunded"
    row = store.get_effect("refund:pi_1")
    assert row is not None and row.state.value == "committed" and row.attempt == 2
    store.close()


@pytest.mark.parametrize("how", ["under", "above"])
def test_tool_context_and_agent_are_not_part_of_a_calls_identity(store_url, mode, how):
    store = ctrlrun.open_store(store_url)
    shop = Shop(how, mode, store, context=True)
    shop.run([call("refund", "a", payment_id="pi_1", amount=5)])
    # a retry in a new turn: a new ToolContext (another tool use id), same agent
    shop.run([call("refund", "b", payment_id="pi_1", amount=5)])
    assert shop.told("a") == "refunded pi_1 5"
    assert shop.told("b").startswith("already done: refund:pi_1 committed")
    assert [s[0] for s in shop.seen] == ["a"] and shop.seen[0][1] is shop.agent
    # the model was never shown the injected parameters
    schema = shop.tool.tool_spec["inputSchema"]["json"]
    assert sorted(schema["properties"]) == ["amount", "payment_id"]
    row = store.get_effect("refund:pi_1")
    assert row is not None and row.state.value == "committed" and row.attempt == 1
    store.close()


@pytest.mark.parametrize("how", HOWS)
def test_two_identical_calls_in_one_turn_run_once_and_none_is_cancelled(store_url, mode, how):
    store = ctrlrun.open_store(store_url)
    shop = Shop(how, mode, store, seconds=0.15)
    twins = [call("refund", "c1", payment_id="pi_1", amount=5)]
    twins.append(call("refund", "c2", payment_id="pi_1", amount=5))
    result = shop.run(twins)
    told = sorted([shop.told("c1"), shop.told("c2")])
    assert told[1] == "refunded pi_1 5"
    assert told[0].startswith(("in progress: refund:pi_1", "already done: refund:pi_1"))
    assert result.stop_reason == "end_turn" and shop.runs == [("pi_1", 5)]
    row = store.get_effect("refund:pi_1")
    assert row is not None and row.state.value == "committed"  # not ambiguous
    store.close()
