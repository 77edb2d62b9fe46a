"""The ``ctrlrun`` command (also ``python -m ctrlrun``)."""

from __future__ import annotations

import sys
from typing import Optional

import click

from .errors import CTRLRunError


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="ctrlrun")
def cli() -> None:
    """ctrlrun: an agent's side-effecting tools happen at most once per effect key."""


@cli.command()
@click.option(
    "--store",
    "store_url",
    metavar="URL",
    default=None,
    help="Store to use (default: a new SQLite file in a temporary folder).",
)
def demo(store_url: Optional[str]) -> None:
    """Run a small refund agent and show what reservation prevents."""
    from . import _demo

    try:
        _demo.run(store_url, echo=click.echo).close()
    except CTRLRunError as exc:
        raise click.ClickException(str(exc)) from None


def main(argv: Optional[list] = None) -> None:
    try:
        cli.main(args=argv, prog_name="ctrlrun", standalone_mode=True)
    except SystemExit:
        raise
    sys.exit(0)


if __name__ == "__main__":
    main()
