"""Sign-in attempts, limited so that guessing stays bounded while a person is seldom locked out
by someone else's failures.

Three budgets, each counting failed attempts within its window:

* per account *and* client address (``per_pair`` in ``window``): the guesser at one address is
  stopped on that account; the same account from another address is not;
* per client address (``per_address`` in ``window``): one address trying many accounts;
* per account (``per_account`` in ``account_window``, larger and slower): many addresses
  guessing one account. It bounds the guesses on an account whatever their addresses; only
  an attack from many addresses at once can use it up.

An attempt is counted (reserved) under the lock *before* its slow password check, so that
concurrent attempts cannot all pass a check made before any of them failed; a success gives
its reservation back. Keys are fixed-size digests (a 60 KB name costs what a short one does)
and at most ``max_keys`` are kept: memory is bounded in bytes."""

from __future__ import annotations

import hashlib
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Tuple, Union

__all__ = ["SignInLimiter", "Attempt", "Refused"]

_PAIR, _ADDRESS, _ACCOUNT = b"p", b"a", b"c"


@dataclass(frozen=True)
class Attempt:
    """A reserved attempt: counted as a failure until :meth:`SignInLimiter.succeeded`."""

    keys: Tuple[bytes, ...]
    stamp: float


@dataclass(frozen=True)
class Refused:
    """Not checked now: ``wait`` seconds until an attempt may be (``busy``: the limiter is
    full of recent failures from elsewhere)."""

    wait: float
    busy: bool = False


def _key(kind: bytes, *parts: str) -> bytes:
    digest = hashlib.blake2b(digest_size=16)
    for part in parts:
        data = part.encode("utf-8", "surrogatepass")
        digest.update(len(data).to_bytes(8, "big") + data)
    return kind + digest.digest()


@dataclass(eq=False)  # one limiter is one set of counts: compared by identity
class SignInLimiter:
    """Failures counted per budget, in memory, thread-safe."""

    per_pair: int = 5
    per_address: int = 30
    per_account: int = 100
    window: float = 300.0
    account_window: float = 3600.0
    clock: Callable[[], float] = time.monotonic
    max_keys: int = 50_000
    _counts: Dict[bytes, List[float]] = field(default_factory=dict, init=False, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)

    def _budget(self, key: bytes) -> Tuple[int, float]:
        kind = key[:1]
        if kind == _PAIR:
            return self.per_pair, self.window
        if kind == _ADDRESS:
            return self.per_address, self.window
        return self.per_account, self.account_window

    def _recent(self, key: bytes, now: float) -> List[float]:
        found = self._counts.get(key)
        if found is None:
            return []
        _, window = self._budget(key)
        if found[0] <= now - window:  # a list (small, at most its limit long) beats a deque
            found[:] = [stamp for stamp in found if stamp > now - window]
        if not found:
            del self._counts[key]
        return found

    def reserve(self, account: str, address: str) -> Union[Attempt, Refused]:
        """Count an attempt now, before it is checked; or say why it may not be checked."""
        keys = (_key(_PAIR, account, address), _key(_ADDRESS, address), _key(_ACCOUNT, account))
        now = self.clock()
        with self._lock:
            waits: List[float] = []
            for key in keys:
                limit, window = self._budget(key)
                recent = self._recent(key, now)
                if len(recent) >= limit:
                    waits.append(recent[0] + window - now)
            if waits:
                return Refused(max(waits))
            new = sum(1 for key in keys if key not in self._counts)
            if len(self._counts) + new > self.max_keys:
                for key in list(self._counts):  # bounded memory: forget what aged out
                    self._recent(key, now)
                if len(self._counts) + new > self.max_keys:
                    return Refused(self.window, busy=True)
            for key in keys:
                self._counts.setdefault(key, []).append(now)
            return Attempt(keys, now)

    def succeeded(self, attempt: Attempt) -> None:
        """The attempt signed in: it is not a failure, and neither are the earlier failures of
        this account from this address (a person's typos)."""
        with self._lock:
            pair, *others = attempt.keys
            self._counts.pop(pair, None)
            for key in others:
                found = self._counts.get(key)
                if found is not None:
                    try:
                        found.remove(attempt.stamp)
                    except ValueError:  # aged out meanwhile
                        pass
                    if not found:
                        del self._counts[key]

    def keys(self) -> int:
        """How many counts are kept (what bounds the memory used)."""
        with self._lock:
            return len(self._counts)
