"""Approvals bound to a call's action and arguments, used once, through the decorator, on both
backends and in both modes (sync and async executors)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
import time

import pytest

import ctrlrun
from ctrlrun import (
    ActionDenied,
    ApprovalRequired,
    DuplicateEffect,
    EffectState,
    InvalidArgument,
    NotExecuted,
)


def refunds(mode, store, runs, **options):
    @mode.protect(
        "acme.refund", effect="refund:{payment_id}", store=store, decision="approve", **options
    )
    def refund(payment_id: str, amount: int) -> dict:
        runs.append((payment_id, amount))
        return {"refunded": amount}

    return refund


def asked(mode, fn, *args):
    with pytest.raises(ApprovalRequired) as info:
        mode.call(fn, *args)
    return info.value


def test_an_approve_call_asks_once_then_runs_once_after_a_grant(mode, store):
    runs: list = []
    refund = refunds(mode, store, runs)
    first = asked(mode, refund, "pi_1", 500)
    assert first.request_id.startswith("apr_") and len(first.request_id) == 36
    assert (first.action, first.effect_key) == ("acme.refund", "refund:pi_1")
    assert first.arguments == {"payment_id": "pi_1", "amount": 500}
    assert first.request_id in str(first) and "ctrlrun approve" in str(first)
    assert store.get_effect("refund:pi_1") is None and runs == []  # nothing reserved or run
    # the same call again finds the same pending request
    assert asked(mode, refund, "pi_1", 500).request_id == first.request_id
    (pending,) = store.list_approvals("pending")
    assert pending.request_id == first.request_id and pending.arguments == first.arguments

    granted = store.grant_approval(first.request_id, by="alice", note="customer called")
    assert (granted.state.value, granted.decided_by, granted.note) == (
        "granted",
        "alice",
        "customer called",
    )
    assert mode.call(refund, "pi_1", 500) == {"refunded": 500}
    assert runs == [("pi_1", 500)]
    row = store.get_effect("refund:pi_1")
    assert row.state is EffectState.COMMITTED and row.approval_id == first.request_id
    used = store.get_approval(first.request_id)
    assert used.state.value == "used" and used.used_by == row.action_id
    # used once: the retry is the plain duplicate, and nothing is asked again
    with pytest.raises(DuplicateEffect) as dup:
        mode.call(refund, "pi_1", 500)
    assert type(dup.value) is DuplicateEffect and dup.value.state == "committed"
    assert len(store.list_approvals()) == 1


def test_the_approval_is_bound_to_the_arguments(mode, store):
    runs: list = []
    refund = refunds(mode, store, runs)
    small = asked(mode, refund, "pi_2", 500).request_id
    store.grant_approval(small, by="alice")
    bigger = asked(mode, refund, "pi_2", 5000)  # another amount is another request
    assert bigger.request_id != small and bigger.arguments["amount"] == 5000
    assert runs == []
    assert mode.call(refund, "pi_2", 500) == {"refunded": 500}
    assert runs == [("pi_2", 500)]


def test_a_denied_request_raises_action_denied_naming_who_denied_it(mode, store):
    runs: list = []
    refund = refunds(mode, store, runs)
    rid = asked(mode, refund, "pi_3", 70).request_id
    store.deny_approval(rid, by="bob", note="fraud suspected")
    with pytest.raises(ActionDenied) as info:
        mode.call(refund, "pi_3", 70)
    assert (info.value.denied_by, info.value.request_id, info.value.action) == (
        "bob",
        rid,
        "acme.refund",
    )
    assert "bob" in str(info.value) and "fraud suspected" in str(info.value)
    assert runs == [] and store.get_effect("refund:pi_3") is None


def test_a_grant_expires_after_its_time_to_live_and_the_call_asks_again(mode, clocked_store, clock):
    runs: list = []
    refund = refunds(mode, clocked_store, runs, approval_ttl=60)
    rid = asked(mode, refund, "pi_4", 1).request_id
    clocked_store.grant_approval(rid, by="alice")
    clock.advance(61)
    again = asked(mode, refund, "pi_4", 1)
    assert again.request_id != rid and runs == []
    assert clocked_store.get_approval(rid).state.value == "expired"
    # a pending request lapses too: approving it then is refused and writes nothing
    clock.advance(61)
    with pytest.raises(InvalidArgument, match="expired"):
        clocked_store.grant_approval(again.request_id, by="alice")
    assert clocked_store.get_approval(again.request_id).decided_by is None


def test_a_failed_run_needs_a_new_approval(mode, store):
    runs: list = []

    @mode.protect("acme.refund", effect="refund:{payment_id}", store=store, decision="approve")
    def refund(payment_id: str, amount: int) -> dict:
        runs.append(payment_id)
        if len(runs) == 1:
            raise NotExecuted("the provider refused the request before sending it")
        return {"refunded": amount}

    rid = asked(mode, refund, "pi_5", 9).request_id
    store.grant_approval(rid, by="alice")
    with pytest.raises(NotExecuted):
        mode.call(refund, "pi_5", 9)
    assert store.get_effect("refund:pi_5").state is EffectState.FAILED
    second = asked(mode, refund, "pi_5", 9)  # a person approved one execution
    assert second.request_id != rid
    store.grant_approval(second.request_id, by="alice")
    assert mode.call(refund, "pi_5", 9) == {"refunded": 9}
    assert runs == ["pi_5", "pi_5"]


def _grant_when_asked(store, by: str, after: float = 0.3) -> threading.Thread:
    def approver() -> None:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            time.sleep(after)
            pending = store.list_approvals("pending")
            if pending:
                store.grant_approval(pending[0].request_id, by=by)
                return

    t = threading.Thread(target=approver, daemon=True)
    t.start()
    return t


def test_approval_timeout_waits_for_the_decision(mode, store, second_store):
    runs: list = []
    refund = refunds(mode, store, runs, approval_timeout=15)
    approver = _grant_when_asked(second_store, "carol")
    assert mode.call(refund, "pi_6", 3) == {"refunded": 3}
    approver.join()
    assert runs == [("pi_6", 3)]
    assert store.get_effect("refund:pi_6").approval_id is not None


def test_approval_timeout_running_out_raises_approval_required(mode, store):
    runs: list = []
    refund = refunds(mode, store, runs, approval_timeout=0.3)
    started = time.monotonic()
    pending = asked(mode, refund, "pi_7", 3)
    assert 0.3 <= time.monotonic() - started < 5
    assert store.get_approval(pending.request_id).state.value == "pending" and runs == []


def test_bad_decisions_are_refused_and_write_nothing(store):
    with pytest.raises(InvalidArgument, match="no approval request"):
        store.grant_approval("apr_" + "0" * 32, by="alice")

    @ctrlrun.protect("acme.refund", effect="refund:{payment_id}", store=store, decision="approve")
    def refund(payment_id: str) -> int:
        return 1

    with pytest.raises(ApprovalRequired) as info:
        refund("pi_8")
    rid = info.value.request_id
    for by, note in [
        ("", None),
        ("ali\nce", None),
        ("alice", "line\x00break"),
        ("alice", "two\nlines"),
        ("\u2028", None),
    ]:
        with pytest.raises(InvalidArgument):
            store.grant_approval(rid, by=by, note=note)
    assert store.get_approval(rid).state.value == "pending"
    store.deny_approval(rid, by="bob")
    with pytest.raises(InvalidArgument, match="already decided"):
        store.grant_approval(rid, by="alice")
    with pytest.raises(InvalidArgument, match="already decided"):
        store.deny_approval(rid, by="alice")
    after = store.get_approval(rid)
    assert (after.state.value, after.decided_by) == ("denied", "bob")


def test_decorator_arguments_are_checked():
    for bad in [
        dict(decision="maybe"),
        dict(decision="approve", approval_timeout=-1),
        dict(decision="approve", approval_ttl=0),
        dict(fingerprint_exclude="id"),
    ]:
        with pytest.raises(InvalidArgument):
            ctrlrun.protect("x.y", effect="k:{a}", **bad)


WORKER = textwrap.dedent("""
    import os, sys, time
    import ctrlrun
    url, marks, start = sys.argv[1], sys.argv[2], float(sys.argv[3])
    store = ctrlrun.open_store(url)

    @ctrlrun.protect("acme.refund", effect="refund:{payment_id}", store=store,
                     decision="approve")
    def refund(payment_id: str, amount: int) -> str:
        fd = os.open(os.path.join(marks, f"run.{os.getpid()}"), os.O_CREAT | os.O_EXCL)
        os.close(fd)
        time.sleep(0.2)
        return "done"

    time.sleep(max(0.0, start - time.time()))
    try:
        print(refund("pi_race", 100))
    except ctrlrun.CTRLRunError as exc:
        print(type(exc).__name__)
