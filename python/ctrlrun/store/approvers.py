"""The accounts of the people who decide in the console (``ctrlrun approvers``), as read from
the store. The store keeps a hash of each secret, never the secret (hashing is
``ctrlrun.console.passwords``')."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Callable, List, Optional

import ctrlrun._core as _core
from ctrlrun.store.decode import from_row

__all__ = ["ApproverRecord", "ApproverMethods", "check_name", "check_approver_name"]


@dataclass(frozen=True)
class ApproverRecord:
    """One approver account.

    Attributes:
        name: what a grant, denial or resolution made in the console records.
        secret_hash: the hash of the account's secret (its format is the console's).
        created_at / updated_at: aware UTC datetimes (the last secret change).
    """

    name: str
    secret_hash: str
    created_at: datetime
    updated_at: datetime

    def __repr__(self) -> str:  # the hash stays out of logs and tracebacks
        return f"ApproverRecord(name={self.name!r}, created_at={self.created_at.isoformat()})"


def check_name(what: str, name: object) -> str:
    """``name`` when the core records it as a person's or an agent's name, else
    ``InvalidArgument`` naming ``what``: no control, bidirectional or invisible format
    character, not empty once normalised, at most 200 characters (the rule is the core's, and
    is applied again where the name is written)."""
    return _core.check_name(what, name)


def check_approver_name(name: object) -> str:
    """``name`` when an approver account may have it (:func:`check_name`, and no space at
    either end), else ``InvalidArgument``."""
    return _core.check_approver_name(name)


def _approver(row: _core.ApproverRow) -> ApproverRecord:
    return from_row(ApproverRecord, row)


class ApproverMethods:
    """The approver account methods of :class:`ctrlrun.Store`."""

    __slots__ = ()
    _core: _core.Store
    _now_us: Callable[[], Optional[int]]

    def add_approver(self, name: str, secret_hash: str) -> ApproverRecord:
        """Create the account ``name`` with the hash of its secret; ``InvalidArgument`` when
        the name has one."""
        return _approver(self._core.put_approver(name, secret_hash, True, self._now_us()))

    def set_approver_secret(self, name: str, secret_hash: str) -> ApproverRecord:
        """Replace the secret hash of the account ``name``; ``InvalidArgument`` when there is
        none."""
        return _approver(self._core.put_approver(name, secret_hash, False, self._now_us()))

    def get_approver(self, name: str) -> Optional[ApproverRecord]:
        """The account ``name``, or ``None``."""
        row = self._core.get_approver(name)
        return None if row is None else _approver(row)

    def list_approvers(self) -> List[ApproverRecord]:
        """Every account, by name."""
        return [_approver(r) for r in self._core.list_approvers()]

    def remove_approver(self, name: str) -> bool:
        """Delete the account ``name``; whether there was one."""
        return self._core.remove_approver(name)
