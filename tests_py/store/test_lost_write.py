"""A store that lost a write it had acknowledged (issue 46, item 3): what a restore from a backup,
or a failover to a standby that never received the write, leaves behind, made here with plain
SQL on the real store (the ``raw`` fixture) while the executor runs. The real failover of an
asynchronous pair is in tests_py/postgres/test_pg_replication.py."""

from __future__ import annotations

import pytest

import ctrlrun


def lost_by(mode, store, name: str, vanish):
    """A protected executor whose body runs once, during which ``vanish(key)`` takes the
    store back in time; returns it and the list of its runs."""
    runs = []

    @mode.protect(name, effect="pay:{order}", store=store)
    def pay(order: str) -> int:
        runs.append(order)
        vanish(f"pay:{order}")
        return 7

    return pay, runs


def test_a_reservation_gone_is_a_lost_write_recorded_anew_for_a_person(mode, store, raw):
    pay, runs = lost_by(mode, store, "t.pay", lambda key: raw.run("DELETE FROM ctrlrun_effects"))
    with pytest.raises(ctrlrun.StoreLostWrite) as info:
        mode.call(pay, "o1")
    lost = info.value
    assert isinstance(lost, ctrlrun.StoreError)
    assert not isinstance(lost, ctrlrun.DuplicateEffect)
    assert (lost.effect_key, lost.marked, lost.record) == ("pay:o1", True, None)
    assert lost.action_id.startswith("act_")
    text = str(lost)
    assert "lost a committed write" in text and "the key has no row" in text
    assert "now ambiguous" in text
    assert runs == ["o1"]
    # recorded anew under the lost attempt's action, and marked: no blind retry runs it again
    row = store.get_effect("pay:o1")
    assert (row.state.value, row.action_id, row.attempt) == ("ambiguous", lost.action_id, 1)
    assert "lost the acknowledged write of action " + lost.action_id in row.error
    with pytest.raises(ctrlrun.AmbiguousEffect):
        mode.call(pay, "o1")
    assert runs == ["o1"]


def test_another_attempt_in_its_place_is_marked_ambiguous_for_a_person(
    mode, store, second_store, raw
):
    def replaced(key: str) -> None:
        raw.run("DELETE FROM ctrlrun_effects")
        second_store.reserve_effect(key, "act_other_holder", 60)  # attempt 1 once more
        second_store.begin_execution(key, "act_other_holder")

    pay, runs = lost_by(mode, store, "t.pay", replaced)
    with pytest.raises(ctrlrun.StoreLostWrite) as info:
        mode.call(pay, "o2")
    lost = info.value
    assert lost.marked is True
    assert lost.record.action_id == "act_other_holder" and lost.record.attempt == 1
    assert "attempt 1 of action act_other_holder" in str(lost)
    assert "now ambiguous" in str(lost)
    row = store.get_effect("pay:o2")
    assert row.state.value == "ambiguous" and row.action_id == "act_other_holder"
    assert "lost the acknowledged write of action " + lost.action_id in row.error
    assert runs == ["o2"]
    # the other holder's own outcome, late, keeps the key for the person
    second_store.commit_effect("pay:o2", "act_other_holder", {"paid": 1}, attempt=1)
    row = store.get_effect("pay:o2")
    assert row.state.value == "ambiguous" and row.result == {"paid": 1}
    assert "a person resolves the lost write" in row.error
    # no blind retry: the key refuses the next call
    with pytest.raises(ctrlrun.AmbiguousEffect):
        mode.call(pay, "o2")
    assert runs == ["o2"]
