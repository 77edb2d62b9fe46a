"""The ``ctrlrun`` command: inspect and settle effects, prove the guarantees, run the demo.

Exit status: 0 success; 1 a guarantee failed (``verify``) or a soak found a double or a lost
call (``soak``); 2 bad usage, an unknown key, a refused request or an unreachable store (one
line on stderr, no traceback).
"""

from __future__ import annotations

import json
import sys
from datetime import datetime, timezone
from typing import Any, Dict, List, Optional

import click

from ctrlrun.cli import approvals, console, gateway, receipts, retention, soak, store, store_policy
from ctrlrun.cli._common import as_json, cli_user, die, filter_options, on_existing, store_option
from ctrlrun.cli.table import lease_text, printable, table
from ctrlrun.errors import CTRLRunError
from ctrlrun.store.records import EffectRecord, EffectState

STATES = [s.value for s in EffectState]
RECORD_FIELDS = (
    "effect_key state action_id attempt created_at updated_at lease_expires_at result error "
    "resolved_by action holder args_digest approval_id"
)


def record_dict(r: EffectRecord) -> Dict[str, Any]:
    return as_json(r, RECORD_FIELDS)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="ctrlrun")
def cli() -> None:
    """ctrlrun: an agent's side-effecting tools happen at most once per effect key."""


@cli.group()
def effects() -> None:
    """Look at the effects a store holds."""


@effects.command("list")
@click.option(
    "--state", type=click.Choice(STATES), default=None, help="Only effects in this state."
)
@filter_options("effects")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@store_option
def effects_list(
    state: Optional[str],
    prefix: Optional[str],
    action: Optional[str],
    limit: Optional[int],
    as_json: bool,
    store_url: Optional[str],
) -> None:
    """List effects, oldest first. A live lease shows its remaining time. --state and
    --prefix are served by an index: a large store is never read whole for them."""
    store, records = on_existing(
        store_url,
        lambda store: store.list_effects(state, prefix=prefix, action=action, limit=limit),
    )
    if as_json:
        click.echo(json.dumps([record_dict(r) for r in records], indent=2))
    elif not records:
        which = "".join(
            [
                f" in state {state}" if state else "",
                f" with key prefix {prefix!r}" if prefix is not None else "",
                f" of action {action!r}" if action is not None else "",
            ]
        )
        click.echo(printable(f"no effects{which} in {store.url}"))
    else:
        click.echo(table(records))


@effects.command("show")
@click.argument("key")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@store_option
def effects_show(key: str, as_json: bool, store_url: Optional[str]) -> None:
    """Show one effect's whole record."""
    store, rec = on_existing(store_url, lambda store: store.get_effect(key))
    if rec is None:
        die(f"no effect is recorded under key {key!r} in {store.url}")
    d = record_dict(rec)
    if as_json:
        click.echo(json.dumps(d, indent=2))
        return
    d["lease"] = lease_text(rec, datetime.now(timezone.utc))
    for k, v in d.items():
        shown = json.dumps(v) if k == "result" else ("" if v is None else str(v))
        click.echo(f"{k:>17}: {printable(shown)}")


@cli.command()
@click.argument("key")
@click.option("--committed", is_flag=True, help="It happened.")
@click.option("--failed", is_flag=True, help="It provably did not happen (a retry may run).")
@click.option(
    "--by", "resolver", metavar="NAME", default=None, help="Who decided (default cli:<OS user>)."
)
@click.option("--note", metavar="TEXT", default=None, help="Why (kept on the record).")
@store_option
def resolve(
    key: str,
    committed: bool,
    failed: bool,
    resolver: Optional[str],
    note: Optional[str],
    store_url: Optional[str],
) -> None:
    """Settle an ambiguous effect (or a held one whose lease lapsed) as committed or failed,
    after checking the remote system."""
    if committed == failed:
        raise click.UsageError("say what happened: exactly one of --committed or --failed")
    target = "committed" if committed else "failed"
    if resolver is None:
        resolver = cli_user()
    _, rec = on_existing(store_url, lambda store: store.resolve_effect(key, target, resolver, note))
    click.echo(f"{rec.effect_key}: {rec.state.value} (resolved by {rec.resolved_by})")


