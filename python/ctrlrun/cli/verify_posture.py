"""The posture part of ``ctrlrun verify``: what the store's set-up does to the promise beyond
ctrlrun's own writes (durable commits, replication, a pooler in front), as the store reads it
at open (``Store.posture``), on a scratch store of the same URL. A line that fails (a risk
the URL accepted by name) fails ``verify``; what the store's credentials cannot see is said,
never passed over."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, List, Sequence

from ctrlrun.cli._scratch import scratch_store
from ctrlrun.store.api import open_store

__all__ = ["PostureLine", "read_posture", "posture_failed"]


@dataclass(frozen=True)
class PostureLine:
    check: str  # "durable commits" | "replication" | "pooler"
    standing: str  # "pass" | "fail" | "not visible" | "info"
    detail: str

    def line(self) -> str:
        return f"posture {self.check}: {self.standing.upper()} - {self.detail}"


def read_posture(user_url: str, progress: Callable[[str], None]) -> List[PostureLine]:
    """The posture of ``user_url``'s server, read by opening a scratch store with the same
    URL (its options included), removed afterwards."""
    url, cleanup = scratch_store(user_url)
    try:
        progress("posture: durable commits, replication and poolers of the store's server")
        with open_store(url) as store:
            return [PostureLine(*line) for line in store.posture()]
    finally:
        cleanup()


def posture_failed(lines: Sequence[PostureLine]) -> bool:
    return any(line.standing == "fail" for line in lines)
