"""Group commit on SQLite (issue 51): writes one process makes while its write is in flight go
together in the next transaction, one fsync at ``synchronous=full``, and every rule still holds
per row. The write in flight is held by a real second connection that owns the file's write
lock; the calls made meanwhile queue behind it."""

from __future__ import annotations

import sqlite3
import threading
import time
from collections import Counter

import pytest

import ctrlrun
from ctrlrun import ActionDenied, DuplicateEffect, EffectState, InvalidArgument
from ctrlrun.store.policy import ActionRule


@pytest.fixture
def path(tmp_path):
    return tmp_path / "state.db"


def protected(store, runs):
    def make(action):
        @ctrlrun.protect(action, effect="k:{key}", store=store)
        def call(key: str) -> str:
            runs[key] += 1
            return key

        return call

    return make("acme.ok"), make("acme.deny")


def behind_the_file_lock(path, store, calls):
    """Hold the file's write lock from a second connection; make the first call (its write
    waits for the lock: in flight) and then ``calls`` (each queues behind it); release; each
    call's result or exception."""
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    out: dict = {}

    def run(i, call, key):
        try:
            out[i] = call(key)
        except Exception as e:
            out[i] = e

    first_call, first_key = calls[0]
    threads = [threading.Thread(target=run, args=(0, first_call, first_key))]
    threads[0].start()
    time.sleep(0.3)  # the first call's transaction waits for the lock
    for i, (call, key) in enumerate(calls[1:], start=1):
        threads.append(threading.Thread(target=run, args=(i, call, key)))
        threads[-1].start()
    time.sleep(0.5)  # each has queued behind it
    holder.execute("COMMIT")
    holder.close()
    for t in threads:
        t.join(timeout=60)
    return [out[i] for i in range(len(calls))]


def test_a_refused_or_conflicting_row_fails_no_neighbour_in_its_batch(path):
    # the calls queued behind the held write wait for it, however long it is held
    store = ctrlrun.open_store(f"sqlite:///{path}?group_commit_wait=30")
    try:
        store.apply_policy([ActionRule("acme.deny", "deny")])
        runs: Counter = Counter()
        ok, denied = protected(store, runs)
        calls = [(ok, "first"), (ok, "a"), (denied, "b"), (ok, "same"), (ok, "same"), (ok, "c")]
        out = behind_the_file_lock(path, store, calls)
        assert out[0] == "first" and out[1] == "a" and out[5] == "c"
        assert isinstance(out[2], ActionDenied)
        assert sorted(str(o) if isinstance(o, str) else type(o).__name__ for o in out[3:5]) == [
            "DuplicateEffect",
            "same",
        ]
        assert runs == Counter({"first": 1, "a": 1, "same": 1, "c": 1})
        assert store.get_effect("k:b") is None
        for key in ("first", "a", "same", "c"):
            assert store.get_effect(f"k:{key}").state is EffectState.COMMITTED
            kinds = [r.kind for r in store.list_receipts(f"k:{key}")]
            assert kinds == ["reservation", "outcome"]
        assert store.verify_receipts().ok
    finally:
        store.close()


@pytest.mark.parametrize("group_commit", ["on", "off"])
@pytest.mark.parametrize("synchronous", ["full", "normal"])
def test_threads_on_shared_keys_run_each_once(path, group_commit, synchronous):
    store = ctrlrun.open_store(
        f"sqlite:///{path}?synchronous={synchronous}&group_commit={group_commit}"
    )
    try:
        runs: Counter = Counter()
        lock = threading.Lock()

        @ctrlrun.protect("acme.ok", effect="k:{key}", store=store)
        def call(key: str) -> str:
            with lock:
                runs[key] += 1
            return key

        def worker(w: int) -> None:
            for i in range(60):
                for key in (f"{w}-{i}", f"shared-{i}"):
                    try:
                        call(key)
                    except DuplicateEffect:
                        pass

        threads = [threading.Thread(target=worker, args=(w,)) for w in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
        assert len(runs) == 8 * 60 + 60 and max(runs.values()) == 1
        assert store.verify_receipts().ok
        assert len(store.list_receipts()) == 2 * len(runs)
    finally:
        store.close()


def test_group_commit_takes_on_or_off_and_a_wait_in_seconds(path):
    with pytest.raises(InvalidArgument, match="group_commit must be on or off"):
        ctrlrun.open_store(f"sqlite:///{path}?group_commit=yes")
    with pytest.raises(InvalidArgument, match="group_commit_wait must be a number of seconds"):
        ctrlrun.open_store(f"sqlite:///{path}?group_commit_wait=-1")
