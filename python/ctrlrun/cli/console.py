"""``ctrlrun console`` (the web console: approvals, ambiguous effects, receipts) and
``ctrlrun approvers`` (the accounts that sign in to it; only a hash of each secret is kept)."""

from __future__ import annotations

import functools
import json
import sys
from typing import Any, Callable, NoReturn, Optional, Tuple

import click

from ctrlrun.cli._common import die, iso, on_existing, open_existing, require_extra, store_option
from ctrlrun.cli.table import printable
from ctrlrun.errors import CTRLRunError, InvalidArgument
from ctrlrun.store.api import Store, default_store, open_store


def _open(url: Optional[str]) -> Store:
    """The store, created if it does not exist yet (accounts may come before any call)."""
    try:
        return open_store(url) if url is not None else default_store()
    except CTRLRunError as exc:
        die(str(exc))


def _fail(exc: CTRLRunError) -> NoReturn:
    die(str(exc))


def _sqlite_warning(store: Store) -> Optional[str]:
    """On SQLite, the start-up line that says what a file cannot enforce (docs/concepts.md,
    "Who can write a SQLite store"); ``None`` on PostgreSQL."""
    if store.backend != "sqlite":
        return None
    path = store.url[len("sqlite:///") :]  # the URL of a SQLite store is sqlite:/// + its path
    return (
        "ctrlrun console: a SQLite store enforces no separation of duties: anyone who can "
        f"write the file {path} can approve, resolve and add accounts; use PostgreSQL with "
        "roles for that (docs/roles.md)"
    )


def _console_url(given: str) -> str:
    """``--console-url`` checked as the policy's ``console_url`` is (it makes the links)."""
    from ctrlrun.policy.notify import url_problem

    url = given.strip()
    problem = url_problem(url, "--console-url", query_allowed=False)
    if problem is not None:
        raise InvalidArgument(problem)
    return url.rstrip("/")


@click.command()
@store_option
@click.option(
    "--listen",
    metavar="HOST:PORT",
    default="127.0.0.1:8780",
    show_default=True,
    help="Where to serve. A non-loopback address needs --certfile/--keyfile or "
    "--allow-insecure-listen.",
)
@click.option("--certfile", metavar="FILE", default=None, help="TLS certificate chain (PEM).")
@click.option("--keyfile", metavar="FILE", default=None, help="TLS private key (PEM).")
@click.option(
    "--allow-insecure-listen",
    is_flag=True,
    help="Serve plain HTTP on a non-loopback address (only behind a TLS proxy).",
)
@click.option(
    "--trust-proxy-header",
    "proxy_header",
    metavar="HEADER",
    default=None,
    help="Take the signed-in user from this header (e.g. X-Forwarded-User), set by an "
    "authenticating reverse proxy; only from --trusted-proxy addresses. Off by default.",
)
@click.option(
    "--trusted-proxy",
    "trusted",
    metavar="ADDR",
    multiple=True,
    help="An address or network (CIDR) of that proxy; repeatable.",
)
@click.option(
    "--console-url",
    metavar="URL",
    default=None,
    help="The console's public address, for links in notifications (default: the policy's "
    "console_url, else where it listens); its host is one the console answers to.",
)
@click.option(
    "--allowed-host",
    "allowed_hosts",
    metavar="NAME",
    multiple=True,
    help="Another name the console answers to (a request for any other gets 421); "
    "repeatable. By default: the --listen address's names and --console-url's host.",
)
def console(
    store_url: Optional[str],
    listen: str,
    certfile: Optional[str],
    keyfile: Optional[str],
    allow_insecure_listen: bool,
    proxy_header: Optional[str],
    trusted: Tuple[str, ...],
    console_url: Optional[str],
    allowed_hosts: Tuple[str, ...],
) -> None:
    """Serve the web console: people signed in as approver accounts grant or deny approval
    requests, settle ambiguous effects and read receipts."""
    require_extra("console", ("starlette", "uvicorn", "jinja2"), "ctrlrun console")
    from ctrlrun.console import accounts
    from ctrlrun.console.app import build_app
    from ctrlrun.console.hosts import console_names
    from ctrlrun.console.listen import ConsoleServer, check_listen, check_tls, parse_listen
    from ctrlrun.console.notifications import start_notifications
    from ctrlrun.console.state import ConsoleState, Settings, networks

    try:
        host, port = parse_listen(listen)
        tls = check_tls(certfile, keyfile)
        check_listen(host, tls, allow_insecure_listen)
        if console_url is not None:
            console_url = _console_url(console_url)
        names = console_names(host, console_url, allowed_hosts)
        settings = Settings(
            secure_cookies=tls,
            proxy_header=proxy_header,
            trusted_proxies=networks(trusted),
            console_url=console_url,
        )
    except CTRLRunError as exc:
        _fail(exc)
    store = _open(store_url)
    try:
        count = len(accounts.listed(store))
        server = ConsoleServer(
            build_app(ConsoleState(store, settings)), host, port, certfile, keyfile, names
        )
    except CTRLRunError as exc:
        _fail(exc)
    click.echo(f"ctrlrun console: {server.url} (store {store.url})", err=True)
    if count == 0:
        click.echo(
            "ctrlrun console: no approver account yet; add one with 'ctrlrun approvers add NAME'",
            err=True,
        )
    warning = _sqlite_warning(store)
    if warning is not None:
        click.echo(warning, err=True)
    try:
        watcher = start_notifications(store, console_url, server.url)
    except CTRLRunError as exc:
        _fail(exc)
    try:
        server.serve()
    finally:
        if watcher is not None:
            watcher.stop()


