"""``ctrlrun gateway``: an MCP server on stdio in front of one upstream MCP server, reserving
each tool call the policy gives an effect template (see ``ctrlrun.gateway``)."""

from __future__ import annotations

import functools
import os
import re
from typing import Any, Optional, Tuple

import click

from ctrlrun.cli._common import die, require_extra, require_posix, store_option
from ctrlrun.errors import CTRLRunError
from ctrlrun.store.approvers import check_name

_ALIAS = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


@click.command(context_settings={"allow_interspersed_args": False})
@click.option(
    "--name",
    "alias",
    required=True,
    metavar="ALIAS",
    help="The upstream's name: its tool T is the action mcp.ALIAS.T.",
)
@click.option(
    "--policy",
    "policy",
    metavar="FILE",
    help="The policy file (default: CTRLRUN_CONFIG, else ./ctrlrun.yaml).",
)
@click.option(
    "--call-timeout",
    type=click.FloatRange(min=0.1, max=86400),
    default=60.0,
    metavar="SECONDS",
    show_default=True,
    help="How long a forwarded call may take (per action: call_timeout).",
)
@click.option(
    "--requested-by",
    metavar="NAME",
    help="Who asks for the approvals of the calls relayed (the agent's name): recorded on "
    "each request, and never able to grant it.",
)
@click.option(
    "--upstream-url",
    metavar="URL",
    help="Reach the upstream over streamable HTTP instead of starting a command.",
)
@click.option(
    "--listen",
    metavar="HOST:PORT",
    help="Serve agents over streamable HTTP (at /mcp) instead of stdio.",
)
@store_option
@click.argument(
    "upstream", nargs=-1, type=click.UNPROCESSED, metavar="-- UPSTREAM_COMMAND [ARGS]..."
)
def gateway(
    alias: str,
    policy: Optional[str],
    call_timeout: float,
    requested_by: Optional[str],
    upstream_url: Optional[str],
    listen: Optional[str],
    store_url: Optional[str],
    upstream: Tuple[str, ...],
) -> None:
    """Serve MCP on stdio in front of UPSTREAM_COMMAND (an MCP server on stdio).

    Each tool call whose action has an effect template in the policy is reserved before it
    is forwarded: at most once per effect key, across the gateway's restarts and every
    process sharing the store."""
    if not _ALIAS.match(alias):
        die(f"--name {alias!r}: an alias is 1 to 64 letters, digits, '_' or '-'")
    if bool(upstream) == (upstream_url is not None):
        die("name the upstream once: a command after `--`, or --upstream-url")
    address = _address(listen) if listen is not None else None
    if requested_by is not None:
        try:
            check_name("--requested-by", requested_by)
        except CTRLRunError as exc:
            die(str(exc))
    require_posix("ctrlrun gateway")
    require_extra("gateway", ("mcp", "anyio"), "ctrlrun gateway")
    import anyio

    from ctrlrun.gateway import serve as _gateway_serve
    from ctrlrun.gateway.upstream import redacted

    if upstream_url is not None and not re.match(r"^https?://[^\s/]+", upstream_url):
        die(f"--upstream-url {redacted(upstream_url)!r}: expected an http:// or https:// URL")
    from ctrlrun.policy import current_policy
    from ctrlrun.store.api import default_store, open_store

    if policy is not None:
        if not os.path.isfile(policy):
            die(f"--policy {policy}: no such file")
        os.environ["CTRLRUN_CONFIG"] = os.path.abspath(policy)
    elif not os.environ.get("CTRLRUN_CONFIG") and os.path.isfile("ctrlrun.yaml"):
        # Pinned: a default file deleted or replaced while the gateway runs must refuse
        # calls, never quietly turn reserved tools into unreserved ones.
        os.environ["CTRLRUN_CONFIG"] = os.path.abspath("ctrlrun.yaml")
    try:
        current_policy()  # a broken policy stops the gateway before it serves anything
        store = open_store(store_url) if store_url is not None else default_store()
    except CTRLRunError as exc:
        die(str(exc))
    command = list(upstream)
    shown = redacted(upstream_url) if upstream_url is not None else None
    what = shown or (command[0] if command else "")
    try:
        anyio.run(
            functools.partial(_gateway_serve.serve, requested_by=requested_by),
            alias,
            store,
            command,
            upstream_url,
            address,
            call_timeout,
        )
    except KeyboardInterrupt:
        pass
    except BaseException as exc:  # the task groups wrap what failed in exception groups
        if _first(exc, KeyboardInterrupt) is not None:
            return  # Ctrl-C or SIGTERM, wrapped by a task group it went through
        spawn = _first(exc, OSError)
        if spawn is not None:
            die(f"cannot start or reach the upstream {what!r}: {spawn.strerror or spawn}")
        reach = _first(exc, Exception)
        if shown is not None and reach is not None:
            die(f"cannot reach the upstream {shown!r}: {redacted(str(reach))}")
        raise


def _address(listen: str) -> Tuple[str, int]:
    host, sep, port = listen.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        die(f"--listen {listen!r}: expected HOST:PORT, such as 127.0.0.1:8765")
    host = host.strip("[]")
    if host not in ("127.0.0.1", "localhost", "::1"):
        # The gateway's HTTP endpoint has no authentication of its own: anyone who reaches it
        # can call the upstream's tools. Refused rather than served to a network.
        die(
            f"--listen {listen!r}: the gateway serves HTTP without authentication, so it "
            f"listens on a loopback address only (127.0.0.1, ::1 or localhost); put an "
            f"authenticating proxy in front of it to serve others"
        )
    return host, int(port)


def _first(exc: BaseException, kind: type) -> Any:
    """The first exception of ``kind`` in ``exc`` or the groups it wraps."""
    if isinstance(exc, kind):
        return exc
    for inner in getattr(exc, "exceptions", ()):
        found = _first(inner, kind)
        if found is not None:
            return found
    return None
