"""Long bodies: ``ctrlrun.extend_lease(seconds)`` inside a protected body, and
``protect(..., heartbeat=True)``, keep a body longer than its lease from being lapsed to
``ambiguous`` by the next contender while its process lives. Both backends, sync and async
executors; a killed holder's key still lapses."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time
from datetime import timedelta

import pytest

import ctrlrun
from ctrlrun import AmbiguousEffect, DuplicateEffect, InvalidArgument


def test_a_body_that_extends_its_lease_outlives_it_and_a_contender_is_told_in_progress(mode, store):
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


def test_a_heartbeat_keeps_a_long_body_live_and_a_contender_is_told_in_progress(mode, store):
    seen: list = []

    @mode.protect("job.beat", effect="beat:{n}", store=store, lease=1, heartbeat=True)
    def job(n: int) -> str:
        time.sleep(1.6)  # past the lease it was granted: only the heartbeat keeps it
        try:
            store.reserve_effect(f"beat:{n}", "act_" + "9" * 32, 60)  # a contender
        except DuplicateEffect as refused:
            seen.append(refused.state)
        time.sleep(0.6)
        return "done"

    assert mode.call(job, 1) == "done"
    assert seen == ["in_progress"]
    assert store.get_effect("beat:1").state.value == "committed"
    kinds = [r.kind for r in store.list_receipts("beat:1")]
    assert kinds[0] == "reservation" and kinds[-1] == "outcome" and "extension" in kinds


HOLDER = textwrap.dedent("""
    import sys, time
    import ctrlrun
    store = ctrlrun.open_store(sys.argv[1])

    @ctrlrun.protect("job.dies", effect="dies:1", store=store, lease=1, heartbeat=True)
    def job():
        open(sys.argv[2], "w").close()
        time.sleep(600)

    job()
""")


def test_the_heartbeat_dies_with_its_process_and_the_key_lapses(store_url, store, tmp_path):
    marker = tmp_path / "running"
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, store_url, str(marker)])
    try:
        deadline = time.monotonic() + 60
        while not marker.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert marker.exists()
        time.sleep(1.5)  # the heartbeat has extended the lease at least once
        with pytest.raises(DuplicateEffect):  # alive: held
            store.reserve_effect("dies:1", "act_" + "8" * 32, 60)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
    deadline = time.monotonic() + 30
    while True:  # no more extensions: the lease lapses within its length
        try:
            store.reserve_effect("dies:1", "act_" + "8" * 32, 60)
        except AmbiguousEffect:
            break
        except DuplicateEffect:
            assert time.monotonic() < deadline, "the lease never lapsed"
            time.sleep(0.2)
    assert store.get_effect("dies:1").state.value == "ambiguous"


def test_heartbeat_must_be_a_bool():
    with pytest.raises(InvalidArgument, match="heartbeat must be True or False"):
        ctrlrun.protect("a.b", effect="k:{x}", heartbeat=1)  # type: ignore[arg-type]


def test_extending_a_row_this_action_has_only_reserved_is_a_wiring_error(store):
    """Not ``DuplicateEffect`` (as ctrlrun 0.12 raised): no second execution is proposed, the
    caller extends what it does not run yet (docs/api.md says why). Another action's live row
    is refused as in progress, as there. The row is left as it was."""
    aid, other = "act_" + "1" * 32, "act_" + "2" * 32
    store.reserve_effect("lease:r1", aid, 60)
    before = store.get_effect("lease:r1")
    with pytest.raises(InvalidArgument, match="requires executing") as info:
        store.extend_lease("lease:r1", aid, timedelta(seconds=600))
    assert not isinstance(info.value, DuplicateEffect)
    with pytest.raises(DuplicateEffect) as held:
        store.extend_lease("lease:r1", other, timedelta(seconds=600))
    assert held.value.state == "in_progress"
    assert store.get_effect("lease:r1") == before
    store.begin_execution("lease:r1", aid)
    assert store.extend_lease("lease:r1", aid, timedelta(seconds=600)).state.value == "executing"