@click.group()
def approvers() -> None:
    """The accounts that sign in to the console (kept in the store: a name and a hash)."""


def _secret(password_stdin: bool) -> Tuple[str, bool]:
    from ctrlrun.console.passwords import MAX_SECRET_LENGTH, MIN_PASSWORD_LENGTH, new_secret

    if not password_stdin:
        return new_secret(), True
    line = sys.stdin.readline().rstrip("\r\n")
    if len(line) < MIN_PASSWORD_LENGTH:
        die(f"the password read from stdin is shorter than {MIN_PASSWORD_LENGTH} characters")
    if len(line) > MAX_SECRET_LENGTH:
        die(f"the password read from stdin is longer than {MAX_SECRET_LENGTH} characters")
    return line, False


def _show_secret(name: str, secret: str, what: str) -> None:
    click.echo(
        f"approver {printable(name)} {what}; its secret, shown this once (only a hash is kept):",
        err=True,
    )
    click.echo(secret)


def _give_secret(
    name: str,
    password_stdin: bool,
    opened: Callable[[], Store],
    write: Callable[[Store, str, str], Any],
    what: str,
    set_line: str,
) -> None:
    """NAME's new secret, read or made before the store is opened (a bad password writes
    nothing), written by ``write``: a secret made is shown this once; a password read is not,
    and the line then ends in ``set_line``."""
    secret, generated = _secret(password_stdin)
    store = opened()
    try:
        write(store, name, secret)
    except CTRLRunError as exc:
        _fail(exc)
    if generated:
        _show_secret(name, secret, what)
    else:
        click.echo(f"approver {printable(name)}{set_line}", err=True)


_password_stdin = click.option(
    "--password-stdin",
    is_flag=True,
    help="Read the password from the first line of stdin instead of generating a secret.",
)


@approvers.command("add")
@click.argument("name")
@_password_stdin
@store_option
def approvers_add(name: str, password_stdin: bool, store_url: Optional[str]) -> None:
    """Add the approver NAME; prints a one-time secret (or sets the password read from stdin)."""
    from ctrlrun.console import accounts
    from ctrlrun.store.approvers import check_approver_name

    try:  # before the store is opened (or created) and a password read: nothing is written
        check_approver_name(name)
    except CTRLRunError as exc:
        _fail(exc)
    opened = functools.partial(_open, store_url)
    _give_secret(name, password_stdin, opened, accounts.add, "added", " added")


@approvers.command("reset")
@click.argument("name")
@_password_stdin
@store_option
def approvers_reset(name: str, password_stdin: bool, store_url: Optional[str]) -> None:
    """Give the approver NAME a new secret (its console sessions end)."""
    from ctrlrun.console import accounts

    opened = functools.partial(open_existing, store_url)
    _give_secret(name, password_stdin, opened, accounts.reset, "reset", ": password set")


@approvers.command("remove")
@click.argument("name")
@store_option
def approvers_remove(name: str, store_url: Optional[str]) -> None:
    """Remove the approver NAME (its console sessions end)."""
    from ctrlrun.console import accounts

    store, removed = on_existing(store_url, lambda store: accounts.remove(store, name))
    if not removed:
        die(f"no approver {name!r} in {store.url}")
    click.echo(f"approver {printable(name)} removed")


@approvers.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@store_option
def approvers_list(as_json: bool, store_url: Optional[str]) -> None:
    """List the approver accounts (names and dates; never a secret or its hash)."""
    from ctrlrun.console import accounts

    store, found = on_existing(store_url, lambda store: accounts.listed(store))
    rows = [
        {"name": a.name, "created_at": iso(a.created_at), "updated_at": iso(a.updated_at)}
        for a in found
    ]
    if as_json:
        click.echo(json.dumps(rows, indent=2))
    elif not rows:
        click.echo(f"no approver accounts in {store.url}")
    else:
        width = max(len(printable(r["name"] or "")) for r in rows)
        for r in rows:
            click.echo(
                f"{printable(r['name'] or '').ljust(width)}  added {r['created_at']}  "
                f"secret set {r['updated_at']}"
            )
