"""The store's policy on both backends (docs/roles.md): a floor under every caller's own policy.
(On PostgreSQL the server enforces it against the agent's own credentials:
tests_py/roles/test_store_policy.py.)"""

from __future__ import annotations

from datetime import timedelta

import pytest

import ctrlrun
from ctrlrun import ActionDenied, ApprovalRequired, InvalidArgument
from ctrlrun.call.approval import ask
from ctrlrun.store.policy import ActionRule


def wire_of(store, runs, **options):
    @ctrlrun.protect("acme.wire", effect="wire:{transfer_id}", store=store, **options)
    def wire(transfer_id: str) -> str:
        runs.append(transfer_id)
        return "sent"

    return wire


def test_an_action_the_store_says_needs_approval_asks_whatever_the_caller_says(store, mode):
    store.apply_policy([ActionRule("acme.wire", "approve", 2)])
    runs: list = []

    @mode.protect("acme.wire", effect="wire:{transfer_id}", store=store)
    def wire(transfer_id: str) -> str:
        runs.append(transfer_id)
        return "sent"

    with pytest.raises(ApprovalRequired) as asked:
        mode.call(wire, "t1")
    assert store.get_approval(asked.value.request_id).approvals_needed == 2
    store.grant_approval(asked.value.request_id, by="alice")
    store.grant_approval(asked.value.request_id, by="bob")
    assert mode.call(wire, "t1") == "sent" and runs == ["t1"]


def test_a_request_needs_the_larger_of_the_two_numbers(store):
    store.apply_policy([ActionRule("acme.wire", "approve", 2)])
    day = timedelta(days=1)
    more = ask(store, "acme.wire", "wire:a", "d-a", {"a": 1}, day, approvals_needed=3)
    fewer = ask(store, "acme.wire", "wire:b", "d-b", {"b": 1}, day, approvals_needed=1)
    assert (more.approvals_needed, fewer.approvals_needed) == (3, 2)


def test_a_request_made_before_the_store_raised_the_number_is_asked_anew(store):
    day = timedelta(days=1)
    first = ask(store, "acme.wire", "wire:c", "d-c", {"c": 1}, day)
    store.grant_approval(first.request_id, by="alice")
    store.apply_policy([ActionRule("acme.wire", "approve", 2)])
    again = ask(store, "acme.wire", "wire:c", "d-c", {"c": 1}, day)
    assert again.request_id != first.request_id and again.approvals_needed == 2
    assert store.get_approval(first.request_id).state.value == "expired"


def test_a_denied_action_never_runs_and_asks_nobody(store):
    store.apply_policy([ActionRule("acme.wire", "deny")])
    runs: list = []
    with pytest.raises(ActionDenied, match="store's policy"):
        wire_of(store, runs)("t2")
    with pytest.raises(ActionDenied):
        wire_of(store, runs, decision="approve")("t2")
    assert runs == [] and store.get_effect("wire:t2") is None and store.list_approvals() == []


def test_the_policy_is_replaced_whole_and_bad_rules_write_nothing(store):
    store.apply_policy([ActionRule("a", "approve", 2), ActionRule("b", "deny")])
    assert store.policy() == [ActionRule("a", "approve", 2), ActionRule("b", "deny", 1)]
    for bad in (
        [ActionRule("a", "maybe")],
        [ActionRule("a", "approve", 11)],
        [ActionRule("a", "allow"), ActionRule("a", "deny")],
        [ActionRule("two\nlines", "allow")],
    ):
        with pytest.raises(InvalidArgument):
            store.apply_policy(bad)
    assert store.policy() == [ActionRule("a", "approve", 2), ActionRule("b", "deny", 1)]
    store.apply_policy([])
    assert store.policy() == []
