"""Approver accounts, kept in the store (``Store.add_approver`` and its siblings): only the
scrypt hash of each secret is stored; checking a sign-in is here."""

from __future__ import annotations

from typing import List, Optional

from ctrlrun.console.passwords import dummy_check, hash_secret, verify_secret
from ctrlrun.errors import InvalidArgument
from ctrlrun.store.api import Store
from ctrlrun.store.approvers import ApproverRecord

__all__ = ["add", "reset", "remove", "listed", "get", "check"]


def add(store: Store, name: str, secret: str) -> ApproverRecord:
    """A new account ``name`` whose secret is ``secret`` (``InvalidArgument`` if it exists)."""
    return store.add_approver(name, hash_secret(secret))


def reset(store: Store, name: str, secret: str) -> ApproverRecord:
    """Replace the secret of ``name`` (``InvalidArgument`` if there is no such account); its
    console sessions end (a session remembers the hash it was started with)."""
    return store.set_approver_secret(name, hash_secret(secret))


def remove(store: Store, name: str) -> bool:
    return store.remove_approver(name)


def listed(store: Store) -> List[ApproverRecord]:
    return store.list_approvers()


def get(store: Store, name: str) -> Optional[ApproverRecord]:
    """The account ``name``, or ``None``; also for a name no account can have (a space at
    either end, too long, a control character: what a sign-in form or a proxy header may
    carry)."""
    try:
        return store.get_approver(name)
    except InvalidArgument:
        return None


def check(store: Store, name: str, secret: str) -> Optional[ApproverRecord]:
    """The account ``name`` when ``secret`` is its secret, else ``None``. An unknown name takes
    as long as a wrong secret."""
    account = get(store, name) if name else None
    if account is None:
        dummy_check(secret)
        return None
    return account if verify_secret(secret, account.secret_hash) else None
