"""Approvals that must fail closed, found by attacking them: no template, arguments without a
canonical form, a policy entry that only gives a template, bad request ids, and text an agent
chose reaching an approver's terminal. Both backends."""

from __future__ import annotations

import pytest

import ctrlrun
from ctrlrun import ApprovalRequired, InvalidArgument
from tests_py.support.cli import run_cli


def test_an_approve_action_without_a_template_is_refused_never_run(store, tmp_path, monkeypatch):
    runs: list = []

    @ctrlrun.protect("pay.refund", decision="approve", store=store)
    def refund(payment_id: str, amount: int) -> str:
        runs.append(payment_id)
        return "done"

    with pytest.raises(InvalidArgument, match="needs approval, but no effect template"):
        refund("pi_1", 500)
    # the same through a policy entry without `effect`
    policy = tmp_path / "ctrlrun.yaml"
    policy.write_text("schema: ctrlrun.policy/v2\nactions:\n  pay.void:\n    decision: approve\n")
    monkeypatch.setenv("CTRLRUN_CONFIG", str(policy))

    @ctrlrun.protect("pay.void", store=store)
    def void(payment_id: str) -> str:
        runs.append(payment_id)
        return "done"

    with pytest.raises(InvalidArgument, match="needs approval"):
        void("pi_2")
    assert runs == [] and store.list_approvals() == [] and store.list_effects() == []
    check = run_cli("policy", "check", str(policy))
    assert check.returncode == 0 and "approve: pay.void" in check.stdout


def test_a_policy_entry_with_only_a_template_keeps_the_decorators_approve(
    store, tmp_path, monkeypatch
):
    policy = tmp_path / "ctrlrun.yaml"
    policy.write_text(
        'schema: ctrlrun.policy/v2\nactions:\n  pay.refund:\n    effect: "refund:{payment_id}"\n'
    )
    monkeypatch.setenv("CTRLRUN_CONFIG", str(policy))
    runs: list = []

    @ctrlrun.protect("pay.refund", decision="approve", store=store)
    def refund(payment_id: str, amount: int) -> str:
        runs.append(payment_id)
        return "done"

    with pytest.raises(ApprovalRequired):
        refund("pi_1", 500)
    assert runs == []


class Money:
    """No canonical form."""

    def __init__(self, cents: int) -> None:
        self.cents = cents


def test_an_approval_is_never_bound_to_arguments_it_cannot_show(store):
    @ctrlrun.protect("pay.send", effect="send:{to}", decision="approve", store=store)
    def send(to: str, amount: Money) -> str:
        raise AssertionError("never runs")

    with pytest.raises(InvalidArgument, match="amount"):
        send("bob", Money(500))
    assert store.list_approvals() == [] and store.list_effects() == []


def test_fingerprint_exclude_is_checked_at_decoration():
    def f(to: str, request_id: str) -> None: ...

    for bad in [None, 5, [[1]], "request_id"]:
        with pytest.raises(InvalidArgument):
            ctrlrun.protect("x.y", effect="k:{to}", fingerprint_exclude=bad)(f)
    with pytest.raises(InvalidArgument, match="names no parameter"):
        ctrlrun.protect("x.y", effect="k:{to}", fingerprint_exclude=("nope",))(f)
    with pytest.raises(InvalidArgument, match="placeholder"):
        ctrlrun.protect("x.y", effect="k:{to}", fingerprint_exclude=("to",))(f)
    ctrlrun.protect("x.y", effect="k:{to}", fingerprint_exclude=("request_id",))(f)
    with pytest.raises(InvalidArgument, match="signature"):  # a builtin has none to check
        ctrlrun.protect("x.y", fingerprint_exclude=("a",))(max)


@pytest.mark.parametrize("ttl", ["1e-7", "0.0000001s", "0.5"])
def test_a_time_to_live_under_a_second_is_refused(tmp_path, ttl):
    path = tmp_path / "p.yaml"
    path.write_text(
        f"schema: ctrlrun.policy/v2\nactions:\n  a.b:\n    decision: approve\n"
        f"    approval_ttl: {ttl}\n"
    )
    with pytest.raises(ctrlrun.PolicyError, match="from 1 second"):
        from ctrlrun.policy import load_policy

        load_policy(str(path))


@pytest.mark.parametrize("bad", ["a\x00b", "apr_", "apr_" + "G" * 32, "x" * 5000, "\ud800"])
def test_a_malformed_request_id_is_invalid_on_both_backends(store, bad):
    with pytest.raises(InvalidArgument):
        store.get_approval(bad)
    with pytest.raises(InvalidArgument):
        store.grant_approval(bad, by="alice")


def test_a_lone_surrogate_in_an_argument_asks_like_any_other_value(store):
    @ctrlrun.protect("pay.note", effect="note:{ref}", decision="approve", store=store)
    def note(ref: str, text: str) -> str:
        return "noted"

    with pytest.raises(ApprovalRequired) as info:
        note("r1", "bad \ud800 text")
    store.grant_approval(info.value.request_id, by="alice")
    assert note("r1", "bad \ud800 text") == "noted"


def test_what_an_agent_chose_cannot_rewrite_the_approvers_terminal(store_url, store):
    @ctrlrun.protect("pay.refund", effect="refund:{pid}", decision="approve", store=store)
    def refund(pid: str, memo: str) -> str:
        return "done"

    with pytest.raises(ApprovalRequired):
        refund("pi_\x1b[2K\x1b[1Gpi_9", "\u202eevil\x9b")
    out = run_cli("approvals", "list", "--store", store_url)
    assert out.returncode == 0, out.stderr
    assert "\x1b" not in out.stdout and "\u202e" not in out.stdout and "\x9b" not in out.stdout
    assert "\\u001b[2K" in out.stdout


def test_a_request_edited_by_hand_is_a_store_error_not_a_traceback(store, store_url, raw):
    @ctrlrun.protect("pay.refund", effect="refund:{payment_id}", decision="approve", store=store)
    def refund(payment_id: str, amount: int) -> str:
        return "done"

    with pytest.raises(ApprovalRequired) as asked:
        refund("pi_1", 500)
    raw.run(
        "UPDATE ctrlrun_approvals SET arguments = '{\"amount\": 5', receipt_seq = receipt_seq + 1"
    )
    with pytest.raises(ctrlrun.StoreError, match=r"arguments of approval request .* not JSON"):
        store.get_approval(asked.value.request_id)
    shown = run_cli("approvals", "list", "--store", store_url)
    assert shown.returncode == 2 and "Traceback" not in shown.stderr, shown.stderr
    assert "not JSON" in shown.stderr, shown.stderr
