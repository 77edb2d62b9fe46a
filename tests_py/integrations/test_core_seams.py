"""What the core does for every integration: parameters a framework injects are never part of a
call's identity (recognised by type, with the real frameworks' types), a function a framework
already registered is refused at decoration, a tool object is handed to its integration,
``replay`` gives back a tuple, and ``__ctrlrun__`` asks the approval standing for a call."""

from __future__ import annotations

from typing import Annotated, Any, NamedTuple, Optional, Tuple

import pytest
from agents import RunContextWrapper
from agents.tool_context import ToolContext
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import InjectedToolCallId
from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from pydantic_ai import Agent, FunctionToolset, RunContext
from pydantic_ai.models.test import TestModel

import ctrlrun
from ctrlrun.errors import EffectKeyError, InvalidArgument
from ctrlrun.integrations import mcp as ctrlrun_mcp
from ctrlrun.integrations import pydantic_ai as ctrlrun_pai
from ctrlrun.integrations._common import answering, protected, refusal_of


class Pair(NamedTuple):
    charge: str
    cents: int


def test_injected_parameters_are_not_the_calls_identity(store_url, mode):
    store = ctrlrun.open_store(store_url)
    runs = []

    def body(
        payment_id: str,
        amount: int,
        call_id: Annotated[str, InjectedToolCallId],
        config: Optional[RunnableConfig] = None,
        run: Optional[RunContext[None]] = None,
        wrapper: Optional[RunContextWrapper[None]] = None,
        tool: Optional[ToolContext[None]] = None,
        ctx: Optional[Context] = None,
    ) -> str:
        runs.append(call_id)
        return f"refunded {payment_id}"

    fn = ctrlrun.protect("r", effect="refund:{payment_id}", store=store, replay=True)(
        mode.executor(body)
    )
    assert mode.call(fn, "pi_1", 5, call_id="call_a", config={"tags": ["x"]}) == "refunded pi_1"
    # a retry: new call id, new config, new contexts; the same consequence, replayed
    again = mode.call(fn, "pi_1", 5, call_id="call_b", config={"tags": ["y"]}, run=object())
    assert again == "refunded pi_1" and runs == ["call_a"]
    row = store.get_effect("refund:pi_1")
    assert row is not None and row.state.value == "committed"
    with pytest.raises(ctrlrun.EffectConflict) as info:  # a real argument still conflicts
        mode.call(fn, "pi_1", 6, call_id="call_c")
    assert info.value.fields == ("amount",)
    store.close()


def test_an_approver_is_not_shown_injected_parameters(store_url):
    store = ctrlrun.open_store(store_url)

    @ctrlrun.protect("r", effect="refund:{payment_id}", store=store, decision="approve")
    def refund(payment_id: str, call_id: Annotated[str, InjectedToolCallId]) -> str:
        return "ok"

    with pytest.raises(ctrlrun.ApprovalRequired) as info:
        refund("pi_1", "call_a")
    assert info.value.arguments == {"payment_id": "pi_1"}
    about = protected(refund)
    assert about is not None and about.action == "r"
    record = about.approval("pi_1", "call_b")  # the same request stands for a new call id
    assert record is not None and record.request_id == info.value.request_id
    store.grant_approval(record.request_id, by="alice")
    assert about.approval("pi_1", "call_c").state.value == "granted"  # type: ignore[union-attr]
    assert refund("pi_1", "call_d") == "ok"
    store.close()


def test_a_key_cannot_name_an_injected_parameter():
    with pytest.raises(EffectKeyError, match="fills in"):

        @ctrlrun.protect("r", effect="refund:{call_id}")
        def refund(call_id: Annotated[str, InjectedToolCallId]) -> None: ...


def test_a_function_a_framework_registered_is_refused_naming_the_order():
    agent = Agent(TestModel())
    with pytest.raises(InvalidArgument, match=r"below @agent\.tool"):

        @ctrlrun.protect("r", effect="refund:{payment_id}")
        @agent.tool_plain
        def refund(payment_id: str) -> str:
            return "ok"

    server = MCPServer("shop")
    with pytest.raises(InvalidArgument, match=r"below @server.tool\(\)"):

        @ctrlrun.protect("r", effect="refund:{payment_id}")
        @server.tool()
        def refund2(payment_id: str) -> str:
            return "ok"

    @agent.tool_plain  # the right order: protected, and registered as the protected function
    @ctrlrun.protect("r", effect="refund:{payment_id}")
    def refund3(payment_id: str) -> str:
        return "ok"

    assert protected(refund3) is not None


# Held by the module: a registry a global of the frame that decorates.
MODULE_AGENT = Agent(TestModel())
MODULE_SERVER = MCPServer("module")


