"""Receipts on both backends: one per committed write through the decorator, the CLI and the
store, none for a refusal; chains that `ctrlrun receipts verify` checks, and that it finds
broken when a receipt is changed, deleted or reordered."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
from datetime import timedelta

import pytest

import ctrlrun
from ctrlrun import AmbiguousEffect, DuplicateEffect, InvalidArgument, NotExecuted
from tests_py.support.cli import run_cli


def cli(*args: str) -> subprocess.CompletedProcess:
    return run_cli(*args)


def events(store, key):
    return [(r.chain, r.kind, r.state) for r in store.list_receipts(key)]


def test_every_outcome_has_its_receipts_and_a_refusal_none(mode, clocked_store, clock):
    store, runs = clocked_store, []

    @mode.protect(
        "acme.refund", effect="refund:{payment_id}", store=store, lease=timedelta(seconds=30)
    )
    async def refund(payment_id: str, amount: int) -> dict:
        runs.append(payment_id)
        if payment_id == "declined":
            raise NotExecuted("the card was declined before any money moved")
        if payment_id == "lost" and runs.count("lost") == 1:
            raise TimeoutError("no answer from the bank")
        return {"refunded": amount}

    assert mode.call(refund, "pi_1", 500) == {"refunded": 500}
    with pytest.raises(DuplicateEffect):
        mode.call(refund, "pi_1", 500)
    with pytest.raises(NotExecuted):
        mode.call(refund, "declined", 1)
    with pytest.raises(TimeoutError):
        mode.call(refund, "lost", 1)
    with pytest.raises(AmbiguousEffect):
        mode.call(refund, "lost", 1)
    store.resolve_effect("refund:lost", "failed", resolver="ops@example.com")
    assert mode.call(refund, "lost", 1) == {"refunded": 1}

    assert events(store, "refund:pi_1") == [
        ("effect", "reservation", "executing"),
        ("effect", "outcome", "committed"),
    ]
    assert events(store, "refund:declined") == [
        ("effect", "reservation", "executing"),
        ("effect", "outcome", "failed"),
    ]
    assert events(store, "refund:lost") == [
        ("effect", "reservation", "executing"),
        ("effect", "outcome", "ambiguous"),
        ("effect", "resolution", "failed"),
        ("effect", "reservation", "executing"),
        ("effect", "outcome", "committed"),
    ]
    first, *_, resolved, again, done = store.list_receipts("refund:lost")
    assert first.action == "acme.refund" and first.attempt == 1 and again.attempt == 2
    assert first.args_digest == store.get_effect("refund:lost").args_digest
    assert resolved.actor == "ops@example.com"
    assert done.at == store.get_effect("refund:lost").updated_at
    assert all(r.writer and r.writer.endswith(f":{os.getpid()}") for r in store.list_receipts())
    check = store.verify_receipts()
    assert (check.ok, check.receipts, check.chains) == (True, 9, 3)


def test_approval_events_have_receipts_bound_to_the_reservation(mode, store):
    runs: list = []

    @mode.protect("acme.refund", effect="refund:{payment_id}", store=store, decision="approve")
    def refund(payment_id: str, amount: int) -> dict:
        runs.append(amount)
        return {"refunded": amount}

    with pytest.raises(ctrlrun.ApprovalRequired) as first:
        mode.call(refund, "pi_9", 500)
    store.deny_approval(first.value.request_id, by="bob", note="too much")
    with pytest.raises(ctrlrun.ApprovalRequired) as second:
        mode.call(refund, "pi_9", 50)  # other arguments: another request
    store.grant_approval(second.value.request_id, by="alice")
    assert mode.call(refund, "pi_9", 50) == {"refunded": 50}
    rs = store.list_receipts("refund:pi_9")
    chains = {}
    for r in rs:
        chains.setdefault(r.request_id or "effect", []).append((r.kind, r.actor))
    assert chains == {
        first.value.request_id: [("requested", None), ("denied", "bob")],
        second.value.request_id: [("requested", None), ("granted", "alice"), ("consumed", "alice")],
        "effect": [("reservation", None), ("outcome", None)],
    }
    consumed = next(r for r in rs if r.kind == "consumed")
    reservation = next(r for r in rs if r.kind == "reservation")
    assert consumed.action_id == reservation.action_id
    assert reservation.approval_id == second.value.request_id
    assert store.verify_receipts().ok


# -- tampering: what `ctrlrun receipts verify` must find ------------------------------------


def three_writes(store):
    @ctrlrun.protect("acme.mail", effect="mail:{to}", store=store)
    def mail(to: str) -> str:
        return "sent"

    mail("alice")
    mail("bob")
    ids = [r.id for r in store.list_receipts("mail:bob")]
    assert len(ids) == 2
    return ids


SWAP = (
    "UPDATE ctrlrun_receipts SET (seq, prev_hash, hash, at, kind, state) = "
    "(SELECT o.seq, o.prev_hash, o.hash, o.at, o.kind, o.state FROM ctrlrun_receipts o "
    "WHERE o.id = CASE ctrlrun_receipts.id WHEN {a} THEN {b} ELSE {a} END) "
    "WHERE id IN ({a}, {b})"
)


@pytest.mark.parametrize(
    "tamper,broken,why",
    [
        ("UPDATE ctrlrun_receipts SET state = 'failed' WHERE id = {b}", "b", "was changed"),
        ("UPDATE ctrlrun_receipts SET actor = 'mallory' WHERE id = {a}", "a", "was changed"),
        ("DELETE FROM ctrlrun_receipts WHERE id = {a}", "b", "one was deleted"),
        (
            "DELETE FROM ctrlrun_receipts WHERE id = {b}",
            None,
            "has had 2 writes, but its last receipt is number 1: receipts were deleted",
        ),
        (SWAP, "a", "reordered"),
    ],
)
def test_verify_finds_a_changed_deleted_or_reordered_receipt(
    store, store_url, raw, tamper, broken, why
):
    a, b = three_writes(store)
    ok = cli("receipts", "verify", "--store", store_url)
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.startswith("receipts intact: 4 receipts in 2 chains"), ok.stdout
    assert store.verify_receipts("mail:bob").ok and store.verify_receipts("mail:bob").chains == 1
    raw.run(tamper.format(a=a, b=b))
    bad = cli("receipts", "verify", "--store", store_url)
    assert bad.returncode == 1, (bad.stdout, bad.stderr)
    assert "Traceback" not in bad.stderr
    line = bad.stderr.strip()
    assert line.startswith("ctrlrun: receipts broken: ") and "effect 'mail:bob'" in line, line
    assert why in line, line
    if broken is not None:
        want = {"a": a, "b": b}[broken]
        assert f"receipt {want} of effect 'mail:bob'" in line, line
    check = store.verify_receipts()
    assert not check.ok and check.broken_key == "mail:bob"
    assert check.broken_receipt == (None if broken is None else {"a": a, "b": b}[broken])
    # one key's chains alone (what the console shows): the same finding for bob, alice intact
    mine = store.verify_receipts("mail:bob")
    assert (mine.ok, mine.broken_key, mine.broken_receipt, mine.reason) == (
        check.ok,
        check.broken_key,
        check.broken_receipt,
        check.reason,
    )
    alone = store.verify_receipts("mail:alice")
    assert alone.ok and (alone.receipts, alone.chains) == (2, 1)
    as_json = json.loads(cli("receipts", "verify", "--json", "--store", store_url).stdout)
    assert as_json["ok"] is False and as_json["broken_key"] == "mail:bob"


def test_a_write_outside_ctrlrun_is_refused_or_found(store, store_url, raw):
    three_writes(store)
    # a write that sets no receipt (an older ctrlrun still running after the upgrade) fails
    for sql in [
        "UPDATE ctrlrun_effects SET state = 'failed' WHERE effect_key = 'mail:alice'",
        "INSERT INTO ctrlrun_effects (effect_key, state, action_id, attempt, "
        "created_at, updated_at) VALUES ('mail:eve', 'committed', 'act_x', 1, 0, 0)",
    ]:
        with pytest.raises(Exception, match="sets no receipt"):
            raw.run(sql)
    assert store.get_effect("mail:alice").state.value == "committed"
    assert store.get_effect("mail:eve") is None
    # one that fakes a chain step is found: the row no longer matches its head
    raw.run(
        "UPDATE ctrlrun_effects SET state = 'failed', receipt_seq = receipt_seq + 1 "
        "WHERE effect_key = 'mail:alice'"
    )
    bad = cli("receipts", "--store", store_url, "verify")  # options before the subcommand
    assert bad.returncode == 1, (bad.stdout, bad.stderr)
    assert "the row of effect 'mail:alice' does not match its chain head" in bad.stderr


@pytest.mark.parametrize(
    "edit, says",
    [
        ("created_at = 9223372036854775807", "not a date"),
        ("result = '{\"sent\": tru'", "stored result of 'mail:alice' is not JSON"),
    ],
    ids=["time", "result"],
)
def test_a_row_edited_into_nonsense_is_a_store_error_not_a_traceback(
    store, store_url, raw, edit, says
):
    three_writes(store)
    raw.run(
        f"UPDATE ctrlrun_effects SET {edit}, receipt_seq = receipt_seq + 1 "
        f"WHERE effect_key = 'mail:alice'"
    )
    with pytest.raises(ctrlrun.StoreError, match=says):
        store.get_effect("mail:alice")

    @ctrlrun.protect("acme.mail", effect="mail:{to}", store=store, replay=True)
    def mail(to: str) -> str:
        return "sent"

    with pytest.raises(ctrlrun.StoreError, match=says):  # the replay reads the row too
        mail("alice")
    for args in (
        ["effects", "show", "mail:alice"],
        ["effects", "list"],
        ["effects", "list", "--json"],
    ):
        shown = cli(*args, "--store", store_url)
        assert shown.returncode == 2 and "Traceback" not in shown.stderr, shown.stderr
        assert "the row was edited outside ctrlrun" in shown.stderr, shown.stderr


# -- the listing -----------------------------------------------------------------------------
def test_the_cli_lists_receipts_by_key_latest_first_cut(store, store_url):
    three_writes(store)
    table = cli("receipts", "--store", store_url)
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    assert lines[0].split() == [
        "ID",
        "AT",
        "EFFECT",
        "KEY",
        "EVENT",
        "STATE",
        "ACTION",
        "ATTEMPT",
        "BY",
    ]
    assert len(lines) == 5 and "mail:alice" in lines[1] and "outcome" in lines[4]
    one = cli("receipts", "mail:bob", "--limit", "1", "--json", "--store", store_url)
    (only,) = json.loads(one.stdout)
    assert (only["effect_key"], only["kind"], only["state"]) == ("mail:bob", "outcome", "committed")
    assert only["at"].endswith("Z") and len(only["hash"]) == 64
    # a key named like the subcommand is listed with `list`
    named = cli("receipts", "list", "verify", "--store", store_url)
    assert named.returncode == 0 and named.stdout.startswith("no receipts for 'verify'")
    bad = cli("receipts", "--limit", "0", "--store", store_url)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr


@pytest.mark.parametrize(
    "kwargs",
    [{"limit": 0}, {"limit": -1}, {"limit": True}, {"limit": 2**64}, {"limit": "3"}, {"key": 5}],
)
def test_bad_listing_arguments_are_invalid(store, kwargs):
    kwargs = dict(kwargs)
    key = kwargs.pop("key", None)
    with pytest.raises(InvalidArgument):
        store.list_receipts(key, **kwargs)


def test_verify_reads_every_receipt_whatever_its_id(store, raw, backend):
    """A receipt moved (by hand) to an id of 0 or below is still read and checked: here it
    also names another key, so its hash no longer matches."""
    a, _ = three_writes(store)
    if backend == "postgres":  # the id is GENERATED ALWAYS: a tamperer alters that first
        raw.run("ALTER TABLE ctrlrun_receipts ALTER COLUMN id SET GENERATED BY DEFAULT")
    raw.run(f"UPDATE ctrlrun_receipts SET id = -{a}, effect_key = 'mail:mallory' WHERE id = {a}")
    check = store.verify_receipts()
    assert not check.ok
    assert (check.broken_key, check.broken_receipt) == ("mail:mallory", -a), check


def test_a_refusal_over_a_row_edited_into_nonsense_still_pickles(store, raw):
    """A refusal crosses processes with the core's row as data: the row that no record can
    hold raises when ``.record`` is read, on either side, never when the refusal is pickled."""
    three_writes(store)
    raw.run(
        "UPDATE ctrlrun_effects SET result = 'not json', receipt_seq = receipt_seq + 1 "
        "WHERE effect_key = 'mail:alice'"
    )
    with pytest.raises(ctrlrun.DuplicateEffect) as refused:
        store.reserve_effect("mail:alice", "act_" + "9" * 32, 60)
    back = pickle.loads(pickle.dumps(refused.value))
    assert (back.state, back.effect_key) == ("committed", "mail:alice")
    for exc in (back, refused.value):
        with pytest.raises(ctrlrun.StoreError, match="stored result of 'mail:alice' is not JSON"):
            exc.record  # noqa: B018 - reading it is the point
