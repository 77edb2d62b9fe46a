"""The watcher's time-based events on both backends, with the store's clock moved instead of
sleeping: approval.expired, approval.escalated (once per request), effect.ambiguous for a
lapsed lease (once per key and attempt, not for what a runner told already), and its thread."""

from __future__ import annotations

import os
import time

import pytest

import ctrlrun
from ctrlrun import AmbiguousEffect, ApprovalRequired
from ctrlrun.notify import delivery
from ctrlrun.notify.watcher import Watcher, start_watcher
from tests_py.notify.conftest import policy


def watched_policy(here, url: str, extra: str = "") -> None:
    policy(
        here,
        f"""\
        schema: ctrlrun.policy/v2
        escalate_after: 5m
        notify:
          - {{url: "{url}", format: json, secret_env: NOTIFY_TEST_SECRET}}
        actions:
          acme.refund:
            effect: "refund:{{payment_id}}"
            decision: approve
          acme.urgent:
            effect: "urgent:{{n}}"
            decision: approve
            escalate_after: 2m
        {extra}""",
    )


@pytest.fixture
def clocked(store_url, clock):
    s = ctrlrun.open_store(store_url, clock=clock)
    yield s
    s.close()


def ask(store, action: str, template: str, value) -> str:
    """A real protected call of ``action`` (one parameter, the template's) that asks."""
    name = template.split("{")[1].rstrip("}")
    namespace: dict = {}
    exec(f"def fn({name}): return None", namespace)
    fn = ctrlrun.protect(action, store=store)(namespace["fn"])
    with pytest.raises(ApprovalRequired) as info:
        fn(value)
    return info.value.request_id


def events(receiver, count: int):
    assert delivery.flush(10)
    return [(g.json["event"], g.json) for g in receiver.wait_for(count, timeout=2)]


def test_expired_once_and_only_undecided(clocked, clock, receiver, here):
    watched_policy(here, receiver.url())
    watcher = Watcher(clocked)
    waiting = ask(clocked, "acme.refund", "refund:{payment_id}", "pi_1")
    granted = ask(clocked, "acme.refund", "refund:{payment_id}", "pi_2")
    clocked.grant_approval(granted, by="alice")
    assert watcher.tick() == 0
    clock.advance(16 * 60)
    assert watcher.tick() == 1 and watcher.tick() == 0
    got = [b for n, b in events(receiver, 4) if n == "approval.expired"]
    assert [b["request_id"] for b in got] == [waiting]
    assert got[0]["state"] == "expired" and got[0]["decided_by"] is None


def test_what_expired_before_the_watcher_started_is_not_told(clocked, clock, receiver, here):
    watched_policy(here, receiver.url())
    ask(clocked, "acme.refund", "refund:{payment_id}", "pi_3")
    clock.advance(16 * 60)
    assert Watcher(clocked).tick() == 0


def test_escalated_once_per_request_by_its_actions_delay(clocked, clock, receiver, here):
    watched_policy(here, receiver.url())
    watcher = Watcher(clocked)
    slow = ask(clocked, "acme.refund", "refund:{payment_id}", "pi_4")
    urgent = ask(clocked, "acme.urgent", "urgent:{n}", 1)
    clock.advance(3 * 60)
    assert watcher.tick() == 1  # urgent's 2m, not the global 5m
    clock.advance(3 * 60)
    assert watcher.tick() == 1 and watcher.tick() == 0
    escalated = [b for n, b in events(receiver, 4) if n == "approval.escalated"]
    assert [b["request_id"] for b in escalated] == [urgent, slow]
    assert all(b["state"] == "pending" for b in escalated)
    # a new watcher (a restarted console) tells of a request still waiting, once
    assert Watcher(clocked).tick() == 2


def test_a_lapsed_lease_is_told_once(clocked, clock, receiver, here):
    watched_policy(here, receiver.url())
    watcher = Watcher(clocked)
    clocked.reserve_effect("job:1", "act_" + os.urandom(16).hex(), lease=60)
    clocked.reserve_effect("job:2", "act_" + os.urandom(16).hex(), lease=60)
    assert watcher.tick() == 0  # live leases
    clock.advance(61)
    # job:2's lapse is found by a contender first: stored ambiguous, with the core's note
    with pytest.raises(AmbiguousEffect):
        clocked.reserve_effect("job:2", "act_" + os.urandom(16).hex(), lease=60)
    assert watcher.tick() == 2
    with pytest.raises(AmbiguousEffect):
        clocked.reserve_effect("job:1", "act_" + os.urandom(16).hex(), lease=60)
    assert watcher.tick() == 0  # job:1 again, now stored ambiguous: the same attempt
    got = [b for n, b in events(receiver, 2)]
    assert sorted(b["effect_key"] for b in got) == ["job:1", "job:2"]
    assert {(b["event"], b["state"]) for b in got} == {("effect.ambiguous", "ambiguous")}


def test_what_a_runner_told_is_not_told_again(clocked, clock, receiver, here):
    watched_policy(here, receiver.url())
    watcher = Watcher(clocked)

    @ctrlrun.protect("acme.charge", effect="charge:{n}", store=clocked)
    def charge(n: int) -> None:
        raise RuntimeError("no answer")

    with pytest.raises(RuntimeError):
        charge(1)
    clock.advance(3600)
    assert watcher.tick() == 0
    assert [n for n, _ in events(receiver, 1)] == ["effect.ambiguous"]


def test_nothing_without_notify_and_a_broken_policy_is_logged(clocked, clock, here, caplog):
    policy(here, "schema: ctrlrun.policy/v2\nescalate_after: 1m\n")
    watcher = Watcher(clocked)
    clocked.reserve_effect("job:3", "act_" + os.urandom(16).hex(), lease=60)
    clock.advance(120)
    assert watcher.tick() == 0
    policy(here, "schema: ctrlrun.policy/v2\nnotify: nope\n")
    assert watcher.tick() == 0 and watcher.tick() == 0
    logged = [r for r in caplog.records if "cannot read the policy" in r.getMessage()]
    assert len(logged) == 1 and "notify: must be a list" in logged[0].getMessage()


def test_the_thread_sends_and_stops_quickly(clocked, clock, receiver, here):
    watched_policy(here, receiver.url())
    watcher = start_watcher(clocked, console_url="https://c.example:8780/", interval=0.05)
    try:
        request = ask(clocked, "acme.refund", "refund:{payment_id}", "pi_5")
        clock.advance(16 * 60)
        requested, got = receiver.wait_for(2, timeout=10)
        assert (requested.json["event"], got.json["event"]) == (
            "approval.requested",
            "approval.expired",
        )
        assert got.json["link"] == f"https://c.example:8780/approvals/{request}"
    finally:
        started = time.monotonic()
        watcher.stop()
        assert time.monotonic() - started < 2 and not watcher.running
    with pytest.raises(ValueError):
        Watcher(clocked, interval=0)
