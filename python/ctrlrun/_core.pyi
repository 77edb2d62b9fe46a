"""Type stub of ``ctrlrun._core``, the Rust extension (checked with ``mypy.stubtest``).

Timestamps are integer microseconds since the Unix epoch (UTC). Rows come back as frozen
objects with named fields (``EffectRow``, ``ApprovalRow``, ``ReceiptRow``, ``ReceiptCheckRow``),
read by one converter each in ``ctrlrun.store``.
"""

from pathlib import Path
from typing import Any, Callable, Final, List, Literal, Optional, Sequence, Tuple, final

__all__ = [
    "Template",
    "EffectRow",
    "ApprovalRow",
    "ApproverRow",
    "ReceiptRow",
    "ReceiptCheckRow",
    "Step",
    "ApprovalQuery",
    "ReserveRequest",
    "OutcomeRequest",
    "Store",
    "open_store",
    "drop_scratch_schema",
    "store_roles",
    "sqlite_path",
    "url_backend",
    "arg_digests",
    "before_fork",
    "after_fork_in_parent",
    "after_fork_in_child",
    "check_name",
    "check_approver_name",
    "SCRATCH_SCHEMA_PREFIX",
    "__version__",
    # POSIX only:
    "Completions",
    "step_soon",
    "finish_background",
]

#: Where an effect stands (``ctrlrun.EffectState``'s values). A state passed in is one of these
#: (an ``EffectState`` is one); anything else is refused as ``InvalidArgument``.
_EffectState = Literal["reserved", "executing", "committed", "failed", "ambiguous"]
#: Where an approval request stands (``ctrlrun.ApprovalState``'s values).
_ApprovalState = Literal["pending", "granted", "denied", "used", "expired"]
#: What a store's policy says of an action.
_Decision = Literal["allow", "approve", "deny"]

@final
class EffectRow:
    effect_key: Final[str]
    state: Final[_EffectState]
    action_id: Final[str]
    attempt: Final[int]
    created_at: Final[int]
    updated_at: Final[int]
    lease_expires_at: Final[Optional[int]]
    result: Final[Optional[str]]
    error: Final[Optional[str]]
    resolved_by: Final[Optional[str]]
    action: Final[Optional[str]]
    holder: Final[Optional[str]]
    args_digest: Final[Optional[str]]
    arg_digests: Final[Optional[str]]
    approval_id: Final[Optional[str]]

@final
class ApprovalRow:
    request_id: Final[str]
    action: Final[str]
    args_digest: Final[str]
    effect_key: Final[str]
    arguments: Final[str]
    state: Final[_ApprovalState]
    requested_at: Final[int]
    ttl: Final[int]
    expires_at: Final[int]
    decided_at: Final[Optional[int]]
    decided_by: Final[Optional[str]]
    note: Final[Optional[str]]
    used_at: Final[Optional[int]]
    used_by: Final[Optional[str]]
    requested_by: Final[Optional[str]]
    approvals_needed: Final[int]
    granted_by: Final[List[str]]
    created: Final[bool]

@final
class ApproverRow:
    name: Final[str]
    secret_hash: Final[str]
    created_at: Final[int]
    updated_at: Final[int]

@final
class ReceiptRow:
    id: Final[int]
    chain: Final[str]
    effect_key: Final[str]
    request_id: Final[Optional[str]]
    seq: Final[int]
    prev_hash: Final[Optional[str]]
    hash: Final[str]
    at: Final[int]
    kind: Final[str]
    state: Final[str]
    action: Final[Optional[str]]
    action_id: Final[Optional[str]]
    attempt: Final[Optional[int]]
    args_digest: Final[Optional[str]]
    approval_id: Final[Optional[str]]
    actor: Final[Optional[str]]
    writer: Final[Optional[str]]

@final
class ReceiptCheckRow:
    receipts: Final[int]
    chains: Final[int]
    broken_id: Final[Optional[int]]
    broken_key: Final[Optional[str]]
    broken_why: Final[Optional[str]]

@final
class Step:
    """The transition an attempt records; its payload is passed beside it."""

    BEGIN: Step
    COMMIT: Step
    FAIL: Step
    AMBIGUOUS: Step

@final
class ApprovalQuery:
    def __new__(
        cls,
        states: Sequence[_ApprovalState] = ...,
        action: Optional[str] = None,
        prefix: Optional[str] = None,
        requested_by: Optional[str] = None,
        after: Optional[Tuple[int, str]] = None,
        newest_first: bool = False,
        limit: Optional[int] = None,
    ) -> ApprovalQuery: ...

@final
class ReserveRequest:
    """A reservation, converted once (text, integers): ``Store.reserve`` and the async paths
    write it. A text argument that is not a ``str`` or holds a lone surrogate, or an integer
    out of range, raises ``InvalidArgument`` here."""

    def __new__(
        cls,
        key: str,
        action_id: str,
        lease_us: int,
        now_us: Optional[int] = None,
        begin: bool = False,
        action: Optional[str] = None,
        args: Optional[Sequence[Tuple[str, str]]] = None,
        approval: bool = False,
    ) -> ReserveRequest: ...

