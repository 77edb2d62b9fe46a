"""``ctrlrun receipts [KEY]`` and ``ctrlrun receipts verify``: what was written, by whom, and
whether the record of it is intact."""

from __future__ import annotations

import json
from typing import List, Optional, Tuple

import click

from ctrlrun.cli._common import on_existing, store_option
from ctrlrun.cli.table import printable
from ctrlrun.store.receipts import Receipt

#: Options that take a value (the next argument, unless given as ``--opt=value``).
_VALUED = ("--limit", "--store")


class _ListByDefault(click.Group):
    """``receipts KEY`` and ``receipts --json`` mean ``receipts list …``; the subcommand may
    come after options (``receipts --store URL verify``). A key named like a subcommand is
    listed with ``receipts list KEY``."""

    def parse_args(self, ctx: click.Context, args: List[str]) -> List[str]:
        if args and args[0] in ("-h", "--help"):
            return super().parse_args(ctx, args)
        i = 0
        while i < len(args):
            arg = args[i]
            if arg == "--":
                break
            if not arg.startswith("-"):
                if arg in self.commands:  # the subcommand, wherever the options put it
                    return super().parse_args(ctx, [arg, *args[:i], *args[i + 1 :]])
                break
            i += 2 if arg in _VALUED else 1
        return super().parse_args(ctx, ["list", *args])


def _row(r: Receipt) -> Tuple[str, ...]:
    attempt = "" if r.attempt is None else str(r.attempt)
    by = r.actor or r.writer or ""
    return (
        str(r.id),
        r.at.isoformat().replace("+00:00", "Z"),
        printable(r.effect_key),
        printable(r.kind),
        printable(r.state),
        printable(r.action or ""),
        attempt,
        printable(by),
    )


@click.group(cls=_ListByDefault)
def receipts() -> None:
    """Receipts: one per committed write, chained per effect key and per approval request.

    `ctrlrun receipts [KEY]` lists them; `ctrlrun receipts verify` checks every chain."""


@receipts.command("list")
@click.argument("key", required=False)
@click.option(
    "--limit",
    type=click.IntRange(min=1, max=2**63 - 1),
    default=None,
    metavar="N",
    help="Only the latest N receipts.",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@store_option
def receipts_list(
    key: Optional[str], limit: Optional[int], as_json: bool, store_url: Optional[str]
) -> None:
    """List receipts (of KEY, or of every key), oldest first."""
    store, found = on_existing(store_url, lambda store: store.list_receipts(key, limit=limit))
    if as_json:
        click.echo(json.dumps([r.to_json() for r in found], indent=2, ensure_ascii=False))
        return
    if not found:
        what = f" for '{printable(key)}'" if key is not None else ""
        click.echo(f"no receipts{what} in {store.url}")
        return
    head = ("ID", "AT", "EFFECT KEY", "EVENT", "STATE", "ACTION", "ATTEMPT", "BY")
    rows = [head, *(_row(r) for r in found)]
    widths = [max(len(row[i]) for row in rows) for i in range(len(head))]
    for row in rows:
        click.echo("  ".join(v.ljust(w) for v, w in zip(row, widths)).rstrip())


@receipts.command("verify")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@store_option
def receipts_verify(as_json: bool, store_url: Optional[str]) -> None:
    """Check every chain; exit 1 naming the first broken receipt."""
    store, check = on_existing(store_url, lambda store: store.verify_receipts())
    if as_json:
        click.echo(json.dumps(check.to_json(), indent=2, ensure_ascii=False))
    elif check.ok:
        chains = "chain" if check.chains == 1 else "chains"
        click.echo(
            f"receipts intact: {check.receipts} receipts in {check.chains} {chains} in {store.url}"
        )
    if not check.ok:
        if not as_json:
            click.echo(f"ctrlrun: receipts broken: {printable(check.reason or '')}", err=True)
        raise SystemExit(1)
