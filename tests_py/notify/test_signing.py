"""The signature a receiver checks: it covers the delivery id and the timestamp (a captured
notification cannot be re-sent under a new id or a new time), and ``verify`` is a pure
function that says ``False`` to any malformed header instead of raising."""

from __future__ import annotations

import hashlib
import hmac

import pytest

from ctrlrun.notify import signing

SECRET = "0123456789abcdef0123456789abcdef-receiver"
BODY = b'{"event":"approval.requested","action":"acme.refund"}'
DID = "5f0c" * 8
NOW = 1_735_787_045


def headers(did: str = DID, now: int = NOW, body: bytes = BODY) -> dict:
    return signing.signed_headers(SECRET, did, body, now=now)


def test_the_signed_string_is_delivery_timestamp_body():
    h = headers()
    assert h["X-Ctrlrun-Delivery"] == DID and h["X-Ctrlrun-Timestamp"] == str(NOW)
    signed = f"{DID}.{NOW}.".encode() + BODY
    mac = hmac.new(SECRET.encode(), signed, hashlib.sha256).hexdigest()
    assert h["X-Ctrlrun-Signature"] == "sha256=" + mac
    assert signing.verify(SECRET, DID, str(NOW), BODY, "sha256=" + mac, now=NOW + 299)
    assert signing.verify_headers(SECRET, h, BODY, now=NOW - 299)


def test_a_captured_notification_resent_under_a_new_id_or_time_fails():
    h = headers()
    sig, stamp = h["X-Ctrlrun-Signature"], h["X-Ctrlrun-Timestamp"]
    # 299 s later, within the window, with a fresh delivery id: refused (the id is signed).
    assert not signing.verify(SECRET, "a" * 32, stamp, BODY, sig, now=NOW + 299)
    # The same id with a fresh timestamp: refused (the timestamp is signed).
    assert not signing.verify(SECRET, DID, str(NOW + 299), BODY, sig, now=NOW + 299)
    # A digit moved from the timestamp into the id: refused.
    assert not signing.verify(SECRET, DID + "1", stamp[1:], BODY, sig, now=int(stamp[1:]))
    # Outside the window, even untouched: refused.
    assert not signing.verify(SECRET, DID, stamp, BODY, sig, now=NOW + 301)


GOOD = headers()
MALFORMED_TIMESTAMPS = [
    None,
    "",
    "²",
    "1735787045²",
    "١٧٣٥٧٨٧٠٤٥",  # Arabic-Indic digits: str.isdigit() says yes, int() reads them
    "１７３５７８７０４５",  # fullwidth digits
    "1" * 1000,
    "9" * 13,
    "-1735787045",
    " 1735787045",
    "1735787045.0",
    "1e9",
]


@pytest.mark.parametrize("stamp", MALFORMED_TIMESTAMPS)
def test_a_malformed_timestamp_is_false_never_an_error(stamp):
    sig = GOOD["X-Ctrlrun-Signature"]
    assert signing.verify(SECRET, DID, stamp, BODY, sig, now=NOW) is False
    assert signing.verify(SECRET, DID, stamp, BODY, sig) is False  # the real clock too


MALFORMED_SIGNATURES = [
    None,
    "",
    "sha256=",
    "sha256=é" + "0" * 63,
    "sha256=" + "０" * 64,
    "ü" * 71,
    "sha1=" + "0" * 40,
    "sha256=" + "0" * 63,
    "sha256=" + "0" * 65,
    "sha256=" + "g" * 64,
    "SHA256=" + "0" * 64,
    "sha256=" + "\ud800" * 64,
    GOOD["X-Ctrlrun-Signature"] + "\n",
    GOOD["X-Ctrlrun-Signature"].upper().replace("SHA256", "sha256"),
]


@pytest.mark.parametrize("sig", MALFORMED_SIGNATURES)
def test_a_malformed_signature_is_false_never_an_error(sig):
    assert signing.verify(SECRET, DID, str(NOW), BODY, sig, now=NOW) is False


@pytest.mark.parametrize(
    "did", [None, "", "a.b", "é" * 32, "a" * 129, "a b", "\ud800", "5f0c\n", DID.upper() + "."]
)
def test_a_malformed_delivery_id_is_false_never_an_error(did):
    sig = GOOD["X-Ctrlrun-Signature"]
    assert signing.verify(SECRET, did, str(NOW), BODY, sig, now=NOW) is False


@pytest.mark.parametrize("secret", ["", "\ud800" * 40, None])
def test_a_bad_secret_or_body_is_false_never_an_error(secret):
    sig = GOOD["X-Ctrlrun-Signature"]
    assert signing.verify(secret, DID, str(NOW), BODY, sig, now=NOW) is False  # type: ignore[arg-type]
    assert signing.verify(SECRET, DID, str(NOW), "text", sig, now=NOW) is False  # type: ignore[arg-type]
    assert signing.verify(SECRET, DID, str(NOW), BODY, sig, now=float("nan")) is False


def test_headers_that_are_missing_or_unreadable_are_false():
    assert signing.verify_headers(SECRET, {}, BODY) is False

    class Broken(dict):
        def get(self, *args):
            raise KeyError("boom")

    assert signing.verify_headers(SECRET, Broken(), BODY) is False