""")


def test_eight_processes_retrying_one_approved_call_run_it_once(store_url, store, tmp_path):
    @ctrlrun.protect("acme.refund", effect="refund:{payment_id}", store=store, decision="approve")
    def refund(payment_id: str, amount: int) -> str:
        raise AssertionError("asking runs nothing")

    with pytest.raises(ApprovalRequired) as info:
        refund("pi_race", 100)
    store.grant_approval(info.value.request_id, by="alice")
    marks = tmp_path / "marks"
    marks.mkdir()
    start = time.time() + 2.0
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WORKER, store_url, str(marks), repr(start)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=str(tmp_path),
        )
        for _ in range(8)
    ]
    outs = []
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err[-2000:]
        outs.append(out.strip())
    assert len(os.listdir(marks)) == 1, outs
    assert outs.count("done") == 1, outs
    # the others were refused by the winner's row, and nobody asked for a new approval
    assert sorted(outs) == ["DuplicateEffect"] * 7 + ["done"], outs
    (used,) = store.list_approvals()
    assert used.state.value == "used" and used.request_id == info.value.request_id
    # one consumed receipt; the effect's chain is the winner's reservation and outcome only
    kinds = [(r.chain, r.kind) for r in store.list_receipts("refund:pi_race")]
    assert kinds.count(("approval", "consumed")) == 1, kinds
    assert [k for c, k in kinds if c == "effect"] == ["reservation", "outcome"], kinds
    assert store.verify_receipts().ok