@final
class OutcomeRequest:
    """An attempt's transition, converted once: ``Store.transition`` makes one try,
    ``Store.record_outcome`` and the async paths re-issue it after each of ``pauses``."""

    def __new__(
        cls,
        key: str,
        action_id: str,
        attempt: Optional[int],
        step: Step,
        payload: Optional[str] = None,
        now_us: Optional[int] = None,
        pauses: Sequence[float] = ...,
    ) -> OutcomeRequest: ...

__version__: str
SCRATCH_SCHEMA_PREFIX: str

@final
class Template:
    """A parsed effect-key template; raises ``InvalidArgument`` on a bad form."""

    def __new__(cls, source: str) -> Template: ...
    @property
    def source(self) -> str: ...
    @property
    def placeholders(self) -> List[str]: ...
    def render(self, values: List[str]) -> str:
        """``EffectKeyError`` when a value holds a lone surrogate."""

@final
class Store:
    """A store handle; every method releases the GIL while it waits on the database."""

    @property
    def url(self) -> str: ...
    @property
    def backend(self) -> str: ...
    @property
    def closed(self) -> bool: ...
    def posture(self) -> List[Tuple[str, Literal["pass", "fail", "not visible", "info"], str]]: ...
    def reserve(self, request: ReserveRequest) -> EffectRow: ...
    def request_approval(
        self,
        action: str,
        args_digest: str,
        effect_key: str,
        arguments: str,
        ttl_us: int,
        now_us: Optional[int] = None,
        requested_by: Optional[str] = None,
        approvals_needed: int = ...,
    ) -> ApprovalRow: ...
    def decide_approval(
        self,
        request_id: str,
        grant: bool,
        by: str,
        note: Optional[str] = None,
        now_us: Optional[int] = None,
    ) -> ApprovalRow: ...
    def get_approval(
        self, request_id: str, now_us: Optional[int] = None
    ) -> Optional[ApprovalRow]: ...
    def list_approvals(
        self, query: ApprovalQuery, now_us: Optional[int] = None
    ) -> List[ApprovalRow]: ...
    def count_approvals(
        self, query: ApprovalQuery, cap: int, now_us: Optional[int] = None
    ) -> int: ...
    def put_approver(
        self, name: str, secret_hash: str, create: bool, now_us: Optional[int] = None
    ) -> ApproverRow: ...
    def get_approver(self, name: str) -> Optional[ApproverRow]: ...
    def list_approvers(self) -> List[ApproverRow]: ...
    def remove_approver(self, name: str) -> bool: ...
    def policy(self) -> List[Tuple[str, _Decision, int]]: ...
    def apply_policy(self, rules: Sequence[Tuple[str, str, int]]) -> None: ...
    def list_receipts(
        self, key: Optional[str] = None, limit: Optional[int] = None
    ) -> List[ReceiptRow]: ...
    def verify_receipts(self, key: Optional[str] = None) -> ReceiptCheckRow: ...
    def transition(self, request: OutcomeRequest) -> EffectRow: ...
    def record_outcome(self, request: OutcomeRequest) -> None: ...
    def extend_lease(
        self,
        key: str,
        action_id: str,
        attempt: Optional[int],
        until_us: int,
        now_us: Optional[int] = None,
    ) -> EffectRow: ...
    def resolve(
        self,
        key: str,
        state: str,
        resolver: str,
        now_us: Optional[int] = None,
        note: Optional[str] = None,
    ) -> EffectRow: ...
    def get_effect(self, key: str) -> Optional[EffectRow]: ...
    def list_effects(
        self,
        state: Optional[str] = None,
        prefix: Optional[str] = None,
        action: Optional[str] = None,
        limit: Optional[int] = None,
        after: Optional[Tuple[int, str]] = None,
        newest_first: bool = False,
    ) -> List[EffectRow]: ...
    def prune(
        self,
        older_than_us: int,
        states: Sequence[str],
        drop_receipts: bool = False,
        by: Optional[str] = None,
        batch: int = ...,
        dry_run: bool = False,
        progress: Optional[Callable[[int], Any]] = None,
        now_us: Optional[int] = None,
    ) -> int: ...
    def close(self) -> None: ...

def open_store(url: str) -> Store: ...
def sqlite_path(url: str) -> Optional[Path]: ...
def url_backend(url: str) -> str: ...
def drop_scratch_schema(url: str) -> None: ...
def store_roles(url: str, agent: str, approver: str, print_only: bool) -> str: ...
def arg_digests(parts: List[Tuple[str, str]]) -> Tuple[str, str]: ...
def before_fork() -> None: ...
def after_fork_in_parent() -> None: ...
def after_fork_in_child() -> None: ...
def check_name(what: str, name: object) -> str: ...
def check_approver_name(name: object) -> str: ...

# POSIX only (src/py/background.rs): the store steps of async protected calls on core threads.
@final
class Completions:
    """One event loop's inbox of finished background steps."""

    def __new__(cls) -> Completions: ...
    def fileno(self) -> int: ...
    def take(self) -> List[Tuple[int, bool, Any]]: ...
    def close(self) -> None: ...

def step_soon(
    store: Store, completions: Completions, token: int, request: ReserveRequest | OutcomeRequest
) -> Optional[Tuple[bool, Any]]: ...
def finish_background() -> None: ...
