"""One winner under real concurrency: OS processes (and threads) racing on the same keys.

Executions are counted from the file system: each run of an executor body creates its own
file with O_CREAT|O_EXCL in a shared directory, so a second execution cannot hide.
"""

from __future__ import annotations

import os
import random
import threading
import time
import uuid
from collections import Counter

import ctrlrun
from ctrlrun import DuplicateEffect, EffectState
from tests_py.support.racing import executions, run_workers


def test_control_8_processes_on_8_different_keys_all_run(tmp_path, store_url):
    marks = tmp_path / "marks"
    marks.mkdir()
    url = store_url
    ctrlrun.open_store(url).close()  # create the schema once, up front
    keys = [f"ctl-{i}" for i in range(8)]
    reports = run_workers(
        [{"url": url, "marks": str(marks), "keys": [k], "sleep": 0.3} for k in keys], tmp_path
    )
    assert sorted(k for r in reports for k in r["ran"]) == sorted(keys)
    assert executions(marks) == Counter({k: 1 for k in keys})
    with ctrlrun.open_store(url) as s:
        assert sorted(r.effect_key for r in s.list_effects("committed")) == sorted(keys)


def test_8_processes_race_on_one_key_exactly_one_executes(tmp_path, store_url):
    marks = tmp_path / "marks"
    marks.mkdir()
    url = store_url
    ctrlrun.open_store(url).close()
    key = f"race-{uuid.uuid4().hex[:8]}"
    reports = run_workers(
        [{"url": url, "marks": str(marks), "keys": [key], "sleep": 0.3} for _ in range(8)], tmp_path
    )

    assert executions(marks) == Counter({key: 1})
    ran = [k for r in reports for k in r["ran"]]
    dups = [d for r in reports for d in r["dup"]]
    assert ran == [key]
    assert len(dups) == 7
    assert all(k == key for k, _ in dups)
    assert {state for _, state in dups} <= {"in_progress", "committed"}
    assert "in_progress" in {state for _, state in dups}  # they really overlapped

    with ctrlrun.open_store(url) as s:
        rec = s.get_effect(key)
        assert rec.state == EffectState.COMMITTED
        assert rec.attempt == 1
        assert len(s.list_effects()) == 1


def test_8_processes_over_the_same_200_keys_run_each_key_exactly_once(tmp_path, store_url):
    marks = tmp_path / "marks"
    marks.mkdir()
    url = store_url
    ctrlrun.open_store(url).close()
    keys = [f"k{i:03d}" for i in range(200)]
    configs = []
    for i in range(8):
        order = list(keys)
        random.Random(i).shuffle(order)
        if i % 2:
            order.reverse()
        configs.append({"url": url, "marks": str(marks), "keys": order, "sleep": 0})
    reports = run_workers(configs, tmp_path)

    counts = executions(marks)
    assert set(counts) == set(keys)
    assert all(n == 1 for n in counts.values()), {k: n for k, n in counts.items() if n != 1}
    assert sum(counts.values()) == 200

    ran = [k for r in reports for k in r["ran"]]
    dups = [d for r in reports for d in r["dup"]]
    assert sorted(ran) == keys
    assert len(dups) == 8 * 200 - 200
    assert {state for _, state in dups} <= {"in_progress", "committed"}
    per_key = Counter(k for k, _ in dups)
    assert all(per_key[k] == 7 for k in keys)
    # every report accounts for every key exactly once
    for r in reports:
        assert sorted(r["ran"] + [k for k, _ in r["dup"]]) == keys

    with ctrlrun.open_store(url) as s:
        recs = s.list_effects()
        assert len(recs) == 200
        assert all(r.state == EffectState.COMMITTED and r.attempt == 1 for r in recs)


def test_8_threads_race_on_one_key_exactly_one_executes(tmp_path, store, second_store):
    marks = tmp_path / "marks"
    marks.mkdir()
    key = "thread-race"
    barrier = threading.Barrier(8)
    outcomes = []
    lock = threading.Lock()

    @ctrlrun.protect("race.thread", effect="{k}", store=store)
    def effect(k):
        fd = os.open(str(marks / f"{k}.{uuid.uuid4().hex}"), os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        os.close(fd)
        time.sleep(0.3)
        return threading.get_ident()

    def worker():
        barrier.wait(timeout=30)
        try:
            res = ("ran", effect(key))
        except DuplicateEffect as e:
            res = ("dup", e.state)
        except BaseException as e:
            res = ("other", repr(e))
        with lock:
            outcomes.append(res)

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not any(t.is_alive() for t in threads)

    assert executions(marks) == Counter({key: 1})
    kinds = Counter(kind for kind, _ in outcomes)
    assert kinds == Counter({"ran": 1, "dup": 7}), outcomes
    assert {v for kind, v in outcomes if kind == "dup"} <= {"in_progress", "committed"}
    winner = next(v for kind, v in outcomes if kind == "ran")
    rec = second_store.get_effect(key)
    assert rec.state == EffectState.COMMITTED
    assert rec.result == winner
    assert rec.attempt == 1