def test_a_registered_function_is_refused_wherever_the_frame_holds_its_registry():
    """The agent, toolset or server is found among the namespaces of the frames calling
    ``protect``: a module global, a variable of an enclosing function (the decorating
    function's closure, or a local of a caller still running), a class body's name."""
    order = r"below @agent\.tool|below @server\.tool\(\)"
    with pytest.raises(InvalidArgument, match=order):

        @ctrlrun.protect("r", effect="refund:{payment_id}")
        @MODULE_AGENT.tool_plain
        def global_agent(payment_id: str) -> str:
            return "ok"

    with pytest.raises(InvalidArgument, match=order):

        @ctrlrun.protect("r", effect="refund:{payment_id}")
        @MODULE_SERVER.tool()
        def global_server(payment_id: str) -> str:
            return "ok"

    def enclosing() -> None:
        agent, server, toolset = Agent(TestModel()), MCPServer("shop"), FunctionToolset()

        def closure() -> None:  # the registries are this frame's free variables
            with pytest.raises(InvalidArgument, match=order):

                @ctrlrun.protect("r", effect="refund:{payment_id}")
                @agent.tool_plain
                def on_agent(payment_id: str) -> str:
                    return "ok"

            with pytest.raises(InvalidArgument, match=order):

                @ctrlrun_pai.protect("r", effect="refund:{payment_id}")
                @toolset.tool_plain
                def on_toolset(payment_id: str) -> str:
                    return "ok"

            with pytest.raises(InvalidArgument, match=order):

                @ctrlrun_mcp.protect("r", effect="refund:{payment_id}")
                @server.tool()
                def on_server(payment_id: str) -> str:
                    return "ok"

        closure()

        def register(register_tool: Any) -> None:  # only the caller's frame holds the registry
            with pytest.raises(InvalidArgument, match=order):

                @ctrlrun.protect("r", effect="refund:{payment_id}")
                @register_tool
                def through_a_caller(payment_id: str) -> str:
                    return "ok"

        register(agent.tool_plain)
        register(server.tool())

    enclosing()

    with pytest.raises(InvalidArgument, match=order):

        class Tools:
            server = MCPServer("in a class")

            @ctrlrun.protect("r", effect="refund:{payment_id}")
            @server.tool()
            def in_a_class(payment_id: str) -> str:
                return "ok"


def test_replay_gives_back_the_tuple_a_function_returns(store_url, mode):
    store = ctrlrun.open_store(store_url)

    def pair(charge: str) -> Tuple[str, dict]:
        return ("done", {"charge": charge})

    def named(charge: str) -> Pair:
        return Pair(charge, 5)

    def plain(charge: str) -> list:
        return ["done", charge]

    for body, first in ((pair, ("done", {"charge": "c"})), (named, Pair("c", 5))):
        fn = ctrlrun.protect(
            body.__name__, effect=body.__name__ + ":{charge}", store=store, replay=True
        )(mode.executor(body))
        assert mode.call(fn, "c") == first
        again = mode.call(fn, "c")
        assert again == first and type(again) is type(first)
    fn = ctrlrun.protect("plain", effect="plain:{charge}", store=store, replay=True)(
        mode.executor(plain)
    )
    mode.call(fn, "c")
    assert mode.call(fn, "c") == ["done", "c"]  # a list stays a list
    store.close()


def test_refusal_words_are_the_gateways(store_url):
    store = ctrlrun.open_store(store_url)

    @ctrlrun.protect("r", effect="refund:{payment_id}", store=store)
    def refund(payment_id: str) -> str:
        return "ok"

    refund("pi_1")
    with pytest.raises(ctrlrun.DuplicateEffect) as info:
        refund("pi_1")
    said = refusal_of(info.value, "r")
    assert said is not None and said.kind == "committed" and not said.retryable
    assert said.text.startswith("already done: refund:pi_1 committed at ")
    assert said.text.endswith("; do not retry")
    assert said.payload["refused"] == "committed" and said.payload["attempt"] == 1
    with pytest.raises(EffectKeyError) as bad:
        refund("")
    invalid = refusal_of(bad.value, "r")
    assert invalid is not None and invalid.kind == "invalid" and invalid.retryable
    assert refusal_of(ValueError("the tool's own"), "r") is None
    store.close()


def test_a_nested_calls_refusal_is_the_tools_own_error(store_url, mode):
    """A refusal that came out of a body that ran is never told as this call's refusal."""
    store = ctrlrun.open_store(store_url)
    ran = []

    @ctrlrun.protect("email", effect="email:{to}", store=store)
    def email(to: str) -> str:
        return "sent"

    async def refund_body(payment_id: str, to: str) -> str:
        ran.append(payment_id)
        email(to)
        return "refunded"

    async def unreserved_body(to: str) -> str:
        email(to)
        return "sent again"

    refund = answering(
        ctrlrun.protect("refund", effect="refund:{payment_id}", store=store)(
            mode.executor(refund_body)
        ),
        lambda r: r,
    )
    with pytest.raises(EffectKeyError):  # email('') makes no key: the body ran, not refused
        mode.call(refund, "pi_1", "")
    assert ran == ["pi_1"] and store.get_effect("refund:pi_1").state.value == "ambiguous"
    email("a@x")
    notify = answering(ctrlrun.protect("notify")(mode.executor(unreserved_body)), lambda r: r)
    with pytest.raises(ctrlrun.DuplicateEffect):  # email:a@x is committed by the call above
        mode.call(notify, "a@x")
    said = mode.call(refund, "pi_1", "b@x")  # this call's own refusal is still told
    assert said.kind == "ambiguous"
    store.close()
