"""``protect(..., wait=seconds)``: a call that meets another attempt's live lease waits for it
to settle instead of being refused at once. The holder runs in a thread; every case on SQLite
and PostgreSQL, with a sync and an async executor."""

from __future__ import annotations

import threading
from typing import Any, Callable, List

import pytest

import ctrlrun
from ctrlrun import DuplicateEffect, InvalidArgument, NotExecuted


class Holder:
    """The first call, in its own thread, held inside its body until :meth:`settle`."""

    def __init__(self, mode: Any, fn: Callable[..., Any], *args: Any) -> None:
        self.entered, self.release = threading.Event(), threading.Event()
        self.outcome: List[Any] = []

        def run() -> None:
            try:
                self.outcome.append(mode.call(fn, *args))
            except BaseException as exc:
                self.outcome.append(exc)

        self.thread = threading.Thread(target=run)

    def start(self) -> Holder:
        self.thread.start()
        assert self.entered.wait(30)
        return self

    def settle_after(self, seconds: float) -> None:
        threading.Timer(seconds, self.release.set).start()

    def join(self) -> None:
        self.release.set()
        self.thread.join(30)


def protected(
    mode: Any,
    store: Any,
    runs: list,
    holders: List[Holder],
    fail_first: bool = False,
    **options: Any,
) -> Callable[..., Any]:
    @mode.protect("job.run", effect="job:{n}", store=store, **options)
    def job(n: int) -> str:
        runs.append(n)
        if len(runs) == 1:  # the holder's body
            holders[0].entered.set()
            holders[0].release.wait(30)
            if fail_first:
                raise NotExecuted("the holder gave up before doing anything")
        return f"done {len(runs)}"

    return job


@pytest.mark.parametrize("replay", [False, True])
def test_a_waiting_call_meets_the_holders_commit(mode, store, replay):
    runs: list = []
    holders: List[Holder] = []
    job = protected(mode, store, runs, holders, wait=20, replay=replay)
    holders.append(Holder(mode, job, 1))
    holder = holders[0].start()
    holder.settle_after(0.3)
    try:
        if replay:
            assert mode.call(job, 1) == "done 1"  # the holder's stored result
        else:
            with pytest.raises(DuplicateEffect) as info:
                mode.call(job, 1)
            assert info.value.state == "committed"  # not in_progress: it waited
    finally:
        holder.join()
    assert holder.outcome == ["done 1"] and runs == [1]


def test_a_waiting_call_runs_as_the_next_attempt_when_the_holder_failed(mode, store):
    runs: list = []
    holders: List[Holder] = []
    job = protected(mode, store, runs, holders, fail_first=True, wait=20)
    holders.append(Holder(mode, job, 2))
    holder = holders[0].start()
    holder.settle_after(0.3)
    try:
        assert mode.call(job, 2) == "done 2"
    finally:
        holder.join()
    assert isinstance(holder.outcome[0], NotExecuted) and runs == [2, 2]
    assert store.get_effect("job:2").attempt == 2


def test_a_holder_still_running_when_the_wait_is_up_is_refused_in_progress(mode, store):
    runs: list = []
    holders: List[Holder] = []
    job = protected(mode, store, runs, holders, wait=0.5)
    holders.append(Holder(mode, job, 3))
    holder = holders[0].start()
    try:
        with pytest.raises(DuplicateEffect) as info:
            mode.call(job, 3)
        assert info.value.state == "in_progress"
    finally:
        holder.join()
    assert runs == [3]  # the waiting call never ran the body


@pytest.mark.parametrize("wait", [-1, 86401, float("nan"), True, "5"])
def test_a_wait_that_is_not_seconds_is_refused_at_decoration(wait):
    with pytest.raises(InvalidArgument, match="wait must be seconds from 0 to 86400"):
        ctrlrun.protect("a.b", effect="k:{x}", wait=wait)
