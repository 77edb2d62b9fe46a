"""ctrlrun.integrations.smolagents against real smolagents agent loops (ToolCallingAgent and
CodeAgent) driven by a scripted ``Model`` (no API key), on SQLite and PostgreSQL: the decorator
orders, what the model is told of a refusal (no retry invitation, no error logged), two
identical calls in one step, a body that raised. Approvals and what smolagents adds to a run
(``additional_args``) are in test_smolagents_approvals.py (it uses the helpers here)."""

from __future__ import annotations

import io
import logging
import threading
import time
from typing import Any, Dict, List, Optional, Tuple

import pytest
from rich.console import Console
from smolagents import CodeAgent, Model, Tool, ToolCallingAgent, tool
from smolagents.memory import ActionStep
from smolagents.models import (
    ChatMessage,
    ChatMessageToolCall,
    ChatMessageToolCallFunction,
    MessageRole,
)
from smolagents.monitoring import AgentLogger, LogLevel

import ctrlrun
from ctrlrun.errors import InvalidArgument, NotExecuted
from ctrlrun.integrations import smolagents as smol

# smolagents' own warning for a function under @tool and another decorator (the docs say why)
pytestmark = pytest.mark.filterwarnings("ignore:Function 'refund' has decorators other than @tool")

#: How a refund tool is made: a function protected under @tool, a @tool protected above it, a
#: Tool subclass protected above ``class``, a Tool subclass's ``forward`` protected.
HOWS = ["under", "above", "class", "forward"]
ASYNC_HOWS = ["class", "forward"]  # (@tool itself refuses an async def function)


def call(tool_name: str, id: str, **args: Any) -> ChatMessageToolCall:
    fn = ChatMessageToolCallFunction(name=tool_name, arguments=args)
    return ChatMessageToolCall(function=fn, id=id, type="function")


class Scripted(Model):
    """A smolagents Model: each generate gets the next turn (a list of tool calls, all in one
    step, or code text for a CodeAgent); when none are left, the final answer."""

    def __init__(self, *turns: Any) -> None:
        super().__init__(model_id="scripted")
        self.turns = list(turns)

    def add(self, *turns: Any) -> None:
        self.turns.extend(turns)

    def generate(self, messages: Any, stop_sequences: Any = None, **kwargs: Any) -> ChatMessage:
        if self.turns:
            turn = self.turns.pop(0)
            if isinstance(turn, str):
                return ChatMessage(role=MessageRole.ASSISTANT, content=turn)
            return ChatMessage(role=MessageRole.ASSISTANT, content="", tool_calls=turn)
        done = [call("final_answer", "final", answer="finished")]
        return ChatMessage(role=MessageRole.ASSISTANT, content="", tool_calls=done)


class Shop:
    """A refund tool made one way (``how``), its body run ``mode``'s way, the calls it ran
    (``runs``), and agents over it whose log is kept (``log``)."""

    def __init__(
        self, how: str, mode: Any, store: ctrlrun.Store, seconds: float = 0.0, **options: Any
    ) -> None:
        self.runs: List[Tuple[str, int]] = []
        self.log = io.StringIO()
        self.fail: Optional[BaseException] = None
        options = {"effect": "refund:{payment_id}", "store": store, **options}
        runs, shop = self.runs, self

        async def body(payment_id: str, amount: int) -> str:
            """Refund part of a payment.

            Args:
                payment_id: the payment to refund
                amount: how much, in cents
            """
            runs.append((payment_id, amount))
            time.sleep(seconds)
            if shop.fail is not None:
                raise shop.fail
            return f"refunded {amount} on {payment_id}"

        run = mode.executor(body)
        self.tool: Any = self._make(how, run, options, mode.is_async)

    @staticmethod
    def _make(how: str, run: Any, options: Dict[str, Any], is_async: bool) -> Any:
        protect = smol.protect("stripe.refund", **options)
        if how == "under":

            @tool
            @protect
            def refund(payment_id: str, amount: int) -> str:
                """Refund part of a payment.

                Args:
                    payment_id: the payment to refund
                    amount: how much, in cents
                """
                return str(run(payment_id, amount))

            return refund
        if how == "above":

            @protect
            @tool
            def refund(payment_id: str, amount: int) -> str:
                """Refund part of a payment.

                Args:
                    payment_id: the payment to refund
                    amount: how much, in cents
                """
                return str(run(payment_id, amount))

            return refund
        inputs = {
            "payment_id": {"type": "string", "description": "the payment to refund"},
            "amount": {"type": "integer", "description": "how much, in cents"},
        }
        if is_async:

            class Refund(Tool):
                name = "refund"
                description = "Refund part of a payment."
                output_type = "string"

                async def forward(self, payment_id: str, amount: int) -> str:  # type: ignore[override]
                    return str(await run(payment_id, amount))

        else:

            class Refund(Tool):  # type: ignore[no-redef]
                name = "refund"
                description = "Refund part of a payment."
                output_type = "string"

                def forward(self, payment_id: str, amount: int) -> str:  # type: ignore[override]
                    return str(run(payment_id, amount))

        Refund.inputs = inputs
        if how == "class":
            return protect(Refund)()
        Refund.forward = protect(Refund.forward)  # type: ignore[method-assign]
        return Refund()

    def agent(self, *turns: Any, code: bool = False, **kwargs: Any) -> Any:
        logger = AgentLogger(LogLevel.DEBUG, Console(file=self.log, width=300))
        kind = CodeAgent if code else ToolCallingAgent
        return kind(tools=[self.tool], model=Scripted(*turns), logger=logger, **kwargs)


