"""What every ``ctrlrun`` command shares: the ``--store`` option, opening an existing store,
the one-line error exit, and times as ISO text."""

from __future__ import annotations

import enum
import getpass
import importlib
import os
import sys
from datetime import datetime
from typing import Any, Callable, Dict, NoReturn, Optional, Sequence, Tuple, TypeVar

import click

import ctrlrun._core as _core
from ctrlrun.errors import CTRLRunError, InvalidArgument
from ctrlrun.store.api import Store, default_store, default_url, open_store

T = TypeVar("T")

store_option = click.option(
    "--store",
    "store_url",
    metavar="URL",
    default=None,
    help="Store URL (default: CTRLRUN_STORE, else CTRLRUN_STATE, else .ctrlrun/state.db).",
)


def filter_options(things: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """``--prefix TEXT``, ``--action NAME`` and ``--limit N`` (the oldest N) for a command
    that lists ``things``: the store filters (by an index where it has one)."""

    def add(command: Callable[..., Any]) -> Callable[..., Any]:
        prefix = click.option(
            "--prefix",
            metavar="TEXT",
            default=None,
            help=f"Only {things} whose key starts with TEXT (plain text, not a pattern).",
        )
        limit = click.option(
            "--limit",
            metavar="N",
            type=click.IntRange(min=1, max=2**63 - 1),
            default=None,
            help=f"At most N {things} (the oldest).",
        )
        action = click.option(
            "--action", metavar="NAME", default=None, help=f"Only {things} of this action."
        )
        return prefix(action(limit(command)))

    return add


def die(message: str, code: int = 2) -> NoReturn:
    """One line on stderr (``ctrlrun: …``) and exit ``code``: never a traceback."""
    click.echo(f"ctrlrun: {message}", err=True)
    sys.exit(code)


def given_url(url: Optional[str]) -> str:
    """``--store``'s URL, else the default store's (``CTRLRUN_STORE``, ``CTRLRUN_STATE``,
    ``.ctrlrun/state.db``). Raises ``InvalidArgument`` for an empty one."""
    if url is not None and not url.strip():
        raise InvalidArgument(
            "--store is empty; give the store's URL or SQLite path, or leave --store out "
            "to use CTRLRUN_STORE / CTRLRUN_STATE / .ctrlrun/state.db"
        )
    return url if url is not None else default_url()


def open_existing(url: Optional[str]) -> Store:
    """Open an existing store; a SQLite file that does not exist is an error, not created."""
    try:
        path = _core.sqlite_path(given_url(url))
        if path is not None and not os.path.exists(path):
            die(f"no store at {path} (nothing has been reserved there yet)")
        return open_store(url) if url is not None else default_store()
    except CTRLRunError as exc:
        die(str(exc))


def on_existing(url: Optional[str], use: Callable[[Store], T]) -> Tuple[Store, T]:
    """An existing store (:func:`open_existing`) and what ``use`` got from it; a ctrlrun error
    on the way is the command's one-line exit."""
    store = open_existing(url)
    try:
        return store, use(store)
    except CTRLRunError as exc:
        die(str(exc))


def as_json(record: Any, names: str) -> Dict[str, Any]:
    """The fields ``names`` (space-separated, in this order) of ``record``, JSON-ready: times
    as ISO text ending in ``Z``, enums as their values, tuples as lists."""
    out: Dict[str, Any] = {}
    for name in names.split():
        value = getattr(record, name)
        if isinstance(value, datetime):
            value = iso(value)
        elif isinstance(value, enum.Enum):
            value = value.value
        elif isinstance(value, tuple):
            value = list(value)
        out[name] = value
    return out


def iso(dt: Optional[datetime]) -> Optional[str]:
    """An aware UTC datetime as ISO text ending in ``Z``, or ``None``."""
    return None if dt is None else dt.isoformat().replace("+00:00", "Z")


def cli_user() -> str:
    """Who a command records when no ``--by`` is given: ``cli:<OS user>``. It is what the OS
    says the user is, not an authentication: anyone who can reach the store can write any
    name (docs/console.md, "What the CLI's identity means")."""
    try:
        return f"cli:{getpass.getuser()}"
    except Exception:  # no user name the OS can give (no passwd entry, no LOGNAME)
        return "cli:unknown"


# The Python each optional extra needs (its packages' markers in pyproject.toml).
EXTRA_PYTHON: Dict[str, Tuple[int, int]] = {"gateway": (3, 10)}


def require_posix(what: str, system: str = os.name) -> None:
    """Exit with one line when ``what`` runs on Windows, whose descriptors and signals it does
    not use yet (the gateway's stdio wire, the soak's SIGKILL)."""
    if system == "nt":
        die(
            f"{what} is not available on Windows yet (it needs POSIX descriptors and signals); run it under WSL"
        )


def require_extra(
    extra: str,
    modules: Sequence[str],
    what: str,
    python: Tuple[int, int] = (sys.version_info[0], sys.version_info[1]),
) -> None:
    """Exit with one line when ``what`` cannot run for want of the optional ``extra``: which
    extra installs its ``modules``, or, on a Python older than the extra needs, that installing
    it here installs nothing."""
    floor = EXTRA_PYTHON.get(extra)
    if floor is not None and python < floor:
        die(
            f"{what} needs Python {floor[0]}.{floor[1]} or newer (this is {python[0]}.{python[1]}): "
            f"the '{extra}' extra installs nothing on it"
        )
    missing = []
    for name in modules:
        try:
            importlib.import_module(name)
        except ImportError:
            missing.append(name)
    if missing:
        die(
            f"{what} needs the '{extra}' extra ({', '.join(missing)} not installed): "
            f"pip install 'ctrlrun[{extra}]', or pip install '.[{extra}]' in a checkout"
        )
