"""ctrlrun.integrations.crewai against real CrewAI crews (Crew, Agent, Task) driven by a scripted
LLM on CrewAI's LLM interface (no API key, no network), on SQLite and PostgreSQL, with sync and
async tool functions: the decorator order (with @tool, and a BaseTool subclass), what the model
is told of a refusal, two identical calls in one model response. Approvals are in
test_crewai_approvals.py (it uses the helpers here)."""

from __future__ import annotations

import logging
import time
from typing import Any, List, Tuple

import pytest
from crewai import Agent, Crew, Task
from crewai.tools import BaseTool, tool
from pydantic import BaseModel

import ctrlrun
from ctrlrun.integrations import crewai as cc
from tests_py.integrations.crewai_support import ScriptedLLM, call  # (sets the env first)

# under: protect under @tool; above: protect above @tool; core: ctrlrun.protect above @tool;
# class: a BaseTool subclass instance protected by ctrlrun.protect
HOWS = ["under", "above", "core", "class"]


class RefundInput(BaseModel):
    payment_id: str
    amount: int


class Shop:
    """A refund tool made one of the HOWS ways, of this mode, in a one-agent crew."""

    def __init__(
        self, how: str, mode: Any, store: ctrlrun.Store, *, seconds: float = 0.0, **options: Any
    ) -> None:
        self.runs: List[Tuple[str, int]] = []
        self.mode = mode
        options = {"effect": "refund:{payment_id}", "store": store, **options}
        runs = self.runs

        def refund(payment_id: str, amount: int) -> str:
            """Refund a payment."""
            runs.append((payment_id, amount))
            if seconds:
                time.sleep(seconds)
            return f"refunded {payment_id} {amount}"

        body = refund if how == "class" else mode.executor(refund)
        if how == "under":
            self.tool = tool("refund")(cc.protect("refund", **options)(body))
        elif how == "above":
            self.tool = cc.protect("refund", **options)(tool("refund")(body))
        elif how == "core":
            self.tool = ctrlrun.protect("refund", **options)(tool("refund")(body))
        else:

            class RefundTool(BaseTool):
                name: str = "refund"
                description: str = "Refund a payment."
                args_schema: type[BaseModel] = RefundInput

                def _run(self, payment_id: str, amount: int) -> str:
                    return body(payment_id, amount)

            self.tool = ctrlrun.protect("refund", **options)(RefundTool())
        assert isinstance(self.tool, BaseTool) and self.tool.name == "refund"
        if how != "under":  # never answered from CrewAI's tool cache
            assert self.tool.cache_function is cc.never_cached
        self.llm = ScriptedLLM()

    def run(self, *turns: Any) -> Any:
        self.llm.add(*turns)
        agent = Agent(
            role="support", goal="refund", backstory="a clerk", llm=self.llm, tools=[self.tool]
        )
        task = Task(description="refund the customer", expected_output="done", agent=agent)
        return Crew(agents=[agent], tasks=[task]).kickoff()

    def told(self, id: str) -> str:
        return self.llm.told[id]


@pytest.mark.parametrize("how", HOWS)
def test_either_order_protects_and_a_refusal_is_the_tools_result(store_url, mode, how, caplog):
    store = ctrlrun.open_store(store_url)
    shop = Shop(how, mode, store)
    caplog.set_level(logging.DEBUG)
    first = shop.run([call("refund", "c1", payment_id="pi_1", amount=5)])
    assert first.raw == "finished" and shop.told("c1") == "refunded pi_1 5"
    again = shop.run([call("refund", "c2", payment_id="pi_1", amount=5)])
    told = shop.told("c2")
    assert again.raw == "finished"
    assert told.startswith("already done: refund:pi_1 committed at ") and told.endswith(
        "; do not retry"
    )
    shop.run([call("refund", "c3", payment_id="pi_1", amount=6)])
    assert shop.told("c3").startswith("conflict: refund:pi_1 was already used")
    assert shop.runs == [("pi_1", 5)]
    assert store.get_effect("refund:pi_1").state.value == "committed"  # type: ignore[union-attr]
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]
    store.close()


def test_an_unknown_outcome_is_told_as_the_gateway_says(store_url, mode):
    store = ctrlrun.open_store(store_url)
    runs: List[str] = []

    @cc.protect("refund", effect="refund:{payment_id}", store=store)
    @tool("refund")
    @mode.executor
    def refund(payment_id: str) -> str:
        """Refund a payment."""
        runs.append(payment_id)
        raise RuntimeError("the card network timed out")

    llm = ScriptedLLM(
        [call("refund", "c1", payment_id="pi_1")], [call("refund", "c2", payment_id="pi_1")]
    )
    agent = Agent(role="support", goal="refund", backstory="a clerk", llm=llm, tools=[refund])
    Crew(
        agents=[agent], tasks=[Task(description="refund", expected_output="done", agent=agent)]
    ).kickoff()
    assert "the card network timed out" in llm.told["c1"]
    told = llm.told["c2"]
    assert told.startswith("outcome unknown: refund:pi_1 may or may not have happened")
    assert "a person must resolve it" in told and runs == ["pi_1"]
    assert store.get_effect("refund:pi_1").state.value == "ambiguous"  # type: ignore[union-attr]
    store.close()


@pytest.mark.parametrize("how", HOWS)
def test_two_identical_calls_in_one_response_run_once_and_none_is_cancelled(store_url, mode, how):
    store = ctrlrun.open_store(store_url)
    shop = Shop(how, mode, store, seconds=0.15)
    twins = [call("refund", "c1", payment_id="pi_1", amount=5)]
    twins.append(call("refund", "c2", payment_id="pi_1", amount=5))
    result = shop.run(twins)
    told = sorted([shop.told("c1"), shop.told("c2")])
    assert told[1] == "refunded pi_1 5"
    assert told[0].startswith(("in progress: refund:pi_1", "already done: refund:pi_1"))
    assert result.raw == "finished" and shop.runs == [("pi_1", 5)]
    row = store.get_effect("refund:pi_1")
    assert row is not None and row.state.value == "committed"
    store.close()
