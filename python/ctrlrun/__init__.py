"""ctrlrun: an agent's side-effecting tools happen at most once per named consequence.

::

    import ctrlrun

    @ctrlrun.protect("stripe.refund", effect="refund:{payment_id}")
    def refund(payment_id: str, amount: int) -> dict: ...

The key ``refund:pi_1`` is reserved in one atomic write before ``refund`` runs; a retry, a
second agent or a second host proposing the same consequence is refused.
"""

from ctrlrun._core import __version__
from ctrlrun.call.protect import (
    DEFAULT_LEASE,
    PolicyWarning,
    extend_lease,
    idempotency_token,
    protect,
)
from ctrlrun.errors import (
    ActionDenied,
    AmbiguousEffect,
    ApprovalRequired,
    CTRLRunError,
    DuplicateEffect,
    EffectConflict,
    EffectKeyError,
    InvalidArgument,
    NotExecuted,
    PolicyError,
    StoreError,
    StoreLostWrite,
    StorePermissionDenied,
    StoreUnresolved,
    StoreWriteFailed,
)

# The store tells its decisions to the notifications through the hook ``hooks`` adds when
# imported: imported here, it is in place whichever of ctrlrun's modules a program imports.
from ctrlrun.notify import hooks as _notify_hooks  # noqa: F401
from ctrlrun.store.api import Store, default_store, open_store, set_default_store
from ctrlrun.store.approvals import ApprovalRecord, ApprovalState
from ctrlrun.store.approvers import ApproverRecord
from ctrlrun.store.policy import ActionRule
from ctrlrun.store.receipts import Receipt, ReceiptCheck
from ctrlrun.store.records import EffectRecord, EffectState, Reservation

__all__ = [
    "__version__",
    "protect",
    "idempotency_token",
    "extend_lease",
    "DEFAULT_LEASE",
    "EffectRecord",
    "EffectState",
    "Reservation",
    "Receipt",
    "ReceiptCheck",
    "ApprovalState",
    "ApprovalRecord",
    "ApproverRecord",
    "ActionRule",
    "Store",
    "open_store",
    "default_store",
    "set_default_store",
    "CTRLRunError",
    "InvalidArgument",
    "EffectKeyError",
    "NotExecuted",
    "DuplicateEffect",
    "AmbiguousEffect",
    "ActionDenied",
    "ApprovalRequired",
    "EffectConflict",
    "PolicyError",
    "PolicyWarning",
    "StoreError",
    "StorePermissionDenied",
    "StoreWriteFailed",
    "StoreUnresolved",
    "StoreLostWrite",
]
