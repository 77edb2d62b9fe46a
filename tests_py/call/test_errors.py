"""Exceptions: the hierarchy of docs/spec.md §8.2, and every exception pickles with its attributes."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import uuid

import pytest

import ctrlrun
import ctrlrun.errors as errors
from ctrlrun import (
    AmbiguousEffect,
    CTRLRunError,
    DuplicateEffect,
    EffectKeyError,
    EffectState,
    InvalidArgument,
    NotExecuted,
    StoreError,
    StoreUnresolved,
    StoreWriteFailed,
)


def roundtrip(e):
    for proto in range(2, pickle.HIGHEST_PROTOCOL + 1):
        back = pickle.loads(pickle.dumps(e, protocol=proto))
        assert type(back) is type(e)
        assert str(back) == str(e)
        assert back.args == e.args
    return back


# --------------------------------------------------------------------------------------------
# hierarchy
# --------------------------------------------------------------------------------------------


def test_hierarchy_of_spec_8_2():
    assert issubclass(CTRLRunError, Exception)
    for cls in (
        InvalidArgument,
        EffectKeyError,
        NotExecuted,
        DuplicateEffect,
        AmbiguousEffect,
        StoreError,
    ):
        assert issubclass(cls, CTRLRunError), cls
    for cls in (StoreWriteFailed, StoreUnresolved):
        assert issubclass(cls, StoreError), cls
        assert issubclass(cls, CTRLRunError), cls
    # siblings are not each other
    assert not issubclass(StoreWriteFailed, StoreUnresolved)
    assert not issubclass(StoreUnresolved, StoreWriteFailed)
    assert not issubclass(DuplicateEffect, AmbiguousEffect)
    assert not issubclass(AmbiguousEffect, DuplicateEffect)
    assert not issubclass(NotExecuted, StoreError)
    assert not issubclass(EffectKeyError, InvalidArgument)
    assert not issubclass(InvalidArgument, EffectKeyError)


def test_every_exception_is_exported_from_ctrlrun():
    for name in errors.__all__:
        assert getattr(ctrlrun, name) is getattr(errors, name), name


# --------------------------------------------------------------------------------------------
# real instances
# --------------------------------------------------------------------------------------------


def _duplicate_committed(store):
    @ctrlrun.protect("p", effect="dup:{a}", store=store)
    def f(a):
        return {"ok": a}

    f("1")
    with pytest.raises(DuplicateEffect) as ei:
        f("1")
    return ei.value


def _duplicate_in_progress(store):
    store.reserve_effect("busy:1", "act_" + uuid.uuid4().hex, 300)
    with pytest.raises(DuplicateEffect) as ei:
        store.reserve_effect("busy:1", "act_" + uuid.uuid4().hex, 300)
    return ei.value


def _ambiguous(store):
    @ctrlrun.protect("p", effect="amb:{a}", store=store)
    def f(a):
        raise ValueError("lost")

    with pytest.raises(ValueError):
        f("1")
    with pytest.raises(AmbiguousEffect) as ei:
        f("1")
    return ei.value


def test_duplicate_effect_committed_pickles_with_attributes(store):
    e = _duplicate_committed(store)
    assert e.state == "committed"
    back = roundtrip(e)
    assert back.state == "committed"
    assert back.effect_key == "dup:1"
    assert back.record == e.record
    assert back.record.state == EffectState.COMMITTED
    assert back.record.result == {"ok": "1"}
    assert back.record.action_id == store.get_effect("dup:1").action_id


def test_duplicate_effect_in_progress_pickles_with_attributes(store):
    e = _duplicate_in_progress(store)
    assert e.state == "in_progress"
    back = roundtrip(e)
    assert back.state == "in_progress"
    assert back.effect_key == "busy:1"
    assert back.record == e.record
    assert back.record.state == EffectState.RESERVED
    assert back.record.lease_expires_at == e.record.lease_expires_at


def test_ambiguous_effect_pickles_with_attributes(store):
    e = _ambiguous(store)
    holder = store.get_effect("amb:1").action_id
    assert e.action_id == holder
    back = roundtrip(e)
    assert back.effect_key == "amb:1"
    assert back.action_id == holder
    assert back.record == e.record
    assert back.record.state == EffectState.AMBIGUOUS


def test_invalid_argument_pickles():
    with pytest.raises(InvalidArgument) as ei:
        ctrlrun.protect("p", effect="k:{a}", lease=0)
    back = roundtrip(ei.value)
    assert str(back) and str(back) == str(ei.value)


def test_effect_key_error_pickles(store):
    @ctrlrun.protect("p", effect="k:{a}", store=store)
    def f(a):
        pass

    with pytest.raises(EffectKeyError) as ei:
        f(None)
    back = roundtrip(ei.value)
    assert "a" in str(back)


def test_not_executed_pickles(store):
    @ctrlrun.protect("p", effect="ne:{a}", store=store)
    def f(a):
        raise NotExecuted("declined before sending")

    with pytest.raises(NotExecuted) as ei:
        f("1")
    back = roundtrip(ei.value)
    assert str(back) == "declined before sending"


def test_store_error_pickles(tmp_path):
    bad = tmp_path / "garbage.db"
    bad.write_bytes(os.urandom(4096))
    with pytest.raises(StoreError) as ei:
        ctrlrun.open_store(f"sqlite:///{bad}").list_effects()
    back = roundtrip(ei.value)
    assert str(bad) in str(back)


_LOCKER = r"""
import sqlite3, sys
c = sqlite3.connect(sys.argv[1], isolation_level=None)
c.execute("BEGIN IMMEDIATE")
print("locked", flush=True)
sys.stdin.readline()
c.execute("ROLLBACK")
"""


def test_store_write_failed_pickles(store_path):
    # a real SQLITE_BUSY at BEGIN: another *process* holds the write lock, busy timeout 0
    s = ctrlrun.open_store(f"sqlite:///{store_path}?busy_timeout=0")
    p = subprocess.Popen(
        [sys.executable, "-c", _LOCKER, str(store_path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert p.stdout.readline().strip() == "locked"
        with pytest.raises(StoreWriteFailed) as ei:
            s.reserve_effect("locked:1", "act_" + uuid.uuid4().hex, 60)
    finally:
        p.communicate("done\n", timeout=30)
    assert p.returncode == 0
    assert s.get_effect("locked:1") is None  # nothing was committed
    back = roundtrip(ei.value)
    assert isinstance(back, StoreError)
    assert "locked:1" in str(back)


def test_store_unresolved_pickles():
    e = StoreUnresolved("COMMIT outcome unknown for 'k'")
    back = roundtrip(e)
    assert str(back) == "COMMIT outcome unknown for 'k'"


@pytest.mark.parametrize("name", errors.__all__)
def test_every_class_in_errors_pickles(name):
    cls = getattr(errors, name)
    e = cls("message for " + name)
    back = roundtrip(e)
    assert str(back) == "message for " + name


def test_attributes_survive_pickling_of_constructed_instances():
    d = DuplicateEffect("m", state="in_progress", effect_key="k", record=None)
    back = roundtrip(d)
    assert (back.state, back.effect_key, back.record) == ("in_progress", "k", None)
    a = AmbiguousEffect("m", effect_key="k2", action_id="act_" + "0" * 32)
    back = roundtrip(a)
    assert (back.effect_key, back.action_id, back.record) == ("k2", "act_" + "0" * 32, None)


def test_every_core_error_kind_maps_to_its_exception_with_its_typed_fields(store):
    """src/py/errors.rs builds each core `Error` variant's class with its fields (no kind
    names sent as text): each raised here by the real core."""
    from ctrlrun import _core

    with pytest.raises(ctrlrun.InvalidArgument) as bad:
        _core.Template("pay:{")
    assert type(bad.value) is ctrlrun.InvalidArgument and str(bad.value)
    with pytest.raises(ctrlrun.EffectKeyError):
        _core.Template("pay:{order}").render([""])
    with pytest.raises(ctrlrun.StoreError) as unopened:
        ctrlrun.open_store("postgresql://nobody@127.0.0.1:1/none?connect_timeout=1")
    assert type(unopened.value) is ctrlrun.StoreError
    now = store._now_us() if store._now_us() is not None else None
    store._core.reserve(_core.ReserveRequest("pay:o1", "act_" + "1" * 32, 60_000_000, now, True))
    with pytest.raises(ctrlrun.DuplicateEffect) as held:
        store._core.reserve(_core.ReserveRequest("pay:o1", "act_" + "2" * 32, 60_000_000, now))
    assert type(held.value) is ctrlrun.DuplicateEffect
    assert (held.value.state, held.value.effect_key) == ("in_progress", "pay:o1")
    assert held.value.record is not None and held.value.record.action_id == "act_" + "1" * 32
    store._core.transition(
        _core.OutcomeRequest("pay:o1", "act_" + "1" * 32, 1, _core.Step.COMMIT, "1", now)
    )
    with pytest.raises(ctrlrun.DuplicateEffect) as done:
        store._core.reserve(_core.ReserveRequest("pay:o1", "act_" + "2" * 32, 60_000_000, now))
    assert (done.value.state, done.value.record.result) == ("committed", 1)
    store._core.reserve(_core.ReserveRequest("pay:o2", "act_" + "3" * 32, 60_000_000, now, True))
    store._core.transition(
        _core.OutcomeRequest("pay:o2", "act_" + "3" * 32, 1, _core.Step.AMBIGUOUS, "lost", now)
    )
    with pytest.raises(ctrlrun.AmbiguousEffect) as amb:
        store._core.reserve(_core.ReserveRequest("pay:o2", "act_" + "4" * 32, 60_000_000, now))
    assert type(amb.value) is ctrlrun.AmbiguousEffect
    assert (amb.value.effect_key, amb.value.action_id) == ("pay:o2", "act_" + "3" * 32)
    assert amb.value.record.state is ctrlrun.EffectState.AMBIGUOUS
    back = roundtrip(amb.value)  # pickled with the record converted
    assert back.record == amb.value.record and back.action_id == amb.value.action_id


def test_effect_conflict_and_approval_errors_pickle_with_attributes(store):
    @ctrlrun.protect("mail.send", effect="mail:{msg}", store=store)
    def send(msg: str, to: str) -> int:
        return 1

    send("m1", "alice")
    with pytest.raises(ctrlrun.EffectConflict) as conflict:
        send("m1", "bob")
    back = roundtrip(conflict.value)
    assert (back.fields, back.state, back.effect_key) == (("to",), "committed", "mail:m1")
    assert back.record == conflict.value.record and back.record.action == "mail.send"

    @ctrlrun.protect("pay.refund", effect="refund:{pid}", store=store, decision="approve")
    def refund(pid: str) -> int:
        return 1

    with pytest.raises(ctrlrun.ApprovalRequired) as asked:
        refund("pi_1")
    back = roundtrip(asked.value)
    assert back.request_id == asked.value.request_id and back.arguments == {"pid": "pi_1"}
    store.deny_approval(asked.value.request_id, by="bob")
    with pytest.raises(ctrlrun.ActionDenied) as denied:
        refund("pi_1")
    back = roundtrip(denied.value)
    assert (back.denied_by, back.request_id) == ("bob", asked.value.request_id)
