"""Receipts: one per committed write to an effect or an approval request, written by the store
in the same transaction as the write, each carrying the hash of the previous receipt of its
chain (an effect key's writes, or one approval request's events)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Dict, List, Optional

import ctrlrun._core as _core
from ctrlrun.errors import InvalidArgument
from ctrlrun.store.decode import from_row

__all__ = ["Receipt", "ReceiptCheck"]


@dataclass(frozen=True)
class Receipt:
    """One receipt, as read from the store.

    Attributes:
        id: increasing in the order receipts were written.
        chain: ``effect`` (the key's writes) or ``approval`` (one request's events).
        effect_key: the key written (for an approval, the key the call reserves).
        request_id: the approval request of an ``approval`` receipt.
        seq: its number in its chain, from 1.
        prev_hash / hash: the previous receipt's hash (``None`` for the first) and its own
            (SHA-256, hex).
        at: when the write was made (aware UTC).
        kind: ``reservation``, ``begin``, ``extension``, ``outcome``, ``lapse``,
            ``late_outcome``, ``resolution``, ``pruned`` (retention removed the row: the
            chain's last receipt; a later reservation of the key starts a new chain); for approvals ``requested``, ``granted``,
            ``denied``, ``consumed``, ``expired``.
        state: the state written.
        action / action_id / attempt: the action and the attempt (for ``consumed``,
            ``action_id`` is the attempt that used the grant; approval receipts have no
            ``attempt``).
        args_digest: the digest of the call's canonical arguments.
        approval_id: the approval request the attempt used (an approval's own id).
        actor: who decided (the resolver of an effect, the approver of a request).
        writer: the process that wrote it, ``host:pid``.
    """

    id: int
    chain: str
    effect_key: str
    request_id: Optional[str]
    seq: int
    prev_hash: Optional[str]
    hash: str
    at: datetime
    kind: str
    state: str
    action: Optional[str]
    action_id: Optional[str]
    attempt: Optional[int]
    args_digest: Optional[str]
    approval_id: Optional[str]
    actor: Optional[str]
    writer: Optional[str]

    def to_json(self) -> Dict[str, Any]:
        """A JSON-ready dict (the time as ISO 8601 text in UTC, ``Z``)."""
        out: Dict[str, Any] = {}
        for name in self.__dataclass_fields__:
            value = getattr(self, name)
            if isinstance(value, datetime):
                value = value.isoformat().replace("+00:00", "Z")
            out[name] = value
        return out


@dataclass(frozen=True)
class ReceiptCheck:
    """What :meth:`Store.verify_receipts` found.

    Attributes:
        ok: every chain is intact.
        receipts / chains: how many were checked.
        broken_receipt: the id of the first receipt found wrong (``None`` when none is, or
            when what is wrong is a row or a missing last receipt).
        broken_key: the effect key of the first broken chain.
        reason: what is wrong, in one sentence naming the receipt and its chain.
    """

    ok: bool
    receipts: int
    chains: int
    broken_receipt: Optional[int] = None
    broken_key: Optional[str] = None
    reason: Optional[str] = None

    def to_json(self) -> Dict[str, Any]:
        return dict(self.__dict__)


def receipt_from_core(row: _core.ReceiptRow) -> Receipt:
    """The core's receipt row as a :class:`Receipt`."""
    return from_row(Receipt, row)


def check_from_core(row: _core.ReceiptCheckRow) -> ReceiptCheck:
    """What the core's check of every chain found, as a :class:`ReceiptCheck`."""
    if row.broken_key is None:
        return ReceiptCheck(ok=True, receipts=row.receipts, chains=row.chains)
    return ReceiptCheck(
        ok=False,
        receipts=row.receipts,
        chains=row.chains,
        broken_receipt=row.broken_id,
        broken_key=row.broken_key,
        reason=row.broken_why,
    )


class ReceiptMethods:
    """The receipt methods of :class:`ctrlrun.Store` (kept here, with the records they read)."""

    __slots__ = ()
    _core: _core.Store

    def list_receipts(
        self, key: Optional[str] = None, *, limit: Optional[int] = None
    ) -> List[Receipt]:
        """The receipts of ``key`` (or of every key), oldest first; with ``limit``, the latest
        that many. A refusal writes nothing and so has no receipt."""
        if limit is not None and (
            isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= 2**63 - 1
        ):
            raise InvalidArgument(f"limit must be a positive integer, got {limit!r}")
        return [receipt_from_core(t) for t in self._core.list_receipts(key, limit)]

    def verify_receipts(self, key: Optional[str] = None) -> ReceiptCheck:
        """Check every chain: each receipt against its hash (a changed receipt), each chain's
        order (a deleted or reordered receipt), each row's head against its last receipt (a
        deleted last receipt), and that a chain without a row ends with a ``pruned`` receipt
        (a row deleted outside ctrlrun). Reports the first thing wrong. With ``key``, only
        that key's chains (its effect's and its approval requests'), reading nothing else."""
        return check_from_core(self._core.verify_receipts(key))
