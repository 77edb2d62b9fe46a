"""Approver secrets: generated, hashed with scrypt (stdlib ``hashlib``), and verified in
constant time. Only the hash ever reaches the store; it reads
``scrypt$<n>$<r>$<p>$<salt, base64>$<hash, base64>``."""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from typing import Optional

__all__ = ["hash_secret", "verify_secret", "new_secret", "MIN_PASSWORD_LENGTH"]

#: scrypt's cost: 2**14 blocks of 8 * 128 bytes (16 MiB), one lane; about 50 ms a check.
N, R, P = 2**14, 8, 1
_DKLEN = 32
_MAXMEM = 64 * 1024 * 1024
#: The shortest password ``ctrlrun approvers add --password-stdin`` accepts.
MIN_PASSWORD_LENGTH = 12
#: The longest secret checked (scrypt's work grows with it only a little; a bound all the same).
MAX_SECRET_LENGTH = 1024


def new_secret() -> str:
    """A one-time secret for a new account: 32 random bytes, URL-safe text."""
    return secrets.token_urlsafe(32)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _derive(secret: str, salt: bytes, n: int, r: int, p: int) -> bytes:
    data = secret.encode("utf-8", "surrogatepass")
    return hashlib.scrypt(data, salt=salt, n=n, r=r, p=p, maxmem=_MAXMEM, dklen=_DKLEN)


def hash_secret(secret: str) -> str:
    """The stored form of ``secret`` (a fresh random salt each time)."""
    salt = secrets.token_bytes(16)
    return f"scrypt${N}${R}${P}${_b64(salt)}${_b64(_derive(secret, salt, N, R, P))}"


# A hash to check against when the account does not exist, so that an unknown name costs the
# same time as a wrong password (the page tells neither apart).
_DUMMY: Optional[str] = None


def dummy_check(secret: str) -> None:
    """Spend the time of one check, and find nothing."""
    global _DUMMY
    if _DUMMY is None:
        _DUMMY = hash_secret(new_secret())
    verify_secret(secret, _DUMMY)


def verify_secret(secret: str, stored: str) -> bool:
    """Whether ``secret`` is the one ``stored`` was made from; a malformed or foreign hash is
    never a match."""
    if not isinstance(secret, str) or len(secret) > MAX_SECRET_LENGTH:
        return False
    parts = stored.split("$") if isinstance(stored, str) else []
    if len(parts) != 6 or parts[0] != "scrypt":
        return False
    try:
        n, r, p = int(parts[1]), int(parts[2]), int(parts[3])
        salt = base64.b64decode(parts[4], validate=True)
        want = base64.b64decode(parts[5], validate=True)
        if not (2 <= n <= 2**20 and 1 <= r <= 32 and 1 <= p <= 16) or n & (n - 1):
            return False
        got = _derive(secret, salt, n, r, p)
    except (ValueError, MemoryError):
        return False
    return hmac.compare_digest(got, want)
