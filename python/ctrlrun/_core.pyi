"""Type stub of ``ctrlrun._core``, the Rust extension (checked with ``mypy.stubtest``).

Timestamps are integer microseconds since the Unix epoch (UTC). A record is the tuple
``(effect_key, state, action_id, attempt, created_at_us, updated_at_us, lease_expires_at_us,
result_json, error, resolved_by, (action, holder, args_digest, arg_digests, approval_id))``.
An approval request is ``(request_id, action, args_digest, effect_key, arguments_json, state,
(requested_at_us, ttl_us, expires_at_us, decided_at_us, decided_by, note, used_at_us,
used_by))``. A receipt is ``(id, chain, effect_key, request_id, seq, prev_hash, hash, at_us,
kind, state, (action, action_id, attempt, args_digest, approval_id, actor, writer))``.
"""

from pathlib import Path
from typing import Any, Callable, List, Optional, Tuple, final

__all__ = [
    "Template",
    "Store",
    "open_store",
    "drop_scratch_schema",
    "sqlite_path",
    "arg_digests",
    "before_fork",
    "after_fork_in_parent",
    "after_fork_in_child",
    "SCRATCH_SCHEMA_PREFIX",
    "__version__",
    # POSIX only:
    "Completions",
    "reserve_in_background",
    "transition_in_background",
    "finish_background",
]

_ReceiptTuple = Tuple[
    int,
    str,
    str,
    Optional[str],
    int,
    Optional[str],
    str,
    int,
    str,
    str,
    Tuple[
        Optional[str],
        Optional[str],
        Optional[int],
        Optional[str],
        Optional[str],
        Optional[str],
        Optional[str],
    ],
]
_RecordTuple = Tuple[
    str,
    str,
    str,
    int,
    int,
    int,
    Optional[int],
    Optional[str],
    Optional[str],
    Optional[str],
    Tuple[Optional[str], Optional[str], Optional[str], Optional[str], Optional[str]],
]
_ApprovalTuple = Tuple[
    str,
    str,
    str,
    str,
    str,
    str,
    Tuple[
        int, int, int, Optional[int], Optional[str], Optional[str], Optional[int], Optional[str]
    ],
]

__version__: str
SCRATCH_SCHEMA_PREFIX: str

@final
class Template:
    """A parsed effect-key template; raises ``InvalidArgument`` on a bad form."""

    def __new__(cls, source: str) -> "Template": ...
    @property
    def source(self) -> str: ...
    @property
    def placeholders(self) -> List[str]: ...
    def render(self, values: List[str]) -> str: ...

@final
class Store:
    """A store handle; every method releases the GIL while it waits on the database."""

    @property
    def url(self) -> str: ...
    @property
    def closed(self) -> bool: ...
    def reserve(
        self,
        key: str,
        action_id: str,
        lease_us: int,
        now_us: Optional[int] = None,
        begin: bool = False,
        action: Optional[str] = None,
        args: Optional[List[Tuple[str, str]]] = None,
        approval: bool = False,
    ) -> _RecordTuple: ...
    def request_approval(
        self,
        action: str,
        args_digest: str,
        effect_key: str,
        arguments: str,
        ttl_us: int,
        now_us: Optional[int] = None,
    ) -> _ApprovalTuple: ...
    def decide_approval(
        self,
        request_id: str,
        grant: bool,
        by: str,
        note: Optional[str] = None,
        now_us: Optional[int] = None,
    ) -> _ApprovalTuple: ...
    def get_approval(
        self, request_id: str, now_us: Optional[int] = None
    ) -> Optional[_ApprovalTuple]: ...
    def list_approvals(
        self, state: Optional[str] = None, now_us: Optional[int] = None
    ) -> List[_ApprovalTuple]: ...
    def list_receipts(
        self, key: Optional[str] = None, limit: Optional[int] = None
    ) -> List[_ReceiptTuple]: ...
    def verify_receipts(
        self,
    ) -> Tuple[int, int, Optional[Tuple[Optional[int], str, str]]]: ...
    def transition(
        self,
        key: str,
        action_id: str,
        attempt: Optional[int],
        kind: str,
        payload: Optional[str] = None,
        now_us: Optional[int] = None,
    ) -> _RecordTuple: ...
    def record_outcome(
        self,
        pauses: List[float],
        key: str,
        action_id: str,
        attempt: Optional[int],
        kind: str,
        payload: Optional[str] = None,
        now_us: Optional[int] = None,
    ) -> None: ...
    def extend_lease(
        self,
        key: str,
        action_id: str,
        attempt: Optional[int],
        until_us: int,
        now_us: Optional[int] = None,
    ) -> _RecordTuple: ...
    def resolve(
        self, key: str, state: str, resolver: str, now_us: Optional[int] = None
    ) -> _RecordTuple: ...
    def get_effect(self, key: str) -> Optional[_RecordTuple]: ...
    def list_effects(
        self,
        state: Optional[str] = None,
        prefix: Optional[str] = None,
        action: Optional[str] = None,
        limit: Optional[int] = None,
    ) -> List[_RecordTuple]: ...
    def prune(
        self,
        older_than_us: int,
        states: List[str],
        drop_receipts: bool = False,
        by: Optional[str] = None,
        batch: int = 1000,
        dry_run: bool = False,
        progress: Optional[Callable[[int], Any]] = None,
        now_us: Optional[int] = None,
    ) -> int: ...
    def close(self) -> None: ...

def open_store(url: str) -> Store: ...
def sqlite_path(url: str) -> Optional[Path]: ...
def drop_scratch_schema(url: str) -> None: ...
def arg_digests(parts: List[Tuple[str, str]]) -> Tuple[str, str]: ...

def before_fork() -> None: ...
def after_fork_in_parent() -> None: ...
def after_fork_in_child() -> None: ...

# POSIX only (src/py/background.rs): the store steps of async protected calls on core threads.
@final
class Completions:
    """One event loop's inbox of finished background steps."""

    def __new__(cls) -> "Completions": ...
    def fileno(self) -> int: ...
    def take(self) -> List[Tuple[int, bool, Any]]: ...
    def close(self) -> None: ...

def reserve_in_background(
    store: Store,
    completions: Completions,
    token: int,
    key: str,
    action_id: str,
    lease_us: int,
    now_us: Optional[int] = None,
    begin: bool = False,
    action: Optional[str] = None,
    args: Optional[List[Tuple[str, str]]] = None,
    approval: bool = False,
) -> None: ...
def transition_in_background(
    store: Store,
    completions: Completions,
    token: int,
    pauses: List[float],
    key: str,
    action_id: str,
    attempt: Optional[int],
    kind: str,
    payload: Optional[str] = None,
    now_us: Optional[int] = None,
) -> None: ...
def finish_background() -> None: ...
