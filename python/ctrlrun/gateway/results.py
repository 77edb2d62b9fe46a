"""What the gateway answers an agent: every forwarded call ends in one :class:`Forwarded` value,
and :func:`answer` maps it, in one place, to the MCP tool result: the upstream's own answer, or
a result with ``isError`` set, one line of text an LLM can act on, and a structured ``ctrlrun``
payload a program can read."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, Optional

from mcp import types

from ctrlrun.call.refusals import refusal_of


@dataclass(frozen=True)
class Forwarded:
    """What became of one tool call. ``kind``:

    * ``answered``: the upstream's answer (``answer``), passed on as it is: recorded
      ``committed``, replayed from the committed key, or an unreserved call's;
    * ``refused``: nothing was sent; ``refusal`` is the exception (a duplicate, an approval
      still pending, a denial...);
    * ``failed``: recorded ``failed`` (proof that it never ran, or the upstream's tool error
      under ``on_tool_error: failed``, then in ``answer``);
    * ``ambiguous``: sent, and whether it happened is unknown (the upstream's tool error in
      ``answer``, or no answer at all, ``why``);
    * ``store``, ``invalid``, ``policy``, ``upstream``: not forwarded, or its outcome not
      recorded, for the reason ``why``.
    """

    action: str
    key: Optional[str]
    kind: str
    why: str = ""
    answer: Optional[types.CallToolResult] = None
    refusal: Optional[Exception] = None


def answer(f: Forwarded) -> types.CallToolResult:
    """The agent's tool result for ``f``."""
    if f.kind == "answered" and f.answer is not None:
        return f.answer
    if f.kind == "refused" and f.refusal is not None:
        return refusal_result(f.action, f.key, f.refusal)
    if f.answer is not None and f.key is not None:  # the upstream's tool error, recorded
        return forwarded_error(f.answer, f.action, f.key, f.kind)
    return not_forwarded(f.action, f.key, f.kind, f.why)


def error_result(text: str, payload: Dict[str, Any]) -> types.CallToolResult:
    """A tool error: ``text`` for the model, ``payload`` as ``structuredContent["ctrlrun"]``
    (the gateway's answers, and ``ctrlrun.integrations.mcp``'s)."""
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=text)],
        structured_content={"ctrlrun": payload},
        is_error=True,
    )


def refusal_result(action: str, key: Optional[str], exc: Exception) -> types.CallToolResult:
    """A refusal: nothing was sent to the upstream (the words every integration uses)."""
    refusal = refusal_of(exc, action, key)
    if refusal is None:
        return error_result(
            f"refused: {exc}", {"action": action, "effect_key": key, "refused": "invalid"}
        )
    if refusal.kind == "unreadable":
        return not_forwarded(action, key, "store", refusal.text.replace("was run", "was sent"))
    return error_result(refusal.text, refusal.payload)


def not_forwarded(action: str, key: Optional[str], kind: str, message: str) -> types.CallToolResult:
    """A call the gateway refused before sending (``invalid``, ``policy``, ``store``), or one
    whose outcome it recorded without an upstream answer (``failed``, ``ambiguous``)."""
    field = "outcome" if kind in ("failed", "ambiguous") else "refused"
    return error_result(f"{kind}: {message}", {"action": action, "effect_key": key, field: kind})


def forwarded_error(
    result: types.CallToolResult, action: str, key: str, outcome: str
) -> types.CallToolResult:
    """The upstream's tool error, passed on with what ctrlrun recorded for it."""
    advice = (
        "a retry may run"
        if outcome == "failed"
        else f"nobody knows whether it happened: check, then settle it with `ctrlrun resolve "
        f"{key} --committed` or `--failed`; do not retry"
    )
    note = types.TextContent(type="text", text=f"ctrlrun: {key} recorded {outcome}; {advice}")
    structured = result.structured_content
    info = {"action": action, "effect_key": key, "outcome": outcome}
    if isinstance(structured, dict):
        structured = {**structured, "ctrlrun": info}
    elif structured is None:
        structured = {"ctrlrun": info}
    return types.CallToolResult(
        content=[*result.content, note], structured_content=structured, is_error=True
    )
