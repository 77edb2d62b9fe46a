"""Bodies, signatures and delivery against a real local receiver: the Slack and JSON formats,
the HMAC a receiver verifies, retries, what is not retried, redirects, a dead receiver, a full
queue, a variable that vanished, and a forked child's own thread."""

from __future__ import annotations

import hashlib
import hmac
import logging
import multiprocessing
import socket
import time

import pytest

from ctrlrun.notify import delivery, signing
from ctrlrun.notify.bodies import json_body, slack_body
from ctrlrun.notify.delivery import Delivery, Dispatcher
from ctrlrun.notify.events import Event
from ctrlrun.policy.notify import NotifyTarget
from tests_py.notify.conftest import SECRET

EVENT = Event(
    "approval.requested",
    "stripe.refund",
    "refund:pi/1 <!channel>",
    "apr_" + "0" * 32,
    "pending",
    "agent-7",
    None,
    "2025-01-02T03:04:05Z",
)
FIELDS = (
    "event",
    "action",
    "effect_key",
    "request_id",
    "state",
    "requested_by",
    "decided_by",
    "at",
)


def target(url: str, fmt: str = "json", secret_env="NOTIFY_TEST_SECRET", url_env=None):
    return NotifyTarget(
        fmt,
        None if url_env else url,
        url_env,
        secret_env if fmt == "json" else None,
        "p.yaml:3: notify[0]",
    )


def quick(**kw) -> Dispatcher:
    return Dispatcher(
        pauses=kw.pop("pauses", (0.01, 0.01, 0.01)), timeout=kw.pop("timeout", 2.0), **kw
    )


def test_the_json_body_has_the_fields_and_a_link(receiver, here):
    assert quick().deliver(Delivery(target(receiver.url()), EVENT, "https://c.example:8780"))
    (got,) = receiver.got
    body = got.json
    assert set(body) == {*FIELDS, "link"}
    assert body["link"] == f"https://c.example:8780/approvals/{EVENT.request_id}"
    assert (body["event"], body["requested_by"], body["at"]) == (
        "approval.requested",
        "agent-7",
        "2025-01-02T03:04:05Z",
    )
    assert got.headers["Content-Type"] == "application/json"
    assert got.headers["X-Ctrlrun-Event"] == "approval.requested"
    assert len(got.headers["X-Ctrlrun-Delivery"]) == 32


def test_the_hmac_verifies(receiver, here):
    assert quick().deliver(Delivery(target(receiver.url()), EVENT, None))
    (got,) = receiver.got
    stamp, sig = got.headers["X-Ctrlrun-Timestamp"], got.headers["X-Ctrlrun-Signature"]
    did = got.headers["X-Ctrlrun-Delivery"]
    assert abs(int(stamp) - time.time()) < 60
    signed = f"{did}.{stamp}.".encode() + got.body
    mine = hmac.new(SECRET.encode(), signed, hashlib.sha256).hexdigest()
    assert sig == f"sha256={mine}"
    assert signing.verify(SECRET, did, stamp, got.body, sig)
    assert signing.verify_headers(SECRET, got.headers, got.body)
    assert not signing.verify(SECRET, did, stamp, got.body + b" ", sig)
    assert not signing.verify("another-secret-of-enough-length-32+", did, stamp, got.body, sig)
    assert not signing.verify(SECRET, did, stamp, got.body, sig, now=int(stamp) + 301)
    assert "link" not in got.json  # no console URL: no link


def test_the_slack_body_escapes_what_callers_wrote(receiver, here):
    item = Delivery(target(receiver.url(), "slack"), EVENT, "https://c.example")
    assert quick().deliver(item)
    (got,) = receiver.got
    assert "X-Ctrlrun-Signature" not in got.headers
    body = got.json
    assert "<!channel>" not in body["text"] and "&lt;!channel&gt;" in body["text"]
    assert body["text"].startswith("ctrlrun: Approval requested: stripe.refund")
    assert f"<https://c.example/approvals/{EVENT.request_id}|Open in the console>" in body["text"]
    kinds = [b["type"] for b in body["blocks"]]
    assert kinds == ["section", "section", "section"]
    fields = [f["text"] for f in body["blocks"][1]["fields"]]
    assert all(f["type"] == "plain_text" for f in body["blocks"][1]["fields"])
    assert "Requested by: agent-7" in fields and "State: pending" in fields


def test_an_effect_links_to_its_quoted_key():
    event = Event("effect.ambiguous", "a", "refund:pi/1 ?x", None, "ambiguous", None, None, "t")
    assert event.link("https://c") == "https://c/effects/refund%3Api%2F1%20%3Fx"
    assert b'"link"' not in json_body(event, None)
    assert b"/effects/" in slack_body(event, "https://c")


def test_a_500_is_retried_then_succeeds(receiver, here):
    receiver.answers = [500, 503]
    assert quick().deliver(Delivery(target(receiver.url()), EVENT, None))
    assert len(receiver.got) == 3
    stamps = [g.headers["X-Ctrlrun-Signature"] for g in receiver.got]
    assert all(s.startswith("sha256=") for s in stamps)
    # One notification: every retry keeps its delivery id, and each attempt verifies.
    assert len({g.headers["X-Ctrlrun-Delivery"] for g in receiver.got}) == 1
    assert all(signing.verify_headers(SECRET, g.headers, g.body) for g in receiver.got)


