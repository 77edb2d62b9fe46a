"""``ctrlrun store roles``: give the agent's and the approver's PostgreSQL roles their duties
(docs/roles.md)."""

from __future__ import annotations

import click

import ctrlrun._core as _core
from ctrlrun.cli._common import die
from ctrlrun.errors import CTRLRunError
from ctrlrun.store.api import default_url


@click.group()
def store() -> None:
    """Set up a store for the roles that use it."""


@store.command("roles")
@click.option(
    "--store",
    "store_url",
    metavar="OWNER_URL",
    default=None,
    help="The store's PostgreSQL URL, connecting as the role that owns its tables "
    "(default: CTRLRUN_STORE; keep a password out of the command line).",
)
@click.option(
    "--agent",
    metavar="ROLE",
    required=True,
    help="The role agents connect as: reserve, record outcomes, ask for approval.",
)
@click.option(
    "--approver",
    metavar="ROLE",
    required=True,
    help="The role the console and `ctrlrun approve/deny/resolve` connect as: decide.",
)
@click.option(
    "--print",
    "print_only",
    is_flag=True,
    help="Print the SQL instead of running it (nothing is checked or changed).",
)
def roles(store_url: str, agent: str, approver: str, print_only: bool) -> None:
    """Give ROLEs the operator created the agent and the approver duties on the store.

    The roles get USAGE on the schema, SELECT on its tables (the approver also on the
    approver accounts), EXECUTE on their duty's functions, and nothing else: every other
    privilege they held on the store's tables and functions is revoked. The roles must exist,
    must not be superusers, members of the tables' owner, or (the agent) a member of the
    approver role. Run it again after an upgrade of ctrlrun.
    """
    try:
        url = store_url if store_url is not None else default_url()
        sql = _core.store_roles(url, agent, approver, print_only)
    except CTRLRunError as exc:
        die(str(exc))
    if print_only:
        click.echo(sql, nl=False)
        return
    click.echo(
        f"agent duty: {agent}; approver duty: {approver}; every other privilege of theirs on "
        "the store's tables and functions revoked"
    )