def observations(agent: Any) -> List[str]:
    """What the model was told after each action step; no step ended in an error."""
    steps = [s for s in agent.memory.steps if isinstance(s, ActionStep)]
    assert [s.error for s in steps] == [None] * len(steps), [s.error for s in steps]
    return [s.observations for s in steps]


def refund(id: str, payment_id: str = "pi_1", amount: int = 500) -> ChatMessageToolCall:
    return call("refund", id, payment_id=payment_id, amount=amount)


def no_retry_invitation(shop: Shop, caplog: Any) -> None:
    said = shop.log.getvalue()
    assert "Please try again" not in said and "Error executing tool" not in said
    assert "Traceback" not in said
    assert [r for r in caplog.records if r.levelno >= logging.ERROR] == []


def modes_of(how: str) -> List[str]:
    return ["sync", "async"] if how in ASYNC_HOWS else ["sync"]


CASES = [(how, m) for how in HOWS for m in modes_of(how)]


@pytest.fixture(params=CASES, ids=[f"{h}-{m}" for h, m in CASES])
def how_mode(request: Any) -> Tuple[str, Any]:
    from tests_py.support.modes import Mode

    how, mode = request.param
    return how, Mode(mode)


def test_a_duplicate_is_told_already_done_in_every_order(how_mode, store, caplog):
    how, mode = how_mode
    shop = Shop(how, mode, store)
    agent = shop.agent([refund("c1")], [refund("c2")])
    assert agent.run("refund pi_1") == "finished"
    first, second, _ = observations(agent)
    assert first == "refunded 500 on pi_1"
    assert second.startswith("already done: refund:pi_1 committed at ")
    assert second.endswith("; do not retry")
    assert shop.runs == [("pi_1", 500)]
    assert store.get_effect("refund:pi_1").state.value == "committed"
    no_retry_invitation(shop, caplog)


def test_a_later_run_is_refused_too(how_mode, store, caplog):
    how, mode = how_mode
    shop = Shop(how, mode, store)
    assert shop.agent([refund("c1")]).run("refund") == "finished"
    again = shop.agent([refund("c1", amount=700)])
    again.run("refund again")
    told = observations(again)[0]
    assert told.startswith("conflict: refund:pi_1 was already used with other arguments (amount")
    assert shop.runs == [("pi_1", 500)]
    no_retry_invitation(shop, caplog)


def test_parallel_twins_run_once_and_the_winner_is_kept(how_mode, store, caplog):
    how, mode = how_mode
    shop = Shop(how, mode, store, seconds=0.3)
    agent = shop.agent([refund("c1"), refund("c2")])
    agent.run("refund pi_1")
    told = observations(agent)[0].split("\n")
    assert len(told) == 2
    assert "refunded 500 on pi_1" in told
    twin = next(t for t in told if t != "refunded 500 on pi_1")
    assert twin.startswith("in progress: refund:pi_1 is being done by another call")
    assert twin.endswith("do not retry now")
    assert shop.runs == [("pi_1", 500)]
    assert store.get_effect("refund:pi_1").state.value == "committed"
    no_retry_invitation(shop, caplog)


def test_a_waiting_twin_gets_the_result_with_replay(store, caplog):
    from tests_py.support.modes import Mode

    shop = Shop("under", Mode("sync"), store, seconds=0.3, wait=10, replay=True)
    agent = shop.agent([refund("c1"), refund("c2")])
    agent.run("refund pi_1")
    assert observations(agent)[0].split("\n") == ["refunded 500 on pi_1"] * 2
    assert shop.runs == [("pi_1", 500)]


def test_an_unknown_outcome_is_for_a_person(how_mode, store, caplog):
    how, mode = how_mode
    shop = Shop(how, mode, store)
    shop.fail = RuntimeError("the provider timed out")
    agent = shop.agent([refund("c1")], [refund("c2")])
    agent.run("refund pi_1")
    steps = [s for s in agent.memory.steps if isinstance(s, ActionStep)]
    assert "the provider timed out" in str(steps[0].error)  # the tool's own error, smolagents'
    assert steps[1].error is None
    told = steps[1].observations
    assert told.startswith("outcome unknown: refund:pi_1 may or may not have happened; a person ")
    assert "ctrlrun resolve refund:pi_1" in told and "Please try again" not in told
    assert shop.runs == [("pi_1", 500)]
    assert store.get_effect("refund:pi_1").state.value == "ambiguous"


