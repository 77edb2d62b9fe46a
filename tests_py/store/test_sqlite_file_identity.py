"""A SQLite file deleted or replaced under a running process (a deploy that recreates the state
folder, a cleanup job) is noticed: the old process refuses to write (``StoreError``) instead of
reserving in the unlinked file while new processes reserve in the new one. Real files, real OS
processes: no key runs twice."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap

import pytest

import ctrlrun
from ctrlrun import StoreError

# A new process: the protected call on the key, marking each execution in a file of its own.
NEW_PROCESS = textwrap.dedent("""
    import os, sys, ctrlrun
    url, marks, key = sys.argv[1], sys.argv[2], sys.argv[3]

    @ctrlrun.protect("deploy.run", effect="run:{key}", store=url)
    def run(key):
        open(os.path.join(marks, f"{key}.{os.getpid()}"), "x").close()
        return os.getpid()

    try:
        run(key)
        print("ran")
    except ctrlrun.DuplicateEffect:
        print("duplicate")
""")


def new_process(url: str, marks, key: str) -> str:
    proc = subprocess.run(
        [sys.executable, "-c", NEW_PROCESS, url, str(marks), key],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


def remove_store_files(folder) -> None:
    for name in os.listdir(folder):
        os.unlink(os.path.join(folder, name))


def replace_store_files(folder) -> None:
    """Swap in a copy (new inodes), as a restore from a backup or a deploy's copy would."""
    fresh = str(folder) + ".new"
    shutil.copytree(folder, fresh)
    shutil.rmtree(folder)
    os.rename(fresh, folder)


@pytest.mark.parametrize(
    "change", [remove_store_files, replace_store_files], ids=["deleted", "replaced"]
)
def test_a_file_deleted_or_replaced_under_a_running_process_is_refused(tmp_path, change):
    folder = tmp_path / "state"
    marks = tmp_path / "marks"
    marks.mkdir()
    url = f"sqlite:///{folder}/state.db"
    old = ctrlrun.open_store(url)  # the long-running process: this one
    runs = []

    @ctrlrun.protect("deploy.run", effect="run:{key}", store=old)
    def run(key):
        runs.append(key)
        open(os.path.join(marks, f"{key}.{os.getpid()}"), "x").close()
        return 1

    assert run("a") == 1
    change(folder)
    # a new process reserves and runs "b" in whatever file the path names now
    assert new_process(url, marks, "b") == "ran"
    # the old process must not run "b" again through its old file
    with pytest.raises(StoreError, match=r"deleted|replaced") as info:
        run("b")
    assert "Nothing was written" in str(info.value)
    with pytest.raises(StoreError):
        old.reserve_effect("c", "act_" + "9" * 32, 60)
    assert runs == ["a"]
    assert sorted(n.split(".")[0] for n in os.listdir(marks)) == ["a", "b"], "b ran once"
    # a store opened again names the file that is there now, and refuses "b" as a duplicate
    old.close()
    assert new_process(url, marks, "b") == "duplicate"
    again = ctrlrun.open_store(url)
    try:
        assert again.get_effect("run:b").state.value == "committed"
    finally:
        again.close()


# A second process that deletes the store files and puts a new store file at the path, trying
# hard to give it the old file's inode number (ext4 hands a freed number out again at once).
REPLACER = textwrap.dedent("""
    import os, sys, ctrlrun
    url, folder, old_ino = sys.argv[1], sys.argv[2], int(sys.argv[3])
    path = os.path.join(folder, "state.db")
    for name in os.listdir(folder):
        os.unlink(os.path.join(folder, name))
    reused = False
    for i in range(50):
        open(path, "x").close()
        if os.stat(path).st_ino == old_ino:
            reused = True
            break
        os.rename(path, os.path.join(folder, f"aside.{i}"))  # keep the number taken
    with ctrlrun.open_store(url) as store:  # the new store file, as a new deploy would make
        store.get_effect("run:b")
    print("reused" if reused else "fresh")
""")


def test_a_file_replaced_by_another_process_is_refused_even_under_the_old_inode_number(tmp_path):
    """The store holds the file it opened: its inode number cannot be handed to the file another
    process puts at the path, even when the store has no SQLite connection open at that moment
    (a fork closes every idle one), so the replacement is refused at every write after it."""
    folder = tmp_path / "state"
    url = f"sqlite:///{folder}/state.db"
    store = ctrlrun.open_store(url)
    runs = []

    @ctrlrun.protect("deploy.run", effect="run:{key}", store=store)
    def run(key):
        runs.append(key)
        return 1

    try:
        assert run("a") == 1
        old_ino = os.stat(folder / "state.db").st_ino
        pid = os.fork()  # the fork hook closes the store's idle connections, as a preforking
        if pid == 0:  # server does
            os._exit(0)
        assert os.waitpid(pid, 0)[1] == 0
        proc = subprocess.run(
            [sys.executable, "-c", REPLACER, url, str(folder), str(old_ino)],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.strip() == "fresh"  # the held file keeps its number to itself
        for _ in range(2):  # refused every time, not just once
            with pytest.raises(StoreError, match="replaced by another file") as info:
                run("b")
            assert "Nothing was written" in str(info.value)
        assert runs == ["a"]
    finally:
        store.close()
    fresh = ctrlrun.open_store(url)
    try:
        assert fresh.get_effect("run:b") is None and fresh.get_effect("run:a") is None
    finally:
        fresh.close()
