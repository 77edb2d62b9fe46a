"""The exceptions ctrlrun raises. Every one is importable from ``ctrlrun``.

::

    CTRLRunError
    ├── InvalidArgument        wiring errors, impossible transitions
    ├── EffectKeyError         the template cannot be resolved from the arguments
    ├── NotExecuted            raised BY an executor: "provably nothing happened"
    ├── DuplicateEffect        .state ("committed" | "in_progress"), .effect_key, .record
    │   └── EffectConflict     the same key with other arguments or another action (.fields)
    ├── AmbiguousEffect        .effect_key, .action_id (the holder), .record
    ├── ApprovalRequired       a person must approve this call first (.request_id, .arguments)
    ├── ActionDenied           the policy's decision is deny, or a person denied the call
    ├── PolicyError            a policy file that cannot be loaded (.file, .line, .field)
    └── StoreError
        ├── StoreWriteFailed   nothing committed; safe to retry the write
        ├── StorePermissionDenied  the server refused: this role lacks the duty
        ├── StoreUnresolved    COMMIT outcome unknown and the re-read failed
        └── StoreLostWrite     the store lost a write it acknowledged (.marked, .record)

Exceptions pickle with their attributes (they cross process boundaries in worker pools).
"""

from __future__ import annotations

import types
from typing import Any, Callable, Dict, Optional, Tuple

from ctrlrun._records import EffectRecord

__all__ = [
    "CTRLRunError",
    "InvalidArgument",
    "EffectKeyError",
    "NotExecuted",
    "DuplicateEffect",
    "EffectConflict",
    "AmbiguousEffect",
    "ApprovalRequired",
    "ActionDenied",
    "PolicyError",
    "StoreError",
    "StorePermissionDenied",
    "StoreWriteFailed",
    "StoreUnresolved",
    "StoreLostWrite",
]


class CTRLRunError(Exception):
    """Base class of every ctrlrun error."""


class InvalidArgument(CTRLRunError):
    """A wiring error (bad template, lease, URL, name) or an impossible transition."""


class EffectKeyError(CTRLRunError):
    """The effect template cannot be resolved from the call's arguments.

    Raised before anything is reserved or run: a placeholder names no parameter (at decoration
    time), or a value is ``None``, ``""``, a ``bool``, a ``float``, a container or another type
    that does not name a consequence unambiguously.
    """


class NotExecuted(CTRLRunError):
    """Raise this FROM an executor to say that provably nothing happened.

    The effect becomes ``failed`` and a later call may run it again (as the next attempt).
    Raise anything else and the effect becomes ``ambiguous``.
    """


class _FoundRecord(Exception):
    """``.record``: the row that caused a refusal. A refusal raised by the store carries the
    core's row (``_row``) and the converter that reads it (``_decode``, set by the binding),
    and converts it on first access: refusals are a hot path and most callers never look."""

    _record: Optional[EffectRecord] = None
    _row: Any = None
    _decode: Optional[Callable[[Any], EffectRecord]] = None

    @property
    def record(self) -> Optional[EffectRecord]:
        if self._record is None and self._row is not None and self._decode is not None:
            self._record = self._decode(self._row)
        return self._record

    def __reduce__(self) -> Tuple[Any, ...]:
        # The core's row crosses processes as plain data, still converted on first access
        # there: a row no record can hold (edited by hand) raises when read, not when pickled.
        state = dict(self.__dict__)
        row = state.get("_row")
        if row is not None:
            names = [n for n in dir(type(row)) if not n.startswith("_")]
            state["_row"] = types.SimpleNamespace(**{n: getattr(row, n) for n in names})
        return (type(self), self.args, state)


class DuplicateEffect(_FoundRecord, CTRLRunError):
    """The effect key is already ``committed``, or another attempt holds a live lease on it.

    Attributes:
        state: ``"committed"`` or ``"in_progress"``.
        effect_key: the key that was refused.
        record: the :class:`~ctrlrun.EffectRecord` found, or ``None``.
    """

    def __init__(
        self,
        message: str,
        *,
        state: Optional[str] = None,
        effect_key: Optional[str] = None,
        record: Optional[EffectRecord] = None,
    ) -> None:
        super().__init__(message)
        self.state = state
        self.effect_key = effect_key
        self._record = record


class EffectConflict(DuplicateEffect):
    """The key is taken (``committed`` or ``in_progress``) by a call with other arguments, or
    by another action: not a plain retry of the same call.

    Attributes (besides :class:`DuplicateEffect`'s):
        fields: the names of the arguments whose values differ (never the values), sorted.
        other_action: the holder's action name when another action proposed the key.
    """

    def __init__(
        self,
        message: str,
        *,
        state: Optional[str] = None,
        effect_key: Optional[str] = None,
        record: Optional[EffectRecord] = None,
        fields: Tuple[str, ...] = (),
        other_action: Optional[str] = None,
    ) -> None:
        super().__init__(message, state=state, effect_key=effect_key, record=record)
        self.fields = tuple(fields)
        self.other_action = other_action


