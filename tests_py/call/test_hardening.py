"""Regressions from attacking the library: each input here once crashed, panicked, stranded a
row or leaked a secret."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from datetime import datetime, timedelta, timezone

import pytest

import ctrlrun
from ctrlrun import EffectState, InvalidArgument, NotExecuted, StoreError
from ctrlrun.testing import MovableClock


def test_instants_before_1970_are_refused_or_reported_never_a_panic(store_url):
    clock = MovableClock(datetime(1965, 1, 1, tzinfo=timezone.utc))
    s = ctrlrun.open_store(store_url, clock=clock)
    s.reserve_effect("old", "act_" + "1" * 32, 60)
    clock.advance(120)
    with pytest.raises(ctrlrun.AmbiguousEffect) as info:  # the lapse message formats the time
        s.reserve_effect("old", "act_" + "2" * 32, 60)
    assert "lapsed" in str(info.value)
    # the store is still usable by another handle (no transaction left open)
    with ctrlrun.open_store(store_url) as other:
        assert other.get_effect("old").state is EffectState.AMBIGUOUS
        r = other.reserve_effect("new", "act_" + "3" * 32, 60)
        other.begin_execution("new", r.action_id)
        with pytest.raises(InvalidArgument):
            other.extend_lease("new", r.action_id, datetime(1969, 12, 31, tzinfo=timezone.utc))


@pytest.mark.parametrize("lease", [1e12, 1e300, timedelta.max, timedelta(days=366 * 11)])
def test_absurd_leases_are_refused_at_decoration(lease):
    with pytest.raises(InvalidArgument, match="ten years"):
        ctrlrun.protect("x", effect="k:{a}", lease=lease)


def test_absurd_lease_through_the_store_api_writes_nothing(store):
    with pytest.raises(InvalidArgument):
        store.reserve_effect("k", "act_" + "4" * 32, timedelta(days=366 * 11))
    assert store.list_effects() == []


class BadStr(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no text for you")


@pytest.mark.parametrize(
    "make,state",
    [
        (lambda: NotExecuted("bad \udcff surrogate"), EffectState.FAILED),
        (lambda: NotExecuted("nul \x00 inside"), EffectState.FAILED),
        (lambda: ValueError("nul \x00 inside"), EffectState.AMBIGUOUS),
        (lambda: BadStr(), EffectState.AMBIGUOUS),
    ],
)
def test_unprintable_exceptions_still_record_the_outcome(store, make, state):
    exc = make()

    @ctrlrun.protect("t", effect="e:{k}", store=store)
    def act(k: str) -> None:
        raise exc

    with pytest.raises(type(exc)) as info:
        act("1")
    assert info.value is exc  # the caller gets the executor's own exception
    rec = store.get_effect("e:1")
    assert rec.state is state
    assert type(exc).__name__ in rec.error


def test_a_clock_that_breaks_after_the_executor_ran_says_it_ran(store_url):
    calls = {"n": 0}

    def clock() -> datetime:
        calls["n"] += 1
        if calls["n"] >= 2:  # the reservation works; the outcome write does not
            raise OSError("clock source gone")
        return datetime.now(timezone.utc)

    s = ctrlrun.open_store(store_url, clock=clock)
    ran = []

    @ctrlrun.protect("t", effect="c:{k}", store=s)
    def act(k: str) -> str:
        ran.append(k)
        return "done"

    with pytest.raises(StoreError, match="already run") as info:
        act("1")
    assert isinstance(info.value.__cause__, OSError)
    assert ran == ["1"]
    with ctrlrun.open_store(store_url) as direct:
        assert direct.get_effect("c:1").state is EffectState.EXECUTING  # lapses to ambiguous


def test_keyboard_interrupt_right_after_the_reservation_fails_it(store_url):
    """A KeyboardInterrupt delivered on the first line after the reservation returned (raised
    there by a line tracer, as the interpreter would deliver a signal): nothing ran, so the
    row is failed and a retry runs."""
    import inspect

    from ctrlrun.call.steps import Call

    code = Call.reserve.__code__
    lines, first = inspect.getsourcelines(Call.reserve)
    reserve_line = first + next(i for i, ln in enumerate(lines) if "core.reserve(" in ln)
    fired = []

    def local(frame, event, arg):
        if event == "line" and frame.f_lineno > reserve_line and not fired:
            fired.append(frame.f_lineno)
            raise KeyboardInterrupt
        return local

    def tracer(frame, event, arg):
        return local if frame.f_code is code else None

    s = ctrlrun.open_store(store_url)
    ran = []

    @ctrlrun.protect("t", effect="ki:{k}", store=s)
    def act(k: str) -> None:
        ran.append(k)

    sys.settrace(tracer)
    try:
        with pytest.raises(KeyboardInterrupt):
            act("1")
    finally:
        sys.settrace(None)
    assert fired and ran == []
    with ctrlrun.open_store(store_url) as direct:
        rec = direct.get_effect("ki:1")
        assert rec.state is EffectState.FAILED  # nothing ran: a retry may run
        assert "never started" in rec.error
    act("1")
    assert ran == ["1"]


def test_a_surrogate_in_a_key_is_an_effect_key_error(store):
    @ctrlrun.protect("t", effect="s:{k}", store=store)
    def act(k: str) -> None:
        raise AssertionError("must not run")

    with pytest.raises(ctrlrun.EffectKeyError, match="surrogate"):
        act("\ud800")
    assert store.list_effects() == []


FORKED = textwrap.dedent(
    """
    import os, sys, ctrlrun
    s = ctrlrun.open_store(sys.argv[1])
    s.get_effect("warm")            # the parent has live connections
    pid = os.fork()
    if pid == 0:
        try:
            s.get_effect("x")
            os._exit(3)
        except ctrlrun.InvalidArgument as e:
            os._exit(0 if "another process" in str(e) else 4)
        except BaseException:
            os._exit(5)
    _, status = os.waitpid(pid, 0)
    s.reserve_effect("after-fork", "act_" + "5" * 32, 60)   # the parent's connections still work
    print("child", os.waitstatus_to_exitcode(status))
    """
)


def test_a_store_used_after_fork_refuses_clearly_and_the_parent_keeps_working(store_url):
    out = subprocess.run(
        [sys.executable, "-c", FORKED, store_url], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "child 0"


def test_dead_pooled_connections_do_not_cost_a_write(pg, pg_schema):
    """After a server restart or an idle reaper every pooled connection is dead; the writes
    skip them (nothing was sent that could commit) instead of failing."""
    import threading

    s = ctrlrun.open_store(pg.url(pg_schema))
    gate = threading.Barrier(6)

    @ctrlrun.protect("t", effect="dead:{k}", store=s)
    def act(k: str) -> str:
        if k.startswith("warm"):
            gate.wait(timeout=30)  # six calls at once: six pooled connections
        return k

    threads = [threading.Thread(target=act, args=(f"warm{i}",)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    killed = pg.psql(
        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
        "WHERE application_name = 'ctrlrun'"
    )
    assert int(killed) >= 2  # the pool's connections, all dead now
    assert act("after") == "after"
    assert s.get_effect("dead:after").state is EffectState.COMMITTED
    # Reads skip dead pooled connections too.
    pg.psql(
        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
        "WHERE application_name = 'ctrlrun'"
    )
    assert s.get_effect("dead:warm0").state is EffectState.COMMITTED
    pg.psql(
        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
        "WHERE application_name = 'ctrlrun'"
    )
    assert len(s.list_effects(EffectState.COMMITTED)) == 7
    s.close()


FORKED_ASYNC = textwrap.dedent(
    """
    import asyncio, os, sys, ctrlrun

    @ctrlrun.protect("t", effect="fa:{k}", store=sys.argv[1])
    async def act(k):
        return k

    asyncio.run(act("parent"))                  # the parent has worker threads and a store
    pid = os.fork()
    if pid == 0:
        try:
            ok = asyncio.run(asyncio.wait_for(act("child"), 30)) == "child"
            os._exit(0 if ok else 3)
        except BaseException as e:
            print("child failed:", repr(e), flush=True)
            os._exit(4)
    _, status = os.waitpid(pid, 0)
    print("child", os.waitstatus_to_exitcode(status))
    """
)


def test_a_forked_child_can_call_async_tools_on_a_store_given_by_url(store_url):
    out = subprocess.run(
        [sys.executable, "-c", FORKED_ASYNC, store_url], capture_output=True, text=True, timeout=90
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().endswith("child 0"), out.stdout + out.stderr
    with ctrlrun.open_store(store_url) as s:
        assert s.get_effect("fa:child").state is EffectState.COMMITTED


FORK_STORM = textwrap.dedent(
    """
    import os, sys, threading, time, ctrlrun

    url = sys.argv[1]
    s = ctrlrun.open_store(url)
    stop = threading.Event()

    def busy(i):
        n = 0
        while not stop.is_set():
            s.get_effect(f"storm:busy:{i}:{n % 3}")
            n += 1
            time.sleep(0.0005)

    # more threads than the pool lends connections: some are always waiting on it
    busy_threads = [threading.Thread(target=busy, args=(i,)) for i in range(24)]
    for t in busy_threads:
        t.start()
    failures = []
    for k in range(10):
        pid = os.fork()
        if pid == 0:
            try:
                child = ctrlrun.open_store(url)
                errors = []

                def write(j):
                    try:
                        child.reserve_effect(f"storm:{k}:{j}", "act_" + f"{j:032x}", 60)
                    except BaseException as e:
                        errors.append(repr(e))

                ts = [threading.Thread(target=write, args=(j,)) for j in range(12)]
                for t in ts:
                    t.start()
                for t in ts:
                    t.join()
                os._exit(4 if errors else 0)
            except BaseException:
                os._exit(3)
        _, status = os.waitpid(pid, 0)
        if status:
            failures.append((k, os.waitstatus_to_exitcode(status)))
    stop.set()
    for t in busy_threads:
        t.join()
    print("failures", failures)
    """
)


def test_forked_children_open_their_own_store_while_the_parent_is_busy(store_url):
    """Forking while the parent's threads hold and wait for pooled connections: every child
    opens its own store and writes from 12 threads. (A pool that parks waiters in a
    process-global table crashed children this way.)"""
    out = subprocess.run(
        [sys.executable, "-c", FORK_STORM, store_url], capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "failures []", out.stdout + out.stderr
    with ctrlrun.open_store(store_url) as s:
        assert len(s.list_effects(EffectState.RESERVED)) == 10 * 12
