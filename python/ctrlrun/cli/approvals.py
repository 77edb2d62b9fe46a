"""``ctrlrun approvals list``, ``ctrlrun approve`` and ``ctrlrun deny``: a person answers an
agent's approval requests."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Any, Dict, Optional

import click

from ctrlrun.cli._common import (
    as_json,
    cli_user,
    die,
    filter_options,
    iso,
    on_existing,
    open_existing,
    store_option,
)
from ctrlrun.cli.table import printable
from ctrlrun.errors import CTRLRunError
from ctrlrun.store.approvals import ApprovalRecord, ApprovalState

APPROVAL_STATES = [s.value for s in ApprovalState]


#: Every field of a request, in the order ``--json`` prints them.
FIELDS = (
    "request_id state action effect_key arguments not_bound requested_by requested_at "
    "expires_at ttl approvals_needed granted_by decided_by decided_at note used_by used_at "
    "args_digest"
)


def approval_dict(r: ApprovalRecord) -> Dict[str, Any]:
    """Every field of ``r``, JSON-ready (``ttl`` in seconds)."""
    out = as_json(r, FIELDS)
    out["ttl"] = r.ttl.total_seconds()
    return out


def _arguments_text(r: ApprovalRecord, width: int = 60, hint: str = "--json shows them") -> str:
    """Every argument of the request, cut to about ``width`` characters with a mark that says
    so and how many characters were left out (never silently); those the approval is not
    bound to are named after them, and that mark is never cut off."""
    text = printable(json.dumps(r.arguments, sort_keys=True, ensure_ascii=False))
    mark = ""
    if r.not_bound:
        mark = f" (not bound: {', '.join(printable(n) for n in r.not_bound)})"
    room = max(width - len(mark), 8)
    if len(text) <= room:
        return text + mark
    kept = room
    return f"{text[:kept]}… [{len(text) - kept} more characters; {hint}]{mark}"


def _approvals_text(r: ApprovalRecord) -> str:
    """Grants so far of the grants needed: ``1/2``."""
    return f"{len(r.granted_by)}/{r.approvals_needed}"


def _when(dt: datetime) -> str:
    return dt.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M:%SZ")


def _nothing(url: str, state: Optional[str], **filters: Optional[str]) -> str:
    which = f" in state {state}" if state else ""
    said = {"action": "of action", "prefix": "with key prefix", "requested_by": "asked by"}
    which += "".join(f" {said[k]} {printable(v)!r}" for k, v in filters.items() if v is not None)
    return f"no approval requests{which} in {url}"


@click.group()
def approvals() -> None:
    """Approval requests: what agents asked a person to approve."""


@approvals.command("list")
@click.option(
    "--state", type=click.Choice(APPROVAL_STATES), default=None, help="Only requests in this state."
)
@filter_options("requests")
@click.option(
    "--requested-by", metavar="NAME", default=None, help="Only requests this principal asked for."
)
@click.option(
    "--json", "as_json", is_flag=True, help="Print JSON (every field) instead of a table."
)
@store_option
def approvals_list(
    state: Optional[str],
    prefix: Optional[str],
    action: Optional[str],
    requested_by: Optional[str],
    limit: Optional[int],
    as_json: bool,
    store_url: Optional[str],
) -> None:
    """List approval requests, oldest first: who asked, the arguments, the approvals so far
    and when each expires. The store filters, orders and cuts: a long history is not read
    whole."""
    filters = {"action": action, "prefix": prefix, "requested_by": requested_by}
    store, records = on_existing(
        store_url,
        lambda store: store.list_approvals(
            state, action=action, prefix=prefix, requested_by=requested_by, limit=limit
        ),
    )
    if as_json:
        click.echo(json.dumps([approval_dict(r) for r in records], indent=2))
        return
    if not records:
        click.echo(_nothing(store.url, state, **filters))
        return
    head = (
        "REQUEST",
        "STATE",
        "ACTION",
        "EFFECT KEY",
        "ARGUMENTS",
        "REQUESTED BY",
        "APPROVALS",
        "DECIDED BY",
        "EXPIRES",
    )
    rows = [
        (
            r.request_id,
            r.state.value,
            printable(r.action),
            printable(r.effect_key),
            _arguments_text(r),
            printable(r.requested_by or "-"),
            _approvals_text(r),
            printable(r.decided_by or "-"),
            _when(r.expires_at),
        )
        for r in records
    ]
    widths = [max(len(str(row[i])) for row in [head, *rows]) for i in range(len(head))]
    for row in [head, *rows]:
        click.echo("  ".join(str(v).ljust(w) for v, w in zip(row, widths)).rstrip())


def decide(
    grant: bool, request_id: str, by: str, note: Optional[str], store_url: Optional[str]
) -> None:
    store = open_existing(store_url)
    try:
        r = (store.grant_approval if grant else store.deny_approval)(request_id, by, note)
    except CTRLRunError as exc:
        die(str(exc))
    who, action = printable(r.decided_by or ""), printable(r.action)
    if grant:
        click.echo(
            f"{r.request_id}: granted by {who} for {action} "
            f"{_arguments_text(r, 200, 'ctrlrun approvals list --json shows them')}; the agent's next call with these "
            f"arguments runs once, until {iso(r.expires_at)}"
        )
    else:
        click.echo(
            f"{r.request_id}: denied by {who} for {action}; calls with these "
            f"arguments raise ActionDenied until {iso(r.expires_at)}"
        )


def _decision(grant: bool, who: str, doc: str) -> click.Command:
    """``ctrlrun approve`` (``grant``) or ``ctrlrun deny``."""

    @click.command("approve" if grant else "deny", help=doc)
    @click.argument("request_id")
    @click.option("--by", "by", metavar="NAME", default=None, help=who)
    @click.option("--note", metavar="TEXT", default=None, help="Why (kept on the request).")
    @store_option
    def command(
        request_id: str, by: Optional[str], note: Optional[str], store_url: Optional[str]
    ) -> None:
        decide(grant, request_id, by or cli_user(), note, store_url)

    return command


approve = _decision(
    True,
    "Who approves (default cli:<OS user>).",
    "Grant a pending approval request (single use: one run of its call). An action that "
    "needs several approvers is granted once that many distinct people have.",
)
deny = _decision(False, "Who denies (default cli:<OS user>).", "Deny a pending approval request.")
