"""The default store: the one ``protect`` uses when none is given (set with
:func:`set_default_store`, else named by the environment), the stores opened per URL and shared
by every caller, what the pytest plugin puts in place of an unset default, and the fork hooks
(a forked child opens its own connections)."""

from __future__ import annotations

import logging  # imported before our fork hooks: see register_at_fork below
import os
import threading
from typing import Callable, Dict, Optional, Tuple, Union

import ctrlrun._core as _core
from ctrlrun.errors import InvalidArgument
from ctrlrun.store.facade import Store, open_store

__all__ = [
    "default_store",
    "set_default_store",
    "default_url",
    "DEFAULT_STATE_PATH",
    "store_for_url",
    "store_at_hand",
    "use_when_default_is_unset",
]

#: The default SQLite file, relative to the working directory.
DEFAULT_STATE_PATH = os.path.join(".ctrlrun", "state.db")

_lock = threading.Lock()
_override: Optional[Store] = None
_opened: Dict[Tuple[str, str], Store] = {}


def default_url() -> str:
    """``CTRLRUN_STORE``, else ``CTRLRUN_STATE``, else ``.ctrlrun/state.db``. A variable that is
    set but empty is refused: falling back to a local file would quietly split the hosts that
    were meant to share one store."""
    for name in ("CTRLRUN_STORE", "CTRLRUN_STATE"):
        value = os.environ.get(name)
        if value is None:
            continue
        if not value.strip():
            raise InvalidArgument(
                f"{name} is set but empty; set it to the store (a URL such as "
                f"postgresql://user@host/db, or a SQLite path), or unset it to use "
                f"{DEFAULT_STATE_PATH} in the working directory"
            )
        return value
    return DEFAULT_STATE_PATH


def default_store() -> Store:
    """The store ``protect`` uses when none is given, looked up at call time.

    In order: the store set with :func:`set_default_store`; ``CTRLRUN_STORE`` (a URL);
    ``CTRLRUN_STATE`` (a SQLite path); ``.ctrlrun/state.db`` under the working directory.
    """
    if _override is not None:
        return _override
    fallback = _unset_default
    if fallback is not None and _no_store_in_environment():
        return fallback()
    return store_for_url(default_url())


def _no_store_in_environment() -> bool:
    return not any(name in os.environ for name in ("CTRLRUN_STORE", "CTRLRUN_STATE"))


# Under pytest (the ctrlrun plugin): what an unset default store becomes for the running test,
# so a test that forgets the fixture never writes into the working directory's real store.
_unset_default: Optional[Callable[[], Store]] = None


def use_when_default_is_unset(
    factory: Optional[Callable[[], Store]],
) -> Optional[Callable[[], Store]]:
    """While ``factory`` is set, a protected call with no store given and no env store uses
    ``factory()``, not ``.ctrlrun/state.db`` (the pytest plugin's temporary stores, one per
    scope); ``None`` ends it. Returns the factory it replaces."""
    global _unset_default
    previous, _unset_default = _unset_default, factory
    return previous


def store_at_hand(url: Optional[str]) -> Optional[Store]:
    """The store :func:`store_for_url` (``url``) or :func:`default_store` (``None``) would
    give, when that needs no I/O (set, or opened already); else ``None``."""
    if url is None:
        if _override is not None:
            return _override
        if _unset_default is not None and _no_store_in_environment():
            return None  # the pytest plugin's store for this test: made on first use
        url = default_url()
    return _opened.get((url, os.getcwd()))


def store_for_url(url: str) -> Store:
    """The store for ``url``, opened once per process and working directory and shared by
    every caller (``protect(store="...")`` and the default store)."""
    ident = (url, os.getcwd())
    store = _opened.get(ident)
    if store is None:
        with _lock:
            store = _opened.get(ident)
            if store is None:
                store = open_store(ident[0])
                _opened[ident] = store
                # Once per store and process: which store the calls go to (never a password).
                logging.getLogger("ctrlrun").info("ctrlrun: using the store %s", store.url)
    return store


def _forget_after_fork() -> None:
    # A forked child opens its own connections: the environment's default stores are re-opened
    # on first use. A store set with set_default_store stays, and refuses use in the child
    # with a clear error rather than silently switching stores.
    global _lock
    _lock = threading.Lock()
    _opened.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_after_fork)
    # SQLite must not be inside a call, or hold an open connection, at the instant of a fork:
    # the child would inherit its per-file locks and mutexes. Forks wait for calls in flight.
    # `before` hooks run in reverse order of registration: logging (imported above) takes its
    # module lock in its own hook, after ours, so a call in flight can still log while we wait.
    os.register_at_fork(
        before=_core.before_fork,
        after_in_parent=_core.after_fork_in_parent,
        after_in_child=_core.after_fork_in_child,
    )


def set_default_store(store: Union[Store, str, None]) -> Optional[Store]:
    """Make ``store`` (a Store or URL) the default for ``protect``; ``None`` restores the
    environment's. Returns the previous override (or ``None``)."""
    global _override
    if isinstance(store, str):
        store = open_store(store)
    elif store is not None and not isinstance(store, Store):
        raise InvalidArgument(f"expected a Store, a URL or None, got {type(store).__name__}")
    with _lock:
        previous, _override = _override, store
    return previous
