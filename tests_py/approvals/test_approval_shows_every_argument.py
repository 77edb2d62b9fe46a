"""An approver sees every argument of the call: ``fingerprint_exclude`` leaves an argument out
of what the approval is bound to, never out of what the approver is shown. The excluded ones
are marked as not bound wherever a request is read: the exception the agent gets,
``Store.get_approval`` / ``list_approvals``, and ``ctrlrun approvals list`` (table and JSON).
Both backends, a real CLI process."""

from __future__ import annotations

import json

import pytest

import ctrlrun
from ctrlrun import ApprovalRequired
from tests_py.support.cli import run_cli


class Client:  # a value with no canonical form, excluded as clients usually are
    pass


def refund_tool(store, runs):
    @ctrlrun.protect(
        "pay.refund",
        effect="refund:{payment_id}",
        decision="approve",
        fingerprint_exclude=("amount", "client", "request_id"),
        store=store,
    )
    def refund(payment_id: str, amount: int, request_id: str, client: Client) -> str:
        runs.append((payment_id, amount))
        return "refunded"

    return refund


def cli(store_url, *args):
    proc = run_cli(*args, "--store", store_url)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_an_excluded_argument_is_shown_to_the_approver_and_marked_not_bound(store_url, store):
    runs: list = []
    refund = refund_tool(store, runs)
    with pytest.raises(ApprovalRequired) as info:
        refund("pi_1", 50000, "req_7", Client())
    shown = {
        "payment_id": "pi_1",
        "amount": 50000,
        "request_id": "req_7",
        "client": {"$unfingerprinted": f"{__name__}.Client"},
    }
    not_bound = ("amount", "client", "request_id")
    assert info.value.arguments == shown and info.value.not_bound == not_bound
    record = store.get_approval(info.value.request_id)
    assert record.arguments == shown and record.not_bound == not_bound
    (listed,) = store.list_approvals()
    assert listed.arguments == shown and listed.not_bound == not_bound
    assert listed.to_json()["not_bound"] == list(not_bound)

    table = cli(store_url, "approvals", "list")
    assert "50000" in table and '"amount"' in table
    assert "(not bound: amount, client, request_id)" in table
    (as_json,) = json.loads(cli(store_url, "approvals", "list", "--json"))
    assert as_json["arguments"] == shown and as_json["not_bound"] == list(not_bound)
    granted = cli(store_url, "approve", info.value.request_id, "--by", "ops:alice")
    assert "50000" in granted and "(not bound: amount, client, request_id)" in granted
    assert runs == []


def test_a_call_without_exclusions_shows_nothing_as_not_bound(store):
    @ctrlrun.protect("pay.void", effect="void:{payment_id}", decision="approve", store=store)
    def void(payment_id: str, amount: int) -> str:
        return "voided"

    with pytest.raises(ApprovalRequired) as info:
        void("pi_2", 10)
    record = store.get_approval(info.value.request_id)
    assert record.arguments == {"payment_id": "pi_2", "amount": 10}
    assert record.not_bound == () and info.value.not_bound == ()
