"""A lost write the store marked for a person is told as any ambiguous effect is
(``effect.ambiguous``, issue 46 item 3); one it could not mark is not (nothing is ambiguous)."""

from __future__ import annotations

import pytest

import ctrlrun
from tests_py.notify.test_events_from_calls import bodies, notify_policy


def test_a_lost_write_marked_for_a_person_is_told_ambiguous(
    mode, store, second_store, raw, receiver, here
):
    notify_policy(here, receiver.url())

    @mode.protect("acme.pay", effect="pay:{order}", store=store)
    def pay(order: str) -> int:
        raw.run("DELETE FROM ctrlrun_effects")  # the store goes back in time
        second_store.reserve_effect(f"pay:{order}", "act_other_holder", 60)
        return 1

    with pytest.raises(ctrlrun.StoreLostWrite) as info:
        mode.call(pay, "o/1")
    assert info.value.marked
    (event,) = bodies(receiver, 1)
    assert (event["event"], event["action"], event["effect_key"], event["state"]) == (
        "effect.ambiguous",
        "acme.pay",
        "pay:o/1",
        "ambiguous",
    )
