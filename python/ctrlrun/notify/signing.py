"""The signature of a JSON notification: HMAC-SHA256 with the secret from the target's
``secret_env``, over ``<timestamp>.<body>``, sent as

    X-Ctrlrun-Timestamp: <unix seconds>
    X-Ctrlrun-Signature: sha256=<hex digest>

A receiver recomputes it over the raw body it got (:func:`verify`), compares in constant time,
and refuses a timestamp too far from its clock (a replayed delivery)."""

from __future__ import annotations

import hashlib
import hmac
import time
from typing import Dict, Optional

__all__ = ["TIMESTAMP_HEADER", "SIGNATURE_HEADER", "signature", "signed_headers", "verify"]

TIMESTAMP_HEADER = "X-Ctrlrun-Timestamp"
SIGNATURE_HEADER = "X-Ctrlrun-Signature"


def signature(secret: str, timestamp: str, body: bytes) -> str:
    """``sha256=`` and the hex HMAC-SHA256 of ``timestamp + "." + body`` keyed by ``secret``."""
    mac = hmac.new(secret.encode("utf-8"), timestamp.encode("ascii") + b"." + body, hashlib.sha256)
    return "sha256=" + mac.hexdigest()


def signed_headers(secret: str, body: bytes, now: Optional[float] = None) -> Dict[str, str]:
    """The timestamp and signature headers for ``body``, timestamped ``now`` (default: now)."""
    timestamp = str(int(time.time() if now is None else now))
    return {TIMESTAMP_HEADER: timestamp, SIGNATURE_HEADER: signature(secret, timestamp, body)}


def verify(
    secret: str,
    timestamp: Optional[str],
    body: bytes,
    sig: Optional[str],
    *,
    tolerance: float = 300.0,
    now: Optional[float] = None,
) -> bool:
    """Whether ``sig`` signs ``body`` at ``timestamp`` with ``secret``, and ``timestamp`` is
    within ``tolerance`` seconds of ``now``."""
    if not timestamp or not sig or not timestamp.isdigit():
        return False
    if abs((time.time() if now is None else now) - int(timestamp)) > tolerance:
        return False
    return hmac.compare_digest(signature(secret, timestamp, body), sig)