class ApprovalRequired(CTRLRunError):
    """This call needs a person's approval of its action and arguments: nothing was reserved
    and the function did not run. A person runs ``ctrlrun approve REQUEST_ID --by NAME`` (or
    ``Store.grant_approval``); the same call retried then runs once.

    Attributes:
        request_id: the pending request (``apr_`` + 32 hex digits).
        action: the action name.
        effect_key: the key the call would reserve.
        arguments: what the approver is shown: every canonical argument by name.
        expires_at: when the request lapses without a decision (aware UTC datetime).
        not_bound: the names in ``arguments`` the approval is not bound to
            (``fingerprint_exclude``).
    """

    def __init__(
        self,
        message: str,
        *,
        request_id: Optional[str] = None,
        action: Optional[str] = None,
        effect_key: Optional[str] = None,
        arguments: Optional[Dict[str, Any]] = None,
        expires_at: Any = None,
        not_bound: Tuple[str, ...] = (),
    ) -> None:
        super().__init__(message)
        self.request_id = request_id
        self.action = action
        self.effect_key = effect_key
        self.arguments = arguments
        self.expires_at = expires_at
        self.not_bound = tuple(not_bound)


class ApprovalNeeded(CTRLRunError):
    """Internal: the core found no grant in force for a call that needs one (the decorator
    then asks for an approval and raises :class:`ApprovalRequired`)."""


class AmbiguousEffect(_FoundRecord, CTRLRunError):
    """The effect key is ``ambiguous``: a blind retry is refused until a person resolves it.

    Attributes:
        effect_key: the key.
        action_id: the attempt that held it when its outcome became unknown.
        record: the :class:`~ctrlrun.EffectRecord` found, or ``None``.
    """

    def __init__(
        self,
        message: str,
        *,
        effect_key: Optional[str] = None,
        action_id: Optional[str] = None,
        record: Optional[EffectRecord] = None,
    ) -> None:
        super().__init__(message)
        self.effect_key = effect_key
        self.action_id = action_id
        self._record = record


class ActionDenied(CTRLRunError):
    """The action may not run: the policy's decision is ``deny``, or a person denied this call
    (its approval request). Nothing was reserved or run.

    Attributes:
        action: the action name.
        policy: the policy file's path (a policy denial), or ``None``.
        request_id: the denied approval request, or ``None``.
        denied_by: who denied it, or ``None``.
    """

    def __init__(
        self,
        message: str,
        *,
        action: Optional[str] = None,
        policy: Optional[str] = None,
        request_id: Optional[str] = None,
        denied_by: Optional[str] = None,
    ) -> None:
        super().__init__(message)
        self.action = action
        self.policy = policy
        self.request_id = request_id
        self.denied_by = denied_by


class PolicyError(CTRLRunError):
    """A policy file that cannot be loaded.

    Attributes:
        file: the file's path.
        line: the 1-based line of the problem, or ``None`` when it concerns the whole file.
        field: the field at fault (``"schema"``, ``"actions.stripe.refund.effect"``, ...).
    """

    def __init__(
        self,
        message: str,
        *,
        file: Optional[str] = None,
        line: Optional[int] = None,
        field: Optional[str] = None,
    ) -> None:
        super().__init__(message)
        self.file = file
        self.line = line
        self.field = field


class StoreError(CTRLRunError):
    """The store could not be opened, read or written."""


class StoreWriteFailed(StoreError):
    """The write failed before COMMIT: nothing was committed, retrying the write is safe."""


class StorePermissionDenied(StoreError):
    """The database server refused the call for want of a privilege: the store's role lacks the
    duty the call needs (an agent's credentials cannot grant, deny or resolve; docs/roles.md).

    Nothing was written. Retrying with the same credentials is refused the same way.
    """


class StoreUnresolved(StoreError):
    """COMMIT's outcome is unknown and the re-read that should settle it failed.

    Nothing more was written. The message says whether the executor ran: not for a reservation
    (the key may stay reserved until its lease lapses; a person then resolves it), already for
    an outcome write. ``effect_key`` and ``action_id`` name the write's key and attempt (the
    action id an operator looks for in the logs); either is ``None`` where the write had none.
    """

    def __init__(
        self, message: str, *, effect_key: Optional[str] = None, action_id: Optional[str] = None
    ) -> None:
        super().__init__(message)
        self.effect_key = effect_key
        self.action_id = action_id


class StoreLostWrite(_FoundRecord, StoreError):
    """The store lost a write it had acknowledged to this process: the holder's next write
    found its key with no row, or held by an earlier attempt, or by another action under the
    same attempt number. Only a store that went back in time does that: a failover to a
    standby that had not received the write (asynchronous replication), a restore from a
    backup, a commit acknowledged before it was durable. The effect may run, or have run,
    twice.

    ``effect_key`` and ``action_id`` name the lost attempt; ``record`` is the row the write met
    (``None``: no row). ``marked`` is ``True`` when the key was then marked ``ambiguous`` for a
    person (the outcome write of an executor that ran, over a row the agent's duty may mark),
    and ``effect.ambiguous`` was notified. Never retry it blindly (docs/postgres.md, "Durability
    and replication").
    """

    def __init__(
        self, message: str, *, effect_key: str = "", action_id: str = "", marked: bool = False
    ) -> None:
        super().__init__(message)
        self.effect_key = effect_key
        self.action_id = action_id
        self.marked = marked
