"""``ctrlrun policy apply`` / ``show``: the store's policy, a floor under every caller's own
(docs/roles.md)."""

from __future__ import annotations

import json
from typing import List, Optional

import click

from ctrlrun.cli._common import die, on_existing, store_option
from ctrlrun.cli.table import printable
from ctrlrun.errors import CTRLRunError
from ctrlrun.policy import load_policy
from ctrlrun.store.api import Store, default_url, open_store
from ctrlrun.store.policy import ActionRule


def rules_of(path: str) -> List[ActionRule]:
    """The rules of the policy file at ``path``: each action that states a ``decision``."""
    return [
        ActionRule(a.name, a.decision, a.approvals or 1)
        for a in load_policy(path).actions.values()
        if a.decided
    ]


@click.command("apply")
@click.argument("file", type=click.Path(dir_okay=False))
@store_option
def apply(file: str, store_url: Optional[str]) -> None:
    """Make FILE's decisions (each action's ``decision`` and ``approvals``) the store's policy.

    A reservation of an action the store says needs approval is then refused without a grant
    in force, whatever the caller's own policy says; a request needs the larger of the two
    numbers of approvers; an action the store denies never runs. An action FILE leaves out
    has no rule afterwards. On PostgreSQL only the owner's URL may do this.
    """
    try:
        rules = rules_of(file)
        store = open_store(store_url if store_url is not None else default_url())
        store.apply_policy(rules)
    except CTRLRunError as exc:
        die(str(exc))
    shown = ", ".join(f"{r.action} {r.decision}" + _count(r) for r in rules) or "no rules"
    click.echo(f"store policy: {len(rules)} action(s): {printable(shown)}")


def _count(r: ActionRule) -> str:
    return f" ({r.approvals} approvers)" if r.decision == "approve" and r.approvals > 1 else ""


@click.command("show")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@store_option
def show(as_json: bool, store_url: Optional[str]) -> None:
    """The store's policy, by action."""
    _, rules = on_existing(store_url, Store.policy)
    if as_json:
        click.echo(json.dumps([r.__dict__ for r in rules], indent=2))
        return
    if not rules:
        click.echo("no rules")
        return
    width = max(len("action"), *(len(printable(r.action)) for r in rules))
    click.echo(f"{'action':<{width}}  decision  approvals")
    for r in rules:
        click.echo(f"{printable(r.action):<{width}}  {r.decision:<8}  {r.approvals}")
