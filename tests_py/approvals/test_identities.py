"""Who asks and who decides: a request records its ``requested_by`` and that principal can never
grant it; an action may need several distinct approvers; approver accounts live in the store;
the CLI records ``cli:<OS user>`` unless told a name. Every case on SQLite and PostgreSQL, sync
and async where a call is made."""

from __future__ import annotations

import getpass

import pytest

import ctrlrun
from ctrlrun import ApprovalRequired, InvalidArgument
from ctrlrun.store.approvals import ApprovalState
from tests_py.support import policy_files
from tests_py.support.cli import run_cli


def refund_tool(mode, store, runs, **options):
    @mode.protect(
        "acme.refund",
        effect="refund:{payment_id}",
        store=store,
        decision="approve",
        requested_by="refund-agent",
        **options,
    )
    def refund(payment_id: str, amount: int) -> dict:
        runs.append(payment_id)
        return {"refunded": amount}

    return refund


def asked(mode, fn, *args):
    with pytest.raises(ApprovalRequired) as info:
        mode.call(fn, *args)
    return info.value


def test_who_asked_is_recorded_and_can_never_grant(mode, store):
    runs: list = []
    refund = refund_tool(mode, store, runs)
    request_id = asked(mode, refund, "pi_1", 500).request_id
    (pending,) = store.list_approvals("pending")
    assert (pending.requested_by, pending.approvals_needed, pending.granted_by) == (
        "refund-agent",
        1,
        (),
    )
    with pytest.raises(InvalidArgument, match=r"refund-agent asked .* cannot grant it"):
        store.grant_approval(request_id, by="refund-agent")
    assert store.get_approval(request_id).state is ApprovalState.PENDING  # nothing written
    store.grant_approval(request_id, by="alice")
    assert mode.call(refund, "pi_1", 500) == {"refunded": 500} and runs == ["pi_1"]


def test_two_approvers_are_two_distinct_people(store_url, store, tmp_path, monkeypatch):
    policy_files.use(tmp_path, monkeypatch, policy_files.TWO_APPROVERS)
    runs: list = []

    @ctrlrun.protect("acme.wire", store=store, requested_by="wire-agent")
    def wire(ref: str) -> str:
        runs.append(ref)
        return ref

    with pytest.raises(ApprovalRequired) as info:
        wire("w1")
    rid = info.value.request_id
    half = store.grant_approval(rid, by="alice", note="looks right")
    assert (half.state, half.granted_by, half.approvals_needed) == (
        ApprovalState.PENDING,
        ("alice",),
        2,
    )
    with pytest.raises(ApprovalRequired):  # one grant of two: still nothing runs
        wire("w1")
    with pytest.raises(InvalidArgument, match="already granted"):
        store.grant_approval(rid, by="alice")
    # the CLI is one more approver, under its own name
    proc = run_cli("approve", rid, "--store", store_url)
    assert proc.returncode == 0, proc.stderr
    full = store.get_approval(rid)
    assert full.state is ApprovalState.GRANTED
    assert full.granted_by == ("alice", f"cli:{getpass.getuser()}")
    kinds = [r.kind for r in store.list_receipts("wire:w1")]
    assert kinds == ["requested", "granted in part", "granted"]
    assert store.verify_receipts().ok
    assert wire("w1") == "w1" and runs == ["w1"]


def test_approver_accounts_keep_only_a_hash(store):
    made = store.add_approver("alice", "scrypt$16384$8$1$c2FsdA$aGFzaA")
    assert made.name == "alice" and "scrypt" not in repr(made)
    with pytest.raises(InvalidArgument, match="already exists"):
        store.add_approver("alice", "scrypt$x")
    reset = store.set_approver_secret("alice", "scrypt$y")
    assert reset.secret_hash == "scrypt$y" and reset.created_at == made.created_at
    with pytest.raises(InvalidArgument, match="no approver"):
        store.set_approver_secret("bob", "scrypt$y")
    for bad in ("", " alice", "a\nb", "x" * 201):
        with pytest.raises(InvalidArgument):
            store.add_approver(bad, "scrypt$y")
    with pytest.raises(InvalidArgument):
        store.add_approver("carol", "")
    assert [a.name for a in store.list_approvers()] == ["alice"]
    assert store.get_approver("alice") == reset and store.get_approver("bob") is None
    assert store.remove_approver("alice") and not store.remove_approver("alice")


def test_requested_by_is_checked_at_decoration(store):
    for bad in ("", "a\nb", 7, "x" * 201):
        with pytest.raises(InvalidArgument, match="requested_by"):
            ctrlrun.protect("x", effect="x:{a}", store=store, requested_by=bad)  # type: ignore[arg-type]


def test_cli_decisions_default_to_the_os_user_and_resolve_keeps_a_note(store, store_url):
    runs: list = []

    @ctrlrun.protect("acme.mail", effect="mail:{to}", store=store, decision="approve")
    def mail(to: str) -> None:
        runs.append(to)

    with pytest.raises(ApprovalRequired) as info:
        mail("a@x")
    proc = run_cli("deny", info.value.request_id, "--store", store_url)
    assert proc.returncode == 0, proc.stderr
    denied = store.get_approval(info.value.request_id)
    assert (denied.state, denied.decided_by) == (ApprovalState.DENIED, f"cli:{getpass.getuser()}")

    @ctrlrun.protect("acme.charge", effect="charge:{ref}", store=store)
    def charge(ref: str) -> None:
        raise RuntimeError("connection reset")

    with pytest.raises(RuntimeError):
        charge("c1")
    proc = run_cli(
        "resolve", "charge:c1", "--failed", "--note", "no charge in Stripe", "--store", store_url
    )
    assert proc.returncode == 0, proc.stderr
    rec = store.get_effect("charge:c1")
    assert rec.error.endswith(
        f"resolved as failed by cli:{getpass.getuser()}: no charge in Stripe]"
    )
