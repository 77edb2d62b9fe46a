"""The signature of a JSON notification: HMAC-SHA256 with the secret from the target's
``secret_env``, over ``<delivery id>.<timestamp>.<body>``, sent as

    X-Ctrlrun-Delivery: <the notification's id: 32 hex digits, the same on every retry>
    X-Ctrlrun-Timestamp: <unix seconds of this attempt>
    X-Ctrlrun-Signature: sha256=<hex digest>

A receiver recomputes it over the raw body it got (:func:`verify`, or :func:`verify_headers`
given the request's headers), compares in constant time, refuses a timestamp too far from its
clock, and remembers the delivery ids it has accepted within that window: the id is signed, so
a captured notification cannot be sent again under a new one. :func:`verify` never raises: any
malformed header is simply ``False``."""

from __future__ import annotations

import hashlib
import hmac
import re
import time
from typing import Dict, Mapping, Optional

__all__ = [
    "DELIVERY_HEADER",
    "TIMESTAMP_HEADER",
    "SIGNATURE_HEADER",
    "signature",
    "signed_headers",
    "verify",
    "verify_headers",
]

DELIVERY_HEADER = "X-Ctrlrun-Delivery"
TIMESTAMP_HEADER = "X-Ctrlrun-Timestamp"
SIGNATURE_HEADER = "X-Ctrlrun-Signature"

#: A delivery id: letters, digits, ``-`` and ``_`` (never ``.``, the separator), 1 to 128.
_DELIVERY = re.compile(r"[A-Za-z0-9_-]{1,128}\Z")
#: A signature: ``sha256=`` and 64 lowercase hex digits.
_SIGNATURE = re.compile(r"sha256=[0-9a-f]{64}\Z")
#: The most digits a timestamp may have (unix seconds stay under 13 digits for 30,000 years).
_TIMESTAMP_DIGITS = 12


def _key(secret: str) -> bytes:
    # surrogateescape: a secret read from os.environ gets back the bytes the variable held.
    return secret.encode("utf-8", "surrogateescape")


def signature(secret: str, delivery: str, timestamp: str, body: bytes) -> str:
    """``sha256=`` and the hex HMAC-SHA256 of ``delivery + "." + timestamp + "." + body``
    keyed by ``secret``."""
    signed = delivery.encode("ascii") + b"." + timestamp.encode("ascii") + b"." + body
    return "sha256=" + hmac.new(_key(secret), signed, hashlib.sha256).hexdigest()


def signed_headers(
    secret: str, delivery: str, body: bytes, now: Optional[float] = None
) -> Dict[str, str]:
    """The delivery, timestamp and signature headers for ``body``, timestamped ``now``
    (default: now)."""
    timestamp = str(int(time.time() if now is None else now))
    return {
        DELIVERY_HEADER: delivery,
        TIMESTAMP_HEADER: timestamp,
        SIGNATURE_HEADER: signature(secret, delivery, timestamp, body),
    }


def _well_formed(delivery: object, timestamp: object, sig: object) -> bool:
    return (
        isinstance(delivery, str)
        and _DELIVERY.match(delivery) is not None
        and isinstance(timestamp, str)
        and 0 < len(timestamp) <= _TIMESTAMP_DIGITS
        and timestamp.isascii()
        and timestamp.isdigit()
        and isinstance(sig, str)
        and _SIGNATURE.match(sig) is not None
    )


def verify(
    secret: str,
    delivery: Optional[str],
    timestamp: Optional[str],
    body: bytes,
    sig: Optional[str],
    *,
    tolerance: float = 300.0,
    now: Optional[float] = None,
) -> bool:
    """Whether ``sig`` signs ``body`` under ``delivery`` at ``timestamp`` with ``secret``, and
    ``timestamp`` is within ``tolerance`` seconds of ``now``. ``False`` (never an exception)
    for a missing or malformed value: a delivery id that is not 1 to 128 of ``A-Za-z0-9_-``,
    a timestamp that is not 1 to 12 ASCII digits, a signature that is not ``sha256=`` and 64
    lowercase hex digits, an empty secret or a body that is not bytes."""
    if not _well_formed(delivery, timestamp, sig):
        return False
    assert isinstance(delivery, str) and isinstance(timestamp, str) and isinstance(sig, str)
    if not isinstance(secret, str) or not secret or not isinstance(body, (bytes, bytearray)):
        return False
    try:
        clock = time.time() if now is None else float(now)
        if not abs(clock - int(timestamp)) <= tolerance:
            return False
        expected = signature(secret, delivery, timestamp, bytes(body))
    except (ValueError, TypeError, OverflowError, UnicodeError):
        return False
    return hmac.compare_digest(expected.encode("ascii"), sig.encode("ascii"))


def verify_headers(
    secret: str,
    headers: Mapping[str, str],
    body: bytes,
    *,
    tolerance: float = 300.0,
    now: Optional[float] = None,
) -> bool:
    """:func:`verify` with the three values read from a request's ``headers`` (any mapping
    with ``get``, such as ``http.server``'s ``self.headers``)."""
    try:
        delivery = headers.get(DELIVERY_HEADER)
        timestamp = headers.get(TIMESTAMP_HEADER)
        sig = headers.get(SIGNATURE_HEADER)
    except Exception:  # a mapping that fails to read: nothing verified
        return False
    return verify(secret, delivery, timestamp, body, sig, tolerance=tolerance, now=now)
