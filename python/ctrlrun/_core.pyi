"""Type stub of ``ctrlrun._core``, the Rust extension (checked with ``mypy.stubtest``).

Timestamps are integer microseconds since the Unix epoch (UTC). Rows come back as frozen
objects with named fields (``EffectRow``, ``ApprovalRow``, ``ReceiptRow``, ``ReceiptCheckRow``),
read by one converter each in ``ctrlrun.store``.
"""

from pathlib import Path
from typing import Any, Callable, List, Optional, Tuple, final

__all__ = [
    "Template",
    "EffectRow",
    "ApprovalRow",
    "ReceiptRow",
    "ReceiptCheckRow",
    "Step",
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

@final
class EffectRow:
    @property
    def effect_key(self) -> str: ...
    @property
    def state(self) -> str: ...
    @property
    def action_id(self) -> str: ...
    @property
    def attempt(self) -> int: ...
    @property
    def created_at(self) -> int: ...
    @property
    def updated_at(self) -> int: ...
    @property
    def lease_expires_at(self) -> Optional[int]: ...
    @property
    def result(self) -> Optional[str]: ...
    @property
    def error(self) -> Optional[str]: ...
    @property
    def resolved_by(self) -> Optional[str]: ...
    @property
    def action(self) -> Optional[str]: ...
    @property
    def holder(self) -> Optional[str]: ...
    @property
    def args_digest(self) -> Optional[str]: ...
    @property
    def arg_digests(self) -> Optional[str]: ...
    @property
    def approval_id(self) -> Optional[str]: ...

@final
class ApprovalRow:
    @property
    def request_id(self) -> str: ...
    @property
    def action(self) -> str: ...
    @property
    def args_digest(self) -> str: ...
    @property
    def effect_key(self) -> str: ...
    @property
    def arguments(self) -> str: ...
    @property
    def state(self) -> str: ...
    @property
    def requested_at(self) -> int: ...
    @property
    def ttl(self) -> int: ...
    @property
    def expires_at(self) -> int: ...
    @property
    def decided_at(self) -> Optional[int]: ...
    @property
    def decided_by(self) -> Optional[str]: ...
    @property
    def note(self) -> Optional[str]: ...
    @property
    def used_at(self) -> Optional[int]: ...
    @property
    def used_by(self) -> Optional[str]: ...

@final
class ReceiptRow:
    @property
    def id(self) -> int: ...
    @property
    def chain(self) -> str: ...
    @property
    def effect_key(self) -> str: ...
    @property
    def request_id(self) -> Optional[str]: ...
    @property
    def seq(self) -> int: ...
    @property
    def prev_hash(self) -> Optional[str]: ...
    @property
    def hash(self) -> str: ...
    @property
    def at(self) -> int: ...
    @property
    def kind(self) -> str: ...
    @property
    def state(self) -> str: ...
    @property
    def action(self) -> Optional[str]: ...
    @property
    def action_id(self) -> Optional[str]: ...
    @property
    def attempt(self) -> Optional[int]: ...
    @property
    def args_digest(self) -> Optional[str]: ...
    @property
    def approval_id(self) -> Optional[str]: ...
    @property
    def actor(self) -> Optional[str]: ...
    @property
    def writer(self) -> Optional[str]: ...

@final
class ReceiptCheckRow:
    @property
    def receipts(self) -> int: ...
    @property
    def chains(self) -> int: ...
    @property
    def broken_id(self) -> Optional[int]: ...
    @property
    def broken_key(self) -> Optional[str]: ...
    @property
    def broken_why(self) -> Optional[str]: ...

@final
class Step:
    """The transition an attempt records; its payload is passed beside it."""

    BEGIN: Step
    COMMIT: Step
    FAIL: Step
    AMBIGUOUS: Step

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
    ) -> EffectRow: ...
    def request_approval(
        self,
        action: str,
        args_digest: str,
        effect_key: str,
        arguments: str,
        ttl_us: int,
        now_us: Optional[int] = None,
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
        self, state: Optional[str] = None, now_us: Optional[int] = None
    ) -> List[ApprovalRow]: ...
    def list_receipts(
        self, key: Optional[str] = None, limit: Optional[int] = None
    ) -> List[ReceiptRow]: ...
    def verify_receipts(self) -> ReceiptCheckRow: ...
    def transition(
        self,
        key: str,
        action_id: str,
        attempt: Optional[int],
        step: Step,
        payload: Optional[str] = None,
        now_us: Optional[int] = None,
    ) -> EffectRow: ...
    def record_outcome(
        self,
        pauses: List[float],
        key: str,
        action_id: str,
        attempt: Optional[int],
        step: Step,
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
    ) -> EffectRow: ...
    def resolve(
        self, key: str, state: str, resolver: str, now_us: Optional[int] = None
    ) -> EffectRow: ...
    def get_effect(self, key: str) -> Optional[EffectRow]: ...
    def list_effects(
        self,
        state: Optional[str] = None,
        prefix: Optional[str] = None,
        action: Optional[str] = None,
        limit: Optional[int] = None,
    ) -> List[EffectRow]: ...
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

    def __new__(cls) -> Completions: ...
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
    outcome: Step,
    payload: Optional[str] = None,
    now_us: Optional[int] = None,
) -> None: ...
def finish_background() -> None: ...
