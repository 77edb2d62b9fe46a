"""``ctrlrun approvals list``, ``ctrlrun approve`` and ``ctrlrun deny``: a person answers an
agent's approval requests."""

from __future__ import annotations

import json
from typing import Any, Dict, Optional

import click

from ctrlrun.cli._common import (
    as_json,
    cli_user,
    die,
    iso,
    on_existing,
    open_existing,
    store_option,
)
from ctrlrun.cli.table import printable
from ctrlrun.errors import CTRLRunError
from ctrlrun.store.approvals import ApprovalRecord, ApprovalState

APPROVAL_STATES = [s.value for s in ApprovalState]


def approval_dict(r: ApprovalRecord) -> Dict[str, Any]:
    return as_json(
        r,
        "request_id state action effect_key arguments not_bound requested_at expires_at "
        "decided_by decided_at note used_by used_at",
    )


def _arguments_text(r: ApprovalRecord, width: int = 60) -> str:
    """Every argument of the request; those the approval is not bound to are named after
    them, and that mark is never cut off."""
    text = printable(json.dumps(r.arguments, sort_keys=True, ensure_ascii=False))
    mark = ""
    if r.not_bound:
        mark = f" (not bound: {', '.join(printable(n) for n in r.not_bound)})"
    room = max(width - len(mark), 8)
    return (text if len(text) <= room else text[: room - 1] + "…") + mark


@click.group()
def approvals() -> None:
    """Approval requests: what agents asked a person to approve."""


@approvals.command("list")
@click.option(
    "--state", type=click.Choice(APPROVAL_STATES), default=None, help="Only requests in this state."
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@store_option
def approvals_list(state: Optional[str], as_json: bool, store_url: Optional[str]) -> None:
    """List approval requests, oldest first, with the arguments each was asked for."""
    store, records = on_existing(store_url, lambda store: store.list_approvals(state))
    if as_json:
        click.echo(json.dumps([approval_dict(r) for r in records], indent=2))
        return
    if not records:
        click.echo(f"no approval requests{' in state ' + state if state else ''} in {store.url}")
        return
    head = ("REQUEST", "STATE", "ACTION", "EFFECT KEY", "ARGUMENTS", "DECIDED BY")
    rows = [
        (
            r.request_id,
            r.state.value,
            printable(r.action),
            printable(r.effect_key),
            _arguments_text(r),
            printable(r.decided_by or ""),
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
            f"{_arguments_text(r, 200)}; the agent's next call with these "
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
