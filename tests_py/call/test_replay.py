"""``replay``: a committed duplicate with the same arguments gets the stored result (the
decorator's ``replay=True``, or ``replay: true`` in the policy). Every case on SQLite and
PostgreSQL, with a sync and an async executor."""

from __future__ import annotations

import threading

import pytest

import ctrlrun
from ctrlrun import AmbiguousEffect, DuplicateEffect, EffectConflict, InvalidArgument
from ctrlrun.policy import load_policy


def test_a_committed_duplicate_with_the_same_arguments_gets_the_stored_result(mode, store):
    runs: list = []

    @mode.protect("stripe.refund", effect="refund:{payment_id}", store=store, replay=True)
    def refund(payment_id: str, amount: int) -> dict:
        runs.append(payment_id)
        return {"refund_id": f"re_{payment_id}", "amount": amount, "parts": (1, 2)}

    first = mode.call(refund, "pi_1", 500)
    again = mode.call(refund, "pi_1", 500)
    assert first == {"refund_id": "re_pi_1", "amount": 500, "parts": (1, 2)}
    assert again == {"refund_id": "re_pi_1", "amount": 500, "parts": [1, 2]}  # as stored: JSON
    assert runs == ["pi_1"]
    with pytest.raises(EffectConflict) as info:  # other arguments: still a conflict
        mode.call(refund, "pi_1", 5000)
    assert info.value.fields == ("amount",) and runs == ["pi_1"]


def test_replay_never_answers_an_unsettled_or_unstorable_effect(mode, store):
    entered, release = threading.Event(), threading.Event()

    @mode.protect("job.run", effect="job:{n}", store=store, replay=True)
    def job(n: int) -> object:
        if n == 1:
            entered.set()
            release.wait(30)
        if n == 2:
            raise TimeoutError("no reply")
        return object() if n == 3 else n

    holder = threading.Thread(target=mode.call, args=(job, 1))
    holder.start()
    try:
        assert entered.wait(30)
        with pytest.raises(DuplicateEffect) as info:  # in progress: refused as without replay
            mode.call(job, 1)
        assert info.value.state == "in_progress"
    finally:
        release.set()
        holder.join(30)
    with pytest.raises(TimeoutError):
        mode.call(job, 2)
    with pytest.raises(AmbiguousEffect):
        mode.call(job, 2)
    assert mode.call(job, 3) is not None
    with pytest.raises(DuplicateEffect):  # stored as unserializable: nothing to replay
        mode.call(job, 3)


def test_a_row_written_without_arguments_is_not_replayed(mode, store):
    store.reserve_effect("mail:m1", "act_" + "1" * 32, 60)  # the Store API: no fingerprint
    store.begin_execution("mail:m1", "act_" + "1" * 32)
    store.commit_effect("mail:m1", "act_" + "1" * 32, {"sent": True})

    @mode.protect("mail.send", effect="mail:{msg}", store=store, replay=True)
    def send(msg: str) -> dict:
        return {"sent": "again"}

    with pytest.raises(DuplicateEffect):  # nothing proves these were the same arguments
        mode.call(send, "m1")


def test_the_policy_turns_replay_on_and_off(mode, store, tmp_path, monkeypatch):
    policy = tmp_path / "ctrlrun.yaml"
    monkeypatch.setenv("CTRLRUN_CONFIG", str(policy))
    policy.write_text(
        "schema: ctrlrun.policy/v2\nactions:\n  mail.send:\n"
        '    effect: "mail:{msg}"\n    replay: true\n'
    )

    @mode.protect("mail.send", store=store)
    def send(msg: str) -> str:
        return f"sent {msg}"

    assert mode.call(send, "m2") == "sent m2"
    assert mode.call(send, "m2") == "sent m2"  # the policy's replay: true

    @mode.protect("mail.send", store=store, replay=True)
    def send_replaying(msg: str) -> str:
        return f"sent {msg}"

    policy.write_text(
        "schema: ctrlrun.policy/v2\nactions:\n  mail.send:\n"
        '    effect: "mail:{msg}"\n    replay: false\n'
    )
    with pytest.raises(DuplicateEffect):  # the policy's replay: false wins over the decorator
        mode.call(send_replaying, "m2")


@pytest.mark.parametrize("value", ["yes please", "1"])
def test_a_replay_that_is_not_a_boolean_is_a_policy_error(value, tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text(f'schema: ctrlrun.policy/v2\nactions:\n  a:\n    replay: "{value}"\n')
    with pytest.raises(ctrlrun.PolicyError, match=r"actions\.a\.replay: must be true or false"):
        load_policy(str(path))


def test_replay_must_be_a_bool():
    with pytest.raises(InvalidArgument, match="replay must be True or False"):
        ctrlrun.protect("a.b", effect="k:{x}", replay="yes")  # type: ignore[arg-type]
