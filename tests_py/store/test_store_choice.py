"""The store choice fails closed (issue #11, item 4): a string that looks like a URL but is
malformed is refused, never taken as a SQLite file path (each host would reserve in a file of
its own); an empty ``CTRLRUN_STORE`` / ``CTRLRUN_STATE`` / ``--store`` is refused instead of
falling back to the working directory's file; no message shows the password; the store chosen
is logged once per process on the ``ctrlrun`` logger."""

from __future__ import annotations

import logging
import os
import subprocess
import sys

import pytest

import ctrlrun
from ctrlrun import InvalidArgument
from tests_py.support.cli import assert_one_line_error, run_cli

SECRET = "s3cr3t-pw"

MALFORMED = [
    f"postgresql:/u:{SECRET}@db/x",
    f"postgresql:u:{SECRET}@db/x",
    f"postgresql//u:{SECRET}@db/x",
    f"postgres:/u:{SECRET}@db/x",
    "sqlite:/x.db",
    "sqlite:x.db",
]


def files_under(folder) -> list:
    return sorted(
        os.path.relpath(os.path.join(d, f), folder) for d, _, fs in os.walk(folder) for f in fs
    )


@pytest.mark.parametrize("url", MALFORMED)
def test_a_malformed_url_is_refused_and_creates_nothing(url, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(InvalidArgument) as err:
        ctrlrun.open_store(url)
    assert "://" in str(err.value)
    assert SECRET not in str(err.value)
    monkeypatch.setenv("CTRLRUN_STORE", url)

    @ctrlrun.protect("t.op", effect="op:{n}")
    def op(n):
        raise AssertionError("must not run")

    with pytest.raises(InvalidArgument):
        op(1)
    assert files_under(tmp_path) == [], "nothing was created"


@pytest.mark.parametrize("name", ["CTRLRUN_STORE", "CTRLRUN_STATE"])
@pytest.mark.parametrize("value", ["", "  "])
def test_an_empty_store_variable_is_refused_not_a_fallback(name, value, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("CTRLRUN_STORE", raising=False)
    monkeypatch.setenv(name, value)
    ran = []

    @ctrlrun.protect("t.op", effect="op:{n}")
    def op(n):
        ran.append(n)

    with pytest.raises(InvalidArgument, match=f"{name} is set but empty"):
        op(1)
    assert ran == [] and files_under(tmp_path) == []
    proc = run_cli("effects", "list", env={**os.environ, name: value}, cwd=tmp_path)
    assert_one_line_error(proc, f"{name} is set but empty")


def test_an_empty_store_option_is_refused(tmp_path):
    proc = run_cli("effects", "list", "--store", "", cwd=tmp_path)
    assert_one_line_error(proc, "--store is empty")
    assert files_under(tmp_path) == []


@pytest.mark.parametrize("url", MALFORMED)
def test_the_cli_refuses_a_malformed_url_without_showing_the_password(url, tmp_path):
    proc = run_cli("effects", "list", "--store", url, cwd=tmp_path)
    line = assert_one_line_error(proc, "://")
    assert SECRET not in line
    assert files_under(tmp_path) == []


def test_the_store_chosen_is_logged_once_per_process(tmp_path):
    code = (
        "import logging, ctrlrun\n"
        "logging.basicConfig(level=logging.INFO, format='%(name)s %(levelname)s %(message)s')\n"
        "@ctrlrun.protect('t.op', effect='op:{n}')\n"
        "def op(n): return n\n"
        "for i in range(3): op(i)\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("CTRLRUN_")}
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if "using the store" in ln]
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("ctrlrun INFO")
    assert f"sqlite:///{tmp_path}/.ctrlrun/state.db" in lines[0], lines[0]


def test_the_logged_postgres_store_shows_no_password(pg, caplog):
    from ctrlrun.store import api as _store

    schema = pg.new_schema()
    url = pg.url(schema)
    try:
        with caplog.at_level(logging.INFO, logger="ctrlrun"):
            _store.store_for_url(url)
        shown = [r.getMessage() for r in caplog.records if "using the store" in r.getMessage()]
        assert len(shown) == 1 and str(pg.port) in shown[0], shown
        if pg.password:
            assert pg.password not in shown[0]
    finally:
        _store.store_for_url(url).close()
        pg.drop_schema(schema)


def test_a_store_and_its_url_name_their_backend(backend, store_url, store):
    """``Store.backend`` and ``_core.url_backend`` say which database, from the core (no
    guessing from the URL's text in Python); a malformed URL is refused, not guessed at."""
    from ctrlrun import _core

    assert store.backend == backend
    assert _core.url_backend(store_url) == backend
    store.close()
    assert store.backend == backend  # still known once closed
    with pytest.raises(InvalidArgument):
        _core.url_backend("mysql://nowhere/db")