def test_a_429_waits_as_told_within_bounds(receiver, here):
    receiver.answers = [429]
    receiver.headers_out = {"Retry-After": "0.2"}
    started = time.monotonic()
    assert quick().deliver(Delivery(target(receiver.url()), EVENT, None))
    assert len(receiver.got) == 2 and time.monotonic() - started >= 0.2


def test_a_4xx_is_not_retried_and_the_log_shows_no_path(receiver, here, caplog):
    receiver.answers = [400]
    caplog.set_level(logging.WARNING, logger="ctrlrun.notify")
    url = receiver.url("/services/T0/B0/webhooksecret")
    assert not quick().deliver(Delivery(target(url, "slack"), EVENT, None))
    assert len(receiver.got) == 1
    (rec,) = [r for r in caplog.records if r.name == "ctrlrun.notify"]
    text = rec.getMessage()
    assert f"http://127.0.0.1:{receiver.port}" in text and "HTTP 400" in text
    assert "webhooksecret" not in text and "services" not in text
    assert "attempt 1 of 4" in text and "p.yaml:3: notify[0]" in text


def test_a_redirect_is_not_followed(receiver, here):
    receiver.answers = [302]
    receiver.headers_out = {"Location": "http://example.com/elsewhere"}
    assert not quick().deliver(Delivery(target(receiver.url()), EVENT, None))
    assert len(receiver.got) == 1


def _closed_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def test_a_dead_receiver_is_retried_then_logged(here, caplog):
    caplog.set_level(logging.WARNING, logger="ctrlrun.notify")
    url = f"http://127.0.0.1:{_closed_port()}/services/secretpath"
    assert not quick().deliver(Delivery(target(url), EVENT, None))
    (rec,) = [r for r in caplog.records if r.name == "ctrlrun.notify"]
    assert "attempt 4 of 4" in rec.getMessage() and "no answer" in rec.getMessage()
    assert "secretpath" not in rec.getMessage() and SECRET not in rec.getMessage()


def test_a_slow_receiver_times_out(receiver, here):
    receiver.delay = 1.0
    started = time.monotonic()
    assert not quick(timeout=0.2, pauses=()).deliver(Delivery(target(receiver.url()), EVENT, None))
    assert time.monotonic() - started < 0.9


def test_a_receiver_trickling_bytes_is_cut_at_the_attempts_deadline(receiver, here, caplog):
    caplog.set_level(logging.WARNING, logger="ctrlrun.notify")
    receiver.trickle = 0.05  # each byte comes well within the socket's 0.3 s timeout
    started = time.monotonic()
    assert not quick(timeout=0.3, pauses=()).deliver(Delivery(target(receiver.url()), EVENT, None))
    assert time.monotonic() - started < 2.0  # the whole attempt: about twice the timeout
    assert any("deadline" in r.getMessage() for r in caplog.records)


def test_a_full_queue_drops_and_logs(receiver, here, caplog):
    caplog.set_level(logging.WARNING, logger="ctrlrun.notify")
    receiver.delay = 0.3
    d = quick(size=2)
    results = [d.submit(Delivery(target(receiver.url()), EVENT, None)) for _ in range(6)]
    assert results.count(False) >= 3 and results[0]
    assert any("dropped" in r.getMessage() for r in caplog.records)
    assert d.flush(10) and d.pending == 0


def test_a_variable_that_vanished_is_logged_once(receiver, here, monkeypatch, caplog):
    caplog.set_level(logging.WARNING, logger="ctrlrun.notify")
    monkeypatch.delenv("NOTIFY_GONE_URL", raising=False)
    d = quick()
    item = Delivery(target("", "slack", url_env="NOTIFY_GONE_URL"), EVENT, None)
    assert not d.deliver(item) and not d.deliver(item)
    gone = [r for r in caplog.records if "NOTIFY_GONE_URL is no longer set" in r.getMessage()]
    assert len(gone) == 1 and receiver.got == []
    monkeypatch.delenv("NOTIFY_TEST_SECRET")
    assert not d.deliver(Delivery(target(receiver.url()), EVENT, None))
    assert any(
        "NOTIFY_TEST_SECRET (the signing secret) is not set" in r.getMessage()
        for r in caplog.records
    )
    assert receiver.got == []


def _child_sends(url: str) -> None:
    ok = delivery.submit(Delivery(target(url), EVENT, None)) and delivery.flush(10)
    raise SystemExit(0 if ok else 3)


@pytest.mark.skipif(not hasattr(multiprocessing, "get_context"), reason="no fork")
def test_a_forked_child_starts_its_own_thread(receiver, here):
    assert delivery.submit(Delivery(target(receiver.url("/parent")), EVENT, None))
    assert delivery.flush(10)
    child = multiprocessing.get_context("fork").Process(
        target=_child_sends, args=(receiver.url("/child"),)
    )
    child.start()
    child.join(30)
    assert child.exitcode == 0
    assert sorted(g.path for g in receiver.wait_for(2)) == ["/child", "/parent"]
