"""What the Claude Agent SDK tests share: a protected ``refund`` tool and one real agent session
(the SDK's ``query`` driving its bundled Claude Code CLI) against the scripted Messages API of
tests_py/support/anthropic_scripted.py on loopback. No network, no key."""

from __future__ import annotations

import asyncio
from typing import Any, Dict, List, Optional

from claude_agent_sdk import (
    ClaudeAgentOptions,
    ResultMessage,
    ToolAnnotations,
    create_sdk_mcp_server,
    query,
    tool,
)

from ctrlrun.integrations import claude_agent_sdk as cas
from tests_py.support.anthropic_scripted import ScriptedMessages, text, tool_use

SERVER = "pay"
REFUND = f"mcp__{SERVER}__refund"
SCHEMA = {"payment_id": str, "amount": int}


def refund_tool(
    runs: List[Dict[str, Any]],
    fail: Optional[BaseException] = None,
    parallel: bool = False,
    **options: Any,
):
    """An ``@tool`` refund protected above ``@tool``; each run of its body is kept in ``runs``.
    ``parallel``: annotated read-only, which the CLI runs concurrently with its twin (it runs
    other tools of one turn one after the other); its body then takes a second."""
    hints = ToolAnnotations(readOnlyHint=True) if parallel else None

    @cas.protect("stripe.refund", **{"effect": "refund:{payment_id}", **options})
    @tool("refund", "Refund a payment.", SCHEMA, annotations=hints)
    async def refund(args: Dict[str, Any]) -> Dict[str, Any]:
        runs.append(dict(args))
        await asyncio.sleep(1.0 if parallel else 0.05)
        if fail is not None:
            raise fail
        return {"content": [{"type": "text", "text": f"refunded {args['payment_id']}"}]}

    return refund


def session(
    tmp_path: Any,
    tools: List[Any],
    turns: List[List[Dict[str, Any]]],
    *,
    approvals: Optional[cas.Approvals] = None,
    hooks: bool = True,
    can_use_tool: bool = False,
    allowed: bool = True,
) -> ScriptedMessages:
    """Run one session to its end: the model's ``turns``, then "done". Returns the server (what
    the model was told: ``api.result_text(call_id)``). The session must end in success."""
    with ScriptedMessages(turns) as api:
        env = api.env()
        env["CLAUDE_CONFIG_DIR"] = str(tmp_path / "claude-config")
        options = ClaudeAgentOptions(
            mcp_servers={SERVER: create_sdk_mcp_server(SERVER, tools=tools)},
            allowed_tools=[f"mcp__{SERVER}__{t.name}" for t in tools] if allowed else [],
            env=env,
            cwd=str(tmp_path),
            max_turns=len(turns) + 2,
            setting_sources=[],
        )
        if approvals is not None and hooks:
            options.hooks = approvals.hooks()  # type: ignore[assignment]
        if approvals is not None and can_use_tool:
            options.can_use_tool = approvals.can_use_tool

        async def drive() -> List[Any]:
            return [m async for m in query(prompt="refund pi_1", options=options)]

        messages = asyncio.run(asyncio.wait_for(drive(), 90))
    (result,) = [m for m in messages if isinstance(m, ResultMessage)]
    assert not result.is_error, result
    assert api.other == []  # the CLI reached nothing but the scripted Messages API
    return api


def refund_call(payment_id: str = "pi_1", amount: int = 500, call_id: Optional[str] = None):
    return tool_use(REFUND, {"payment_id": payment_id, "amount": amount}, call_id)


__all__ = ["refund_tool", "session", "refund_call", "text", "REFUND"]
