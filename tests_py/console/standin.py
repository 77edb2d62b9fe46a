"""A stand-in for the store's approver accounts (``Store.add_approver`` and its siblings, the
lead's part of issue 33) for as long as the core on this branch lacks them: installed only when
``Store`` has no ``add_approver``; kept per store URL in this process's memory. The console
server of these tests runs in this process, so it reads what the tests add. Remove this file
once the core lands (the tests then use the real methods unchanged)."""

from __future__ import annotations

import threading
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from typing import Dict, List, Optional

from ctrlrun.errors import InvalidArgument
from ctrlrun.store.api import Store

HAS_CORE_ACCOUNTS = hasattr(Store, "add_approver")


@dataclass(frozen=True)
class _Approver:
    name: str
    secret_hash: str
    created_at: datetime
    updated_at: datetime


_tables: Dict[str, Dict[str, _Approver]] = {}
_lock = threading.Lock()


def _table(store: Store) -> Dict[str, _Approver]:
    return _tables.setdefault(store.url, {})


def _add(self: Store, name: str, secret_hash: str) -> _Approver:
    with _lock:
        t = _table(self)
        if name in t:
            raise InvalidArgument(f"an approver named {name!r} exists already")
        now = datetime.now(timezone.utc)
        t[name] = _Approver(name, secret_hash, now, now)
        return t[name]


def _set(self: Store, name: str, secret_hash: str) -> _Approver:
    with _lock:
        t = _table(self)
        if name not in t:
            raise InvalidArgument(f"no approver named {name!r}")
        t[name] = replace(t[name], secret_hash=secret_hash, updated_at=datetime.now(timezone.utc))
        return t[name]


def _get(self: Store, name: str) -> Optional[_Approver]:
    with _lock:
        return _table(self).get(name)


def _list(self: Store) -> List[_Approver]:
    with _lock:
        return sorted(_table(self).values(), key=lambda a: a.name)


def _remove(self: Store, name: str) -> bool:
    with _lock:
        return _table(self).pop(name, None) is not None


def install() -> None:
    if HAS_CORE_ACCOUNTS:
        return
    Store.add_approver = _add  # type: ignore[attr-defined]
    Store.set_approver_secret = _set  # type: ignore[attr-defined]
    Store.get_approver = _get  # type: ignore[attr-defined]
    Store.list_approvers = _list  # type: ignore[attr-defined]
    Store.remove_approver = _remove  # type: ignore[attr-defined]
