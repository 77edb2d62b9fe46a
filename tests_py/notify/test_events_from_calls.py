"""Events from real protected calls, on both backends and in both modes: approval.requested
(once per request), approval.granted / approval.denied from the store's decisions,
effect.ambiguous from a body's outcome; nothing without notify; a dead or slow receiver never
blocks or fails the call."""

from __future__ import annotations

import asyncio
import time

import pytest

import ctrlrun
from ctrlrun import ActionDenied, ApprovalRequired
from ctrlrun.notify import delivery, signing
from tests_py.notify.conftest import SECRET, policy


def notify_policy(here, url: str, extra: str = "") -> None:
    policy(
        here,
        f"""\
        schema: ctrlrun.policy/v2
        console_url: https://console.example:8780
        notify:
          - {{url: "{url}", format: json, secret_env: NOTIFY_TEST_SECRET}}
        actions:
          acme.refund:
            effect: "refund:{{payment_id}}"
            decision: approve
        {extra}""",
    )


def refunds(mode, store, runs):
    @mode.protect("acme.refund", store=store)
    def refund(payment_id: str, amount: int) -> dict:
        runs.append(payment_id)
        return {"refunded": amount}

    return refund


def asked(mode, fn, *args) -> ApprovalRequired:
    with pytest.raises(ApprovalRequired) as info:
        mode.call(fn, *args)
    return info.value


def bodies(receiver, count: int):
    assert delivery.flush(10)
    got = receiver.wait_for(count, timeout=2)
    for g in got:
        assert signing.verify_headers(SECRET, g.headers, g.body)
    return [g.json for g in got]


def test_requested_once_then_granted(mode, store, receiver, here):
    notify_policy(here, receiver.url())
    runs: list = []
    refund = refunds(mode, store, runs)
    first = asked(mode, refund, "pi_1", 500)
    again = asked(mode, refund, "pi_1", 500)  # the request stands: not told again
    assert again.request_id == first.request_id
    (requested,) = bodies(receiver, 1)
    assert requested == {
        "event": "approval.requested",
        "action": "acme.refund",
        "effect_key": "refund:pi_1",
        "request_id": first.request_id,
        "state": "pending",
        "requested_by": None,
        "decided_by": None,
        "at": requested["at"],
        "link": f"https://console.example:8780/approvals/{first.request_id}",
    }
    # no argument, by name or value (the request id is random hex, so it is left out of the
    # value's search: it may hold "500" by chance)
    fixed = {k: v for k, v in requested.items() if k not in ("request_id", "link")}
    assert requested["at"].endswith("Z") and "500" not in str(fixed)
    assert "amount" not in str(requested) and "payment_id" not in str(requested)
    store.grant_approval(first.request_id, by="alice")
    _, granted = bodies(receiver, 2)
    assert (granted["event"], granted["state"], granted["decided_by"]) == (
        "approval.granted",
        "granted",
        "alice",
    )
    assert mode.call(refund, "pi_1", 500) == {"refunded": 500} and runs == ["pi_1"]
    assert len(bodies(receiver, 2)) == 2  # the call that used the grant told nobody


def test_many_processes_asking_at_once_tell_one_request(store_url, store, receiver, here):
    """The core says which call wrote the request: eight processes asking at once send one
    approval.requested between them."""
    import subprocess
    import sys
    import textwrap

    notify_policy(here, receiver.url())
    script = textwrap.dedent(
        f"""
        import ctrlrun
        from ctrlrun.notify import delivery

        @ctrlrun.protect("acme.refund", store={store_url!r})
        def refund(payment_id: str, amount: int) -> dict:
            return {{}}

        try:
            refund("pi_9", 9)
        except ctrlrun.ApprovalRequired as exc:
            print(exc.request_id)
        delivery.flush(10)
        """
    )
    procs = [
        subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
        for _ in range(8)
    ]
    ids = {p.communicate(timeout=120)[0].strip() for p in procs}
    assert len(ids) == 1 and all(p.returncode == 0 for p in procs)
    time.sleep(0.5)  # anything a second process sent has arrived by now
    got = receiver.wait_for(1, timeout=2)
    assert [g.json["event"] for g in got] == ["approval.requested"]
    assert got[0].json["request_id"] == ids.pop()


