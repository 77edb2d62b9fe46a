"""Approver accounts, kept in the store (``Store.add_approver`` and its siblings): only the
scrypt hash of each secret is stored; checking a sign-in is here."""

from __future__ import annotations

from datetime import datetime
from typing import Any, List, Optional, Protocol, cast

from ctrlrun.console.passwords import dummy_check, hash_secret, verify_secret
from ctrlrun.store.api import Store

__all__ = ["Account", "add", "reset", "remove", "listed", "get", "check"]


class Account(Protocol):
    """What the store keeps of an approver (``ctrlrun.store.approvers.ApproverRecord``)."""

    @property
    def name(self) -> str: ...
    @property
    def secret_hash(self) -> str: ...
    @property
    def created_at(self) -> datetime: ...
    @property
    def updated_at(self) -> datetime: ...


class _Approvers(Protocol):
    def add_approver(self, name: str, secret_hash: str) -> Any: ...
    def set_approver_secret(self, name: str, secret_hash: str) -> Any: ...
    def get_approver(self, name: str) -> Any: ...
    def list_approvers(self) -> Any: ...
    def remove_approver(self, name: str) -> bool: ...


def _approvers(store: Store) -> _Approvers:
    return cast(_Approvers, store)


def add(store: Store, name: str, secret: str) -> Account:
    """A new account ``name`` whose secret is ``secret`` (``InvalidArgument`` if it exists)."""
    return cast(Account, _approvers(store).add_approver(name, hash_secret(secret)))


def reset(store: Store, name: str, secret: str) -> Account:
    """Replace the secret of ``name`` (``InvalidArgument`` if there is no such account); its
    sessions end (see :func:`get`'s ``updated_at``)."""
    return cast(Account, _approvers(store).set_approver_secret(name, hash_secret(secret)))


def remove(store: Store, name: str) -> bool:
    return _approvers(store).remove_approver(name)


def listed(store: Store) -> List[Account]:
    return cast(List[Account], list(_approvers(store).list_approvers()))


def get(store: Store, name: str) -> Optional[Account]:
    return cast(Optional[Account], _approvers(store).get_approver(name))


def check(store: Store, name: str, secret: str) -> Optional[Account]:
    """The account ``name`` when ``secret`` is its secret, else ``None``. An unknown name takes
    as long as a wrong secret."""
    account = get(store, name) if name else None
    if account is None:
        dummy_check(secret)
        return None
    return account if verify_secret(secret, account.secret_hash) else None
