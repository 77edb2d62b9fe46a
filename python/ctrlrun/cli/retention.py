"""``ctrlrun effects prune``: delete settled effects older than an age, in bounded batches."""

from __future__ import annotations

import json
import re
import sys
from datetime import timedelta
from typing import Any, Callable, List, Optional, Tuple

import click

from ctrlrun.cli._common import cli_user, die, open_existing, store_option
from ctrlrun.errors import CTRLRunError
from ctrlrun.store.retention import PRUNABLE_STATES

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86_400, "w": 7 * 86_400}
_AGE = re.compile(r"^(?:(\d{1,9})([smhdw]))+$")
_PART = re.compile(r"(\d{1,9})([smhdw])")


class Age(click.ParamType):  # type: ignore[type-arg]  # generic from click 8.3 on
    """An age such as ``30d``, ``12h``, ``1d12h``: whole numbers of weeks (w), days (d),
    hours (h), minutes (m) and seconds (s)."""

    name = "AGE"

    def convert(
        self, value: Any, param: Optional[click.Parameter], ctx: Optional[click.Context]
    ) -> Tuple[str, timedelta]:
        if isinstance(value, tuple):
            return value
        text = str(value).strip().lower()
        if not _AGE.match(text):
            self.fail(
                f"{value!r} is not an age: write a number and a unit, such as 30d, 12h, "
                f"90m or 1d12h (units: w, d, h, m, s)",
                param,
                ctx,
            )
        seconds = sum(int(n) * _UNITS[u] for n, u in _PART.findall(text))
        if seconds <= 0:
            self.fail(f"{value!r} is no age: it must be longer than 0", param, ctx)
        if seconds > 100 * 366 * 86_400:
            self.fail(f"{value!r} is longer than a hundred years", param, ctx)
        return text, timedelta(seconds=seconds)


def _who() -> str:
    return cli_user()


@click.command("prune")
@click.option(
    "--older-than",
    "age",
    type=Age(),
    required=True,
    metavar="AGE",
    help="Rows created and last written more than AGE ago (30d, 12h, 1d12h).",
)
@click.option(
    "--state",
    "states",
    type=click.Choice(PRUNABLE_STATES),
    multiple=True,
    help="Only this settled state (repeatable; default: committed and failed).",
)
@click.option(
    "--receipts",
    is_flag=True,
    help="Delete the pruned effects' receipts too (default: they stay, each chain ending with a 'pruned' receipt).",
)
@click.option("--dry-run", is_flag=True, help="Count what would be pruned; delete nothing.")
@click.option(
    "--batch-size",
    type=click.IntRange(min=1, max=10_000),
    default=1000,
    metavar="N",
    help="Rows per transaction (default 1000).",
)
@click.option(
    "--by",
    metavar="NAME",
    default=None,
    help="Who prunes, written on the receipts (default cli:<OS user>).",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@store_option
def effects_prune(
    age: Tuple[str, timedelta],
    states: Tuple[str, ...],
    receipts: bool,
    dry_run: bool,
    batch_size: int,
    by: Optional[str],
    as_json: bool,
    store_url: Optional[str],
) -> None:
    """Delete settled effects (committed, failed) older than AGE, in short transactions.

    A pruned key is forgotten: its next call runs again, so keep AGE longer than any
    retry. Never deleted: ambiguous, reserved and executing effects, and an effect whose
    key has an approval request pending or granted."""
    text, older = age
    chosen: List[str] = list(states) or list(PRUNABLE_STATES)
    store = open_existing(store_url)
    done = [0]

    def heard(n: int) -> None:
        done[0] = n

    def prune(progress: Callable[[int], None]) -> int:
        who = by or _who()
        return store.prune(
            older, chosen, receipts=receipts, by=who, batch_size=batch_size, progress=progress
        )

    try:
        if dry_run:
            count = store.prune(older, chosen, dry_run=True)
        elif sys.stderr.isatty() and not as_json:
            total = store.prune(older, chosen, dry_run=True)
            with click.progressbar(length=total, label="pruning", file=sys.stderr) as bar:

                def moved(n: int) -> None:
                    bar.update(n - done[0])
                    heard(n)

                count = prune(moved)
        else:
            count = prune(heard)
    except CTRLRunError as exc:
        kept = f" (after pruning {done[0]})" if done[0] else ""
        die(f"{exc}{kept}")
    except KeyboardInterrupt:
        die(f"interrupted after pruning {done[0]} effect(s); the rest stay", 130)
    if as_json:
        click.echo(
            json.dumps(
                {
                    "store": store.url,
                    "dry_run": dry_run,
                    "pruned": count,
                    "older_than": text,
                    "older_than_seconds": int(older.total_seconds()),
                    "states": chosen,
                    "receipts_deleted": bool(receipts and not dry_run),
                },
                indent=2,
            )
        )
        return
    what = f"{count} effect(s) ({', '.join(chosen)}) settled more than {text} ago"
    if dry_run:
        click.echo(f"would prune {what} in {store.url}; nothing was deleted (dry run)")
    else:
        kept = (
            "their receipts were deleted too"
            if receipts
            else "their receipts stay, each chain ending with a 'pruned' receipt"
        )
        click.echo(f"pruned {what} in {store.url}; {kept}")