def test_denied(mode, store, receiver, here):
    notify_policy(here, receiver.url())
    refund = refunds(mode, store, [])
    request = asked(mode, refund, "pi_2", 5)
    store.deny_approval(request.request_id, by="bob", note="no")
    with pytest.raises(ActionDenied):
        mode.call(refund, "pi_2", 5)
    events = bodies(receiver, 2)
    assert [e["event"] for e in events] == ["approval.requested", "approval.denied"]
    assert events[1]["decided_by"] == "bob" and "no" not in events[1].values()


def test_a_new_request_after_expiry_is_told_again(mode, store_url, clock, receiver, here):
    notify_policy(here, receiver.url())
    store = ctrlrun.open_store(store_url, clock=clock)
    try:
        refund = refunds(mode, store, [])
        first = asked(mode, refund, "pi_3", 1)
        clock.advance(16 * 60)  # the default 15 minutes ran out
        second = asked(mode, refund, "pi_3", 1)
        assert second.request_id != first.request_id
        events = bodies(receiver, 2)
        assert [e["request_id"] for e in events] == [first.request_id, second.request_id]
    finally:
        store.close()


def test_a_body_that_raises_is_told_ambiguous(mode, store, receiver, here):
    notify_policy(here, receiver.url())

    @mode.protect("acme.charge", effect="charge:{order}", store=store)
    def charge(order: str) -> None:
        raise ConnectionResetError("the network went away")

    @mode.protect("acme.maybe", effect="maybe:{order}", store=store)
    def proven(order: str) -> None:
        raise ctrlrun.NotExecuted("refused before sending")

    with pytest.raises(ConnectionResetError):
        mode.call(charge, "o/1")
    with pytest.raises(ctrlrun.NotExecuted):
        mode.call(proven, "o/2")  # failed: nothing to tell
    (event,) = bodies(receiver, 1)
    assert (event["event"], event["action"], event["effect_key"], event["state"]) == (
        "effect.ambiguous",
        "acme.charge",
        "charge:o/1",
        "ambiguous",
    )
    assert event["link"] == "https://console.example:8780/effects/charge%3Ao%2F1"
    assert event["request_id"] is None
    assert store.get_effect("charge:o/1").state.value == "ambiguous"


def test_a_cancelled_async_call_is_told_ambiguous_once_its_write_lands(store, receiver, here):
    notify_policy(here, receiver.url())

    began = []

    @ctrlrun.protect("acme.slow", effect="slow:{n}", store=store)
    async def slow(n: int) -> None:
        began.append(n)
        await asyncio.sleep(30)

    async def main() -> None:
        task = asyncio.ensure_future(slow(1))
        while not began:  # cancelled once the body runs
            await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        # the outcome write goes on after the cancellation; the loop runs on meanwhile
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            found = await asyncio.to_thread(store.get_effect, "slow:1")
            if found.state.value == "ambiguous":
                break
            await asyncio.sleep(0.02)
        await asyncio.sleep(0.05)

    asyncio.run(main())
    (event,) = bodies(receiver, 1)
    assert (event["event"], event["effect_key"]) == ("effect.ambiguous", "slow:1")


def test_nothing_is_sent_without_notify(mode, store, receiver, here):
    policy(
        here,
        """\
        schema: ctrlrun.policy/v2
        console_url: https://console.example:8780
        actions:
          acme.refund:
            effect: "refund:{payment_id}"
            decision: approve
        """,
    )
    refund = refunds(mode, store, [])
    request = asked(mode, refund, "pi_4", 1)
    store.grant_approval(request.request_id, by="alice")

    @mode.protect("acme.charge", effect="charge:{order}", store=store)
    def charge(order: str) -> None:
        raise RuntimeError("unknown")

    with pytest.raises(RuntimeError):
        mode.call(charge, "o/3")
    assert delivery.flush(5) and delivery.dispatcher().pending == 0
    time.sleep(0.1)
    assert receiver.got == []