def test_not_executed_is_failed_and_a_retry_runs(store):
    from tests_py.support.modes import Mode

    shop = Shop("under", Mode("sync"), store)
    shop.fail = NotExecuted("card declined before charging")
    agent = shop.agent([refund("c1")])
    agent.run("refund pi_1")
    assert store.get_effect("refund:pi_1").state.value == "failed"
    shop.fail = None
    retry = shop.agent([refund("c1")])
    retry.run("again")
    assert observations(retry)[0] == "refunded 500 on pi_1"
    assert len(shop.runs) == 2
    assert store.get_effect("refund:pi_1").state.value == "committed"


def test_a_code_agent_is_told_too(store, caplog):
    from tests_py.support.modes import Mode

    shop = Shop("above", Mode("sync"), store)
    code = (
        "Thought: refund it\n<code>\nprint(refund(payment_id='pi_1', amount=500))\n"
        "print(refund(payment_id='pi_1', amount=500))\n</code>"
    )
    agent = shop.agent(code, "Thought: done\n<code>\nfinal_answer('finished')\n</code>", code=True)
    assert agent.run("refund pi_1") == "finished"
    told = observations(agent)[0]
    assert "refunded 500 on pi_1\nalready done: refund:pi_1 committed at " in told
    assert shop.runs == [("pi_1", 500)]
    no_retry_invitation(shop, caplog)


def test_what_would_run_unprotected_is_refused(store):
    @tool
    def refund_tool(payment_id: str) -> str:
        """Refund a payment.

        Args:
            payment_id: the payment
        """
        return payment_id

    protect = smol.protect("stripe.refund", effect="refund:{payment_id}", store=store)
    held = ToolCallingAgent(tools=[refund_tool], model=Scripted())
    with pytest.raises(InvalidArgument, match=r"already in the agent .*before giving it"):
        protect(refund_tool)
    assert held.tools["refund_tool"] is refund_tool
    made = protect(refund_tool.__class__())  # a tool no agent holds
    with pytest.raises(InvalidArgument, match="already protected"):
        protect(made)
    with pytest.raises(InvalidArgument, match="cannot be exported"):
        made.to_dict()
    from tests_py.support.modes import Mode

    with pytest.raises(InvalidArgument, match="cannot be exported"):
        Shop("class", Mode("sync"), store).tool.to_dict()
    with pytest.raises(InvalidArgument, match="must be a template str"):
        smol.protect("stripe.refund", effect=5)


def test_threads_never_share_a_loop(store):
    """An async body called from a thread that runs an event loop is awaited on a loop of
    its own."""
    import asyncio

    from tests_py.support.modes import Mode

    shop = Shop("class", Mode("async"), store)
    out: List[Any] = []

    async def inside_a_loop() -> None:
        out.append(shop.tool(payment_id="pi_9", amount=1))

    worker = threading.Thread(target=lambda: asyncio.run(inside_a_loop()))
    worker.start()
    worker.join()
    assert out == ["refunded 1 on pi_9"]
    assert store.get_effect("refund:pi_9").state.value == "committed"


@pytest.mark.parametrize("above", [False, True], ids=["under", "above"])
def test_the_core_protect_protects_in_either_order(store, above):
    """The core ``ctrlrun.protect`` is never silently off. Above ``@tool`` it hands the tool to
    this module (the core's seam knows smolagents' ``Tool``): refusals are the gateway's words,
    never the *args error. Under ``@tool`` it protects the function, and only its refusals are
    smolagents' errors, which is why the docs point to this module's protect."""
    runs: List[str] = []

    def refund(payment_id: str, amount: int) -> str:
        """Refund part of a payment.

        Args:
            payment_id: the payment to refund
            amount: how much, in cents
        """
        runs.append(payment_id)
        return "refunded"

    core = ctrlrun.protect("stripe.refund", effect="refund:{payment_id}", store=store)
    made = core(tool(refund)) if above else tool(core(refund))
    agent = ToolCallingAgent(tools=[made], model=Scripted(), verbosity_level=-1)
    agent.model.turns = [[call("refund", "c1", payment_id="pi_1", amount=5)]] * 2
    agent.run("refund")
    steps = [s for s in agent.memory.steps if isinstance(s, ActionStep)]
    assert steps[0].observations == "refunded"
    if above:
        assert steps[1].observations.startswith("already done") and steps[1].error is None
    else:
        assert "DuplicateEffect" in str(steps[1].error)
    assert runs == ["pi_1"]
