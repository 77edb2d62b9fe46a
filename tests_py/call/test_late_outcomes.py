"""Late outcomes are never lost (issue #11, item 6): a protected function that ends after its
lease lapsed, after a contender wrote its row ``ambiguous`` (and maybe a person resolved it),
has what it learned written while the row still belongs to its attempt; a newer attempt's row is
never touched. Sync and async executors, both backends; time moves with the store's clock."""

from __future__ import annotations

import logging
import uuid

import pytest

from ctrlrun import AmbiguousEffect, DuplicateEffect, EffectState, NotExecuted

LEASE = 60


def contender_lapses(store, key: str) -> None:
    """Another caller meets the lapsed lease: the row is written ambiguous, and refused."""
    with pytest.raises(AmbiguousEffect):
        store.reserve_effect(key, "act_" + uuid.uuid4().hex, LEASE)


def slow(mode, store, clock, then, *, resolve=None):
    """A protected function that outlives its lease: a contender lapses its row, a person
    optionally resolves it (``resolve``: "failed"/"committed"), then ``then()`` ends the body."""

    @mode.protect("late.pay", effect="pay:{order}", lease=LEASE, store=store)
    def pay(order):
        key = f"pay:{order}"
        clock.advance(LEASE + 1)
        contender_lapses(store, key)
        if resolve is not None:
            store.resolve_effect(key, resolve, "ops:alice")
        return then()

    return pay


def test_a_return_after_a_lapse_commits_the_value(mode, clocked_store, clock, second_store):
    pay = slow(mode, clocked_store, clock, lambda: {"paid": True})
    assert mode.call(pay, "o1") == {"paid": True}
    rec = second_store.get_effect("pay:o1")
    assert (rec.state, rec.attempt, rec.result) == (EffectState.COMMITTED, 1, {"paid": True})
    assert "lapsed" in rec.error and "returned, late" in rec.error
    assert rec.lease_expires_at is None
    with pytest.raises(DuplicateEffect) as again:
        mode.call(pay, "o1")
    assert again.value.state == "committed"


def test_not_executed_after_a_lapse_is_noted_and_left_for_a_person(
    mode, clocked_store, clock, second_store
):
    """Only a person moves an effect out of ambiguous to failed (docs/roles.md): the late
    report is noted on the row, and a retry stays refused until someone resolves it."""

    def refuse():
        raise NotExecuted("card declined")

    pay = slow(mode, clocked_store, clock, refuse)
    with pytest.raises(NotExecuted):
        mode.call(pay, "o2")
    rec = second_store.get_effect("pay:o2")
    assert rec.state is EffectState.AMBIGUOUS
    assert "lapsed" in rec.error and "did not run: NotExecuted: card declined" in rec.error
    with pytest.raises(AmbiguousEffect):
        clocked_store.reserve_effect("pay:o2", "act_" + "b" * 32, LEASE)
    second_store.resolve_effect("pay:o2", "failed", "ops:alice")
    renewed = clocked_store.reserve_effect("pay:o2", "act_" + "b" * 32, LEASE)
    assert renewed.attempt == 2


def test_another_exception_after_a_lapse_stays_ambiguous_with_the_late_error(
    mode, clocked_store, clock, second_store
):
    def boom():
        raise TimeoutError("the bank did not answer")

    pay = slow(mode, clocked_store, clock, boom)
    with pytest.raises(TimeoutError):
        mode.call(pay, "o3")
    rec = second_store.get_effect("pay:o3")
    assert rec.state is EffectState.AMBIGUOUS
    assert "lapsed" in rec.error and "TimeoutError: the bank did not answer" in rec.error


def test_a_late_return_overrules_a_persons_failed(mode, clocked_store, clock, second_store):
    pay = slow(mode, clocked_store, clock, lambda: "sent", resolve="failed")
    assert mode.call(pay, "o4") == "sent"
    rec = second_store.get_effect("pay:o4")
    assert (rec.state, rec.result, rec.resolved_by) == (EffectState.COMMITTED, "sent", "ops:alice")
    assert "resolved as failed by ops:alice" in rec.error and "overrules" in rec.error
    with pytest.raises(DuplicateEffect):  # a second run is refused: the effect happened
        mode.call(pay, "o4")


def test_a_persons_committed_keeps_its_state_and_gains_the_result(
    mode, clocked_store, clock, second_store
):
    pay = slow(mode, clocked_store, clock, lambda: 42, resolve="committed")
    assert mode.call(pay, "o5") == 42
    rec = second_store.get_effect("pay:o5")
    assert (rec.state, rec.result, rec.resolved_by) == (EffectState.COMMITTED, 42, "ops:alice")
    assert "resolved as committed by ops:alice" in rec.error


def test_a_newer_attempts_row_is_never_touched_and_the_late_outcome_is_logged(
    mode, clocked_store, clock, second_store, caplog
):
    key = "pay:o6"

    def newer_attempt_then_return():
        # resolved failed, so attempt 2 may run, and it does, to the end
        winner = clocked_store.reserve_effect(key, "act_" + "c" * 32, LEASE)
        clocked_store.begin_execution(key, winner.action_id)
        clocked_store.commit_effect(key, winner.action_id, "attempt 2")
        return "attempt 1"

    pay = slow(mode, clocked_store, clock, newer_attempt_then_return, resolve="failed")
    with caplog.at_level(logging.ERROR, logger="ctrlrun"):
        with pytest.raises(DuplicateEffect) as refused:
            mode.call(pay, "o6")
    assert refused.value.state == "committed"
    rec = second_store.get_effect(key)
    assert (rec.attempt, rec.result, rec.action_id) == (2, "attempt 2", "act_" + "c" * 32)
    logged = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert any(key in m and "attempt 1" in m and "not recorded" in m for m in logged), logged
