"""Sign-in attempts, limited per account name and per client address: past ``limit`` failures
within ``window`` seconds, further attempts are refused (unchecked) until the oldest ages out."""

from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Callable, Deque, Dict, Optional, Tuple

__all__ = ["SignInLimiter"]


@dataclass(eq=False)  # one limiter is one set of counts: compared by identity
class SignInLimiter:
    """Failures counted per key (``account:NAME``, ``addr:HOST``), in memory, thread-safe."""

    per_account: int = 5
    per_address: int = 20
    window: float = 300.0
    clock: Callable[[], float] = time.monotonic
    max_keys: int = 100_000
    _failures: Dict[str, Deque[float]] = field(default_factory=dict, init=False, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)

    def _recent(self, key: str, now: float) -> Deque[float]:
        found = self._failures.get(key)
        if found is None:
            return deque()
        while found and found[0] <= now - self.window:
            found.popleft()
        if not found:
            del self._failures[key]
        return found

    def refused(self, account: str, address: str) -> Optional[float]:
        """``None`` when an attempt may be checked now; else the seconds until one may."""
        now = self.clock()
        with self._lock:
            waits = []
            for key, limit in self._keys(account, address):
                recent = self._recent(key, now)
                if len(recent) >= limit:
                    waits.append(recent[0] + self.window - now)
            return max(waits) if waits else None

    def failed(self, account: str, address: str) -> None:
        now = self.clock()
        with self._lock:
            if len(self._failures) >= self.max_keys:  # bounded memory: forget the stale
                for key in list(self._failures):
                    self._recent(key, now)
            for key, _ in self._keys(account, address):
                self._failures.setdefault(key, deque()).append(now)

    def succeeded(self, account: str) -> None:
        with self._lock:
            self._failures.pop(f"account:{account}", None)

    def _keys(self, account: str, address: str) -> Tuple[Tuple[str, int], ...]:
        return ((f"account:{account}", self.per_account), (f"addr:{address}", self.per_address))
