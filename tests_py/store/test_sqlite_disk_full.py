"""A SQLite file that cannot grow (a full disk, a file-size limit) during a reservation's COMMIT
is a failed write (``StoreWriteFailed``: nothing was committed, the write may be retried), not
an unresolved one: the re-read of a local file is final. The limit is real: the worker process
runs under ``RLIMIT_FSIZE`` at the store files' current size, so the WAL cannot take the
reservation's pages and SQLite's COMMIT fails with an I/O error."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import ctrlrun
from ctrlrun import EffectState

WORKER = textwrap.dedent("""
    import json, os, resource, signal, sys
    import ctrlrun
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails, not kills
    url, folder, marks = sys.argv[1], sys.argv[2], sys.argv[3]
    store = ctrlrun.open_store(url)
    store.get_effect("warm-up")  # open a connection before the limit
    biggest = max(os.path.getsize(os.path.join(folder, f)) for f in os.listdir(folder))
    resource.setrlimit(resource.RLIMIT_FSIZE, (biggest + 4096, resource.RLIM_INFINITY))

    @ctrlrun.protect("big.write", effect="big:{payload}", store=store)
    def write(payload):
        open(os.path.join(marks, "ran"), "w").close()
        return 1

    try:
        write("x" * 200_000)
        print(json.dumps({"outcome": "ran"}))
    except ctrlrun.CTRLRunError as exc:
        print(json.dumps({"outcome": type(exc).__name__, "message": str(exc)[-200:]}))
""")


def test_a_file_that_cannot_grow_at_commit_is_a_failed_write(tmp_path):
    folder = tmp_path / "store"
    folder.mkdir()
    marks = tmp_path / "marks"
    marks.mkdir()
    url = f"sqlite:///{folder}/state.db"
    with ctrlrun.open_store(url) as store:
        store.reserve_effect("before", "act_" + "8" * 32, 60)
    proc = subprocess.run(
        [sys.executable, "-c", WORKER, url, str(folder), str(marks)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["outcome"] == "StoreWriteFailed", report
    assert "did not land" in report["message"] and "may be retried" in report["message"]
    assert os.listdir(marks) == [], "the executor never ran"
    with ctrlrun.open_store(url) as store:
        assert [r.effect_key for r in store.list_effects()] == ["before"]
        # with room again, the same call runs once
        ran = []
        protected = ctrlrun.protect("big.write", effect="big:{payload}", store=store)(
            lambda payload: ran.append(1) or 1
        )
        assert protected("x" * 200_000) == 1
        assert ran == [1]
        assert store.get_effect("big:" + "x" * 200_000).state is EffectState.COMMITTED
