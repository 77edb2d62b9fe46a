"""What a SQLite store creates is its owner's only: a new database file and its ``-wal`` and
``-shm`` files 0600, a new folder 0700, whatever the umask lets through otherwise; the URL's
``file_mode`` sets another mode; what exists already keeps its mode. Real files, ``os.stat``:
whoever can write the file can grant, resolve and add console accounts."""

from __future__ import annotations

import os
import stat
from contextlib import contextmanager
from typing import Dict, Iterator

import pytest

import ctrlrun
from tests_py.support.stores import sqlite_url

LEASE = 60


@contextmanager
def umask(mask: int) -> Iterator[None]:
    old = os.umask(mask)
    try:
        yield
    finally:
        os.umask(old)


def mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def modes_after_a_write(url: str, key: str = "k") -> Dict[str, int]:
    """Open the store and commit a write (SQLite then has its -wal and -shm files open): the
    modes of the database file (``""``) and of those two."""
    path = url[len("sqlite:///") :].split("?")[0]
    store = ctrlrun.open_store(url)
    try:
        store.reserve_effect(key, "act_1", lease=LEASE)
        return {suffix: mode(path + suffix) for suffix in ("", "-wal", "-shm")}
    finally:
        store.close()


def test_a_new_file_its_wal_and_shm_and_a_new_folder_are_the_owners_only(tmp_path):
    folder = tmp_path / "state" / "inner"
    path = folder / "state.db"
    with umask(0o022):  # a common umask: left alone, SQLite would make the file 0644
        modes = modes_after_a_write(sqlite_url(path))
    assert modes == {"": 0o600, "-wal": 0o600, "-shm": 0o600}
    assert mode(folder) == 0o700
    assert mode(tmp_path / "state") == 0o700  # every folder created on the way


def test_file_mode_sets_the_mode_of_the_file_its_wal_and_shm_and_the_folder(tmp_path):
    folder = tmp_path / "shared"
    path = folder / "state.db"
    with umask(0o022):
        modes = modes_after_a_write(sqlite_url(path) + "?file_mode=0640")
    assert modes == {"": 0o640, "-wal": 0o640, "-shm": 0o640}
    assert mode(folder) == 0o750  # a search bit wherever the mode has a read bit


def test_the_umask_makes_the_modes_stricter_never_looser(tmp_path):
    folder = tmp_path / "strict"
    path = folder / "state.db"
    with umask(0o077):
        modes = modes_after_a_write(sqlite_url(path) + "?file_mode=0664")
    assert modes == {"": 0o600, "-wal": 0o600, "-shm": 0o600}
    assert mode(folder) == 0o700


def test_an_existing_folder_and_file_keep_their_modes(tmp_path):
    folder = tmp_path / "chosen"
    folder.mkdir()
    os.chmod(folder, 0o775)
    with umask(0o022):
        assert modes_after_a_write(sqlite_url(folder / "state.db"))[""] == 0o600
    assert mode(folder) == 0o775
    os.chmod(folder / "state.db", 0o660)  # the owner's choice, after ctrlrun made the file
    with umask(0o022):
        modes = modes_after_a_write(sqlite_url(folder / "state.db"), key="again")
    assert modes == {"": 0o660, "-wal": 0o660, "-shm": 0o660}  # the -wal and -shm follow it
    assert mode(folder) == 0o775


@pytest.mark.parametrize(
    "value, needle",
    [
        ("rw", "file_mode must be an octal mode such as 0600 or 0640"),
        ("", "file_mode must be an octal mode"),
        ("0x180", "file_mode must be an octal mode"),
        ("0o600", "file_mode must be an octal mode"),
        ("0680", "file_mode must be an octal mode"),
        ("-600", "file_mode must be an octal mode"),
        ("1600", "file_mode must be from 0600 to 0777"),  # the sticky bit
        ("4755", "file_mode must be from 0600 to 0777"),  # setuid
        ("777777777777777", "file_mode must be from 0600 to 0777"),
        ("0400", "file_mode must be from 0600 to 0777"),  # the owner could not write
        ("0244", "file_mode must be from 0600 to 0777"),  # the owner could not read
        ("0066", "file_mode must be from 0600 to 0777"),
    ],
)
def test_a_bad_file_mode_is_refused_naming_the_option_and_nothing_is_created(
    tmp_path, value, needle
):
    folder = tmp_path / "never"
    url = sqlite_url(folder / "state.db") + f"?file_mode={value}"
    with pytest.raises(ctrlrun.InvalidArgument) as caught:
        ctrlrun.open_store(url)
    assert needle in str(caught.value) and f'got "{value}"' in str(caught.value)
    assert not folder.exists()
