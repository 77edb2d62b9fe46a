"""``ctrlrun.extend_lease(seconds)`` inside a protected body: a body longer than its lease keeps
its key instead of being lapsed to ``ambiguous`` by the next contender. Both backends, sync and
async executors."""

from __future__ import annotations

import time

import pytest

import ctrlrun
from ctrlrun import DuplicateEffect, InvalidArgument


def test_a_body_that_extends_its_lease_outlives_it_and_a_contender_is_told_in_progress(
        mode, store):
    seen: list = []

    @mode.protect("job.long", effect="long:{n}", store=store, lease=1)
    def job(n: int) -> str:
        held = ctrlrun.extend_lease(60)
        seen.append(held.lease_expires_at - held.updated_at)
        time.sleep(1.5)  # past the lease it was granted
        try:
            store.reserve_effect(f"long:{n}", "act_" + "9" * 32, 60)  # a contender
        except DuplicateEffect as refused:
            seen.append(refused.state)
        return "done"

    assert mode.call(job, 1) == "done"
    assert seen[0].total_seconds() > 50 and seen[1] == "in_progress"  # not lapsed: ambiguous
    rec = store.get_effect("long:1")
    assert rec.state.value == "committed" and rec.attempt == 1
    assert "extension" in [r.kind for r in store.list_receipts("long:1")]


def test_extend_lease_outside_a_body_or_with_a_bad_length_is_refused(mode, store):
    with pytest.raises(InvalidArgument, match="only available inside a protected executor"):
        ctrlrun.extend_lease(60)

    @mode.protect("job.bad", effect="bad:{n}", store=store)
    def job(n: int) -> str:
        for bad in (0, -5, float("inf"), "60"):
            with pytest.raises(InvalidArgument):
                ctrlrun.extend_lease(bad)  # type: ignore[arg-type]
        return "ok"

    assert mode.call(job, 1) == "ok"