def test_an_action_with_its_own_empty_list_is_silent(mode, store, receiver, here):
    notify_policy(
        here, receiver.url(), "  acme.quiet:\n            effect: 'q:{n}'\n            notify: []\n"
    )

    @mode.protect("acme.quiet", store=store)
    def quiet(n: int) -> None:
        raise RuntimeError("unknown")

    with pytest.raises(RuntimeError):
        mode.call(quiet, 1)
    assert delivery.flush(5)
    assert receiver.got == []


def test_a_slow_receiver_never_holds_the_call(mode, store, receiver, here):
    receiver.delay = 2.0
    notify_policy(here, receiver.url())
    refund = refunds(mode, store, [])
    started = time.monotonic()
    request = asked(mode, refund, "pi_5", 1)
    store.grant_approval(request.request_id, by="alice")
    assert mode.call(refund, "pi_5", 1) == {"refunded": 1}
    took = time.monotonic() - started
    assert took < 1.5, took  # the receiver answers after 2 s, twice
    assert receiver.wait_for(1, timeout=5)  # it was told meanwhile


def test_a_dead_receiver_never_fails_the_call(mode, store, here, monkeypatch):
    import socket

    # this process's dispatcher, with short pauses between the retries (so the test ends soon)
    quick = delivery.Dispatcher(pauses=(0.01, 0.01, 0.01))
    monkeypatch.setattr(delivery, "_dispatcher", quick)

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    notify_policy(here, f"http://127.0.0.1:{port}/hook")

    @mode.protect("acme.charge", effect="charge:{order}", store=store)
    def charge(order: str) -> str:
        raise RuntimeError("unknown")

    started = time.monotonic()
    with pytest.raises(RuntimeError):
        mode.call(charge, "o/4")
    refund = refunds(mode, store, [])
    asked(mode, refund, "pi_6", 1)
    assert time.monotonic() - started < 1.5
    assert quick.flush(10) and quick.pending == 0  # both tried four times, then given up


def test_a_broken_notify_hook_never_raises_into_the_call(mode, store, receiver, here, monkeypatch):
    notify_policy(here, receiver.url())

    def broken(item):
        raise OSError("the queue is broken")

    monkeypatch.setattr(delivery, "submit", broken)
    refund = refunds(mode, store, [])
    request = asked(mode, refund, "pi_7", 1)
    assert store.grant_approval(request.request_id, by="alice").state.value == "granted"
    assert mode.call(refund, "pi_7", 1) == {"refunded": 1}


def test_a_console_links_the_decisions_made_there_to_itself(mode, store, receiver, here):
    from ctrlrun.console.notifications import start_notifications
    from ctrlrun.notify import hooks

    policy(
        here,
        f"""\
        schema: ctrlrun.policy/v2
        notify:
          - {{url: "{receiver.url()}", format: json, secret_env: NOTIFY_TEST_SECRET}}
        actions:
          acme.refund:
            effect: "refund:{{payment_id}}"
            decision: approve
        """,
    )
    watcher = start_notifications(store, "https://approvals.example:8780", "http://127.0.0.1:1")
    try:
        assert watcher is not None
        request = asked(mode, refunds(mode, store, []), "pi_5", 5)
        store.grant_approval(request.request_id, by="alice")
        events = bodies(receiver, 2)
        assert [e["link"] for e in events] == [
            f"https://approvals.example:8780/approvals/{request.request_id}"
        ] * 2
    finally:
        hooks.serve_links_from(None)
        if watcher is not None:
            watcher.stop()
