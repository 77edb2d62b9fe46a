"""Sessions held in the console's memory: a random token in an ``HttpOnly`` cookie names one,
and each carries its own CSRF token, checked on every POST. Nothing of a session is kept in
the store: restarting the console signs everyone out."""

from __future__ import annotations

import hmac
import secrets
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Dict, Optional

__all__ = ["Session", "Sessions", "same_token"]

#: A session unused this long ends (seconds), and none lasts longer than ``LIFETIME``.
IDLE, LIFETIME = 3600.0, 12 * 3600.0


@dataclass
class Session:
    token: str
    account: str
    #: a digest of the account's stored hash at sign-in: once the secret is reset (or the
    #: account removed and added again), the session ends
    secret_mark: str
    csrf: str = field(default_factory=lambda: secrets.token_urlsafe(32))
    last_seen: float = 0.0


def same_token(given: Optional[str], expected: str) -> bool:
    """Constant-time comparison of a token a client sent with the one expected."""
    return isinstance(given, str) and hmac.compare_digest(given.encode(), expected.encode())


class Sessions:
    """The signed-in sessions, by token; thread-safe; bounded (the oldest go first)."""

    def __init__(
        self,
        idle: float = IDLE,
        lifetime: float = LIFETIME,
        clock: Callable[[], float] = time.monotonic,
        max_sessions: int = 10_000,
    ) -> None:
        self.idle, self.lifetime = idle, lifetime
        self._clock = clock
        self._max = max_sessions
        self._by_token: Dict[str, Session] = {}
        self._started: Dict[str, float] = {}
        self._lock = threading.Lock()

    def start(self, account: str, secret_mark: str) -> Session:
        """A new session for ``account`` (a new token: a token seen before sign-in is never
        promoted)."""
        now = self._clock()
        session = Session(secrets.token_urlsafe(32), account, secret_mark, last_seen=now)
        with self._lock:
            if len(self._by_token) >= self._max:
                oldest = min(self._started, key=self._started.__getitem__)
                self._drop(oldest)
            self._by_token[session.token] = session
            self._started[session.token] = now
        return session

    def get(self, token: Optional[str]) -> Optional[Session]:
        """The live session ``token`` names (its idle time restarts), or ``None``."""
        if not token:
            return None
        now = self._clock()
        with self._lock:
            session = self._by_token.get(token)
            if session is None:
                return None
            if now - session.last_seen > self.idle or now - self._started[token] > self.lifetime:
                self._drop(token)
                return None
            session.last_seen = now
            return session

    def end(self, token: Optional[str]) -> None:
        if token:
            with self._lock:
                self._drop(token)

    def end_account(self, account: str) -> None:
        with self._lock:
            for token in [t for t, s in self._by_token.items() if s.account == account]:
                self._drop(token)

    def _drop(self, token: str) -> None:
        self._by_token.pop(token, None)
        self._started.pop(token, None)
