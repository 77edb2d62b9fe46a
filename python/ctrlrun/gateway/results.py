"""What the gateway answers an agent: every forwarded call ends in one :class:`Forwarded` value,
and :func:`answer` maps it, in one place, to the MCP tool result: the upstream's own answer, or
a result with ``isError`` set, one line of text an LLM can act on, and a structured ``ctrlrun``
payload a program can read."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, Optional

from mcp import types

from ctrlrun import errors


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


def _iso(dt: Any) -> Optional[str]:
    return None if dt is None else dt.isoformat().replace("+00:00", "Z")


def _result(text: str, payload: Dict[str, Any]) -> types.CallToolResult:
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=text)],
        structured_content={"ctrlrun": payload},
        is_error=True,
    )


def refusal_result(action: str, key: Optional[str], exc: Exception) -> types.CallToolResult:
    """A refusal: nothing was sent to the upstream."""
    payload: Dict[str, Any] = {"action": action, "effect_key": key}
    if isinstance(exc, errors.EffectConflict):
        payload.update(
            refused="conflict",
            fields=list(exc.fields),
            state=exc.state,
            other_action=exc.other_action,
        )
        differ = ", ".join(exc.fields) or "the action"
        text = (
            f"conflict: {key} was already used with other arguments ({differ} differ); it is "
            f"{exc.state}. Do not retry with these arguments"
        )
    elif isinstance(exc, errors.DuplicateEffect):
        try:
            record = exc.record
        except errors.CTRLRunError as unreadable:  # a row edited by hand into what no record holds
            return not_forwarded(
                action,
                key,
                "store",
                (
                    f"{key} is taken ({exc.state}), but its row cannot be read: {unreadable}; "
                    f"nothing was sent. Do not retry"
                ),
            )
        # (a refusal from the store always carries its row; None only for one made by hand)
        if exc.state == "committed":
            at = _iso(record.updated_at) if record is not None else None
            payload.update(
                refused="committed",
                committed_at=at,
                attempt=record.attempt if record is not None else None,
            )
            text = f"already done: {key} committed at {at}; do not retry"
        else:
            until = _iso(record.lease_expires_at) if record is not None else None
            payload.update(refused="in_progress", lease_expires_at=until)
            text = f"in progress: {key} is being done by another call (its lease runs until {until}); do not retry now"
    elif isinstance(exc, errors.AmbiguousEffect):
        payload.update(refused="ambiguous")
        text = (
            f"unknown outcome: {key} may or may not have happened; a person must check and "
            f"settle it (`ctrlrun resolve {key} --committed` or `--failed`). Do not retry"
        )
    elif isinstance(exc, errors.ApprovalRequired):
        payload.update(
            refused="approval_required",
            request_id=exc.request_id,
            expires_at=_iso(exc.expires_at),
            arguments=exc.arguments,
            not_bound=list(exc.not_bound),
        )
        text = (
            f"needs approval: request {exc.request_id} for {action} is pending; a person "
            f"approves it with `ctrlrun approve {exc.request_id} --by NAME`, then call again "
            f"with the same arguments"
        )
    elif isinstance(exc, errors.ActionDenied):
        payload.update(refused="denied", request_id=exc.request_id, denied_by=exc.denied_by)
        who = f" by {exc.denied_by}" if exc.denied_by else ""
        text = f"denied{who}: {exc}. Do not retry"
    else:
        payload.update(refused="invalid")
        text = f"refused: {exc}"
    return _result(text, payload)


def not_forwarded(action: str, key: Optional[str], kind: str, message: str) -> types.CallToolResult:
    """A call the gateway refused before sending (``invalid``, ``policy``, ``store``), or one
    whose outcome it recorded without an upstream answer (``failed``, ``ambiguous``)."""
    field = "outcome" if kind in ("failed", "ambiguous") else "refused"
    return _result(f"{kind}: {message}", {"action": action, "effect_key": key, field: kind})


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