@cli.command()
@store_option
@click.option(
    "--policy",
    "policy_file",
    metavar="FILE",
    default=None,
    type=click.Path(dir_okay=False),
    help="Verify every action of this policy file that has an effect template.",
)
def verify(store_url: Optional[str], policy_file: Optional[str]) -> None:
    """Prove G3 (duplicate refused) and G4 (one winner, 8 processes) on your backend, in a
    scratch store of its own, and report the server's posture (durable commits, replication,
    a pooler); your data is never opened."""
    from ctrlrun.cli import verify as _verify
    from ctrlrun.cli import verify_posture as _posture
    from ctrlrun.store.api import default_url

    progress = lambda msg: click.echo(f"verify: {msg}…", err=True)  # noqa: E731
    try:
        verdicts = _verify.run_verify(store_url, policy_file, progress)
        posture = _posture.read_posture(store_url or default_url(), progress)
    except CTRLRunError as exc:
        die(str(exc))
    for v in verdicts:
        click.echo(v.line())
    for line in posture:
        click.echo(line.line())
    sys.exit(_verify.report(verdicts) or int(_posture.posture_failed(posture)))


@cli.group()
def policy() -> None:
    """Check a policy file, or make its decisions a store's policy."""


@policy.command("check")
@click.argument("file", required=False, type=click.Path(dir_okay=False))
def policy_check(file: Optional[str]) -> None:
    """Validate FILE (default: CTRLRUN_CONFIG, else ./ctrlrun.yaml) and list every action with
    no effect template: the writes that run unreserved."""
    from ctrlrun.policy import load_policy, policy_path

    path = file or policy_path()[0]
    try:
        pol = load_policy(path)
    except CTRLRunError as exc:
        die(str(exc))
    click.echo(f"{path}: valid, {len(pol.actions)} action(s)")
    unreserved = pol.unreserved()
    for a in unreserved:
        click.echo(f"  unreserved: {a.name} (line {a.line}) has no effect template")
    for a in pol.actions.values():
        if a.decision == "approve" and a.effect is None:
            click.echo(
                f"  approve: {a.name} (line {a.line}) has no effect template here; its "
                f"decorator must give one, else its calls are refused"
            )
    if not unreserved:
        click.echo("  every allowed action has an effect template")


@cli.command()
@click.option(
    "--store",
    "store_url",
    metavar="URL",
    default=None,
    help="Store to run the demo in (default: a new SQLite file in a temporary folder).",
)
def demo(store_url: Optional[str]) -> None:
    """Run a small refund agent and show what reservation prevents."""
    from ctrlrun.cli import demo as _demo

    try:
        _demo.run(store_url, echo=click.echo).close()
    except CTRLRunError as exc:
        die(str(exc))


# click >= 8.2 raises this for a group called without a command (8.1 prints the help itself).
_NO_ARGS_IS_HELP = getattr(click.exceptions, "NoArgsIsHelpError", ())


for command in (
    approvals.approvals,
    approvals.approve,
    approvals.deny,
    console.console,
    console.approvers,
    gateway.gateway,
    receipts.receipts,
    soak.soak,
    store.store,
):
    cli.add_command(command)
effects.add_command(retention.effects_prune)
policy.add_command(store_policy.apply)
policy.add_command(store_policy.show)


def main(argv: Optional[List[str]] = None) -> None:
    """Run the command; bad usage is one line on stderr and exit status 2."""
    try:
        code = cli.main(args=argv, prog_name="ctrlrun", standalone_mode=False)
    except _NO_ARGS_IS_HELP as exc:  # a bare `ctrlrun` or group: its help, and success
        click.echo(exc.ctx.get_help() if exc.ctx is not None else cli.get_help(click.Context(cli)))
        sys.exit(0)
    except click.UsageError as exc:
        where = exc.ctx.command_path if exc.ctx is not None else "ctrlrun"
        click.echo(f"{where}: error: {exc.format_message()} (see '{where} --help')", err=True)
        sys.exit(2)
    except click.ClickException as exc:
        click.echo(f"ctrlrun: error: {exc.format_message()}", err=True)
        sys.exit(exc.exit_code)
    except click.Abort:
        click.echo("ctrlrun: aborted", err=True)
        sys.exit(1)
    sys.exit(code if isinstance(code, int) else 0)
