"""pytest fixtures for code that uses ctrlrun (registered through the ``pytest11`` entry point).

* ``ctrlrun_clock``: a :class:`~ctrlrun.testing.MovableClock`; ``ctrlrun_clock.advance(301)``
  lapses a 5-minute lease without sleeping.
* ``ctrlrun_store``: a fresh SQLite store in the test's temp dir, driven by ``ctrlrun_clock``,
  made the default store of ``protect`` for the test and restored afterwards. Your production
  store is never touched.
* ``ctrlrun_postgres_store``: the same on PostgreSQL, in a schema of its own (dropped
  afterwards), when ``CTRLRUN_TEST_POSTGRES_URL`` names a server; otherwise the test is skipped
  with that reason.
* ``ctrlrun_assert``: the :mod:`ctrlrun.testing` assertions bound to the test's store:
  ``ctrlrun_postgres_store`` when the test asks for it, else ``ctrlrun_store``
  (``ctrlrun_assert.committed_once(key)``, ``.state(key, "failed")``, ``.no_effect(key)``).

In every test, a protected call with no store of its own and no ``CTRLRUN_STORE`` /
``CTRLRUN_STATE`` goes to a temporary SQLite store of that test (created on first use, in a
temp folder), never to ``.ctrlrun/state.db`` in the working directory: a test that forgets the
fixture cannot write into your real store. The same holds for fixtures of every scope: while a
session-, package-, module- or class-scoped fixture is set up or torn down, such a call goes to
a temporary store kept for the session, package, module or class running then.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Iterator, List, Literal

import pytest

import ctrlrun._core as _core
from ctrlrun.store.api import Store, open_store, set_default_store, use_when_default_is_unset
from ctrlrun.store.records import EffectRecord, EffectState
from ctrlrun.store.scratch import scratch_schema_url
from ctrlrun.testing import (
    MovableClock,
    assert_committed_once,
    assert_effect_state,
    assert_no_effect,
)

POSTGRES_ENV = "CTRLRUN_TEST_POSTGRES_URL"


class EffectAssertions:
    """Assertions on one store (the ``ctrlrun_assert`` fixture)."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def committed_once(self, key: str) -> EffectRecord:
        return assert_committed_once(self.store, key)

    def state(self, key: str, state: EffectState | str) -> EffectRecord:
        return assert_effect_state(self.store, key, state)

    def no_effect(self, key: str) -> None:
        assert_no_effect(self.store, key)


def _as_default(store: Store) -> Iterator[Store]:
    previous = set_default_store(store)
    try:
        yield store
    finally:
        set_default_store(previous)
        store.close()


@pytest.fixture
def ctrlrun_clock() -> MovableClock:
    """A movable clock (starts at the real now); ``advance(seconds)`` moves it."""
    return MovableClock()


@pytest.fixture
def ctrlrun_store(tmp_path: Path, ctrlrun_clock: MovableClock) -> Iterator[Store]:
    """A fresh SQLite store in tmp_path, on ``ctrlrun_clock``, the default store for the test."""
    store = open_store("sqlite:///" + str(tmp_path / "ctrlrun-state.db"), clock=ctrlrun_clock)
    yield from _as_default(store)


@pytest.fixture
def ctrlrun_postgres_store(ctrlrun_clock: MovableClock) -> Iterator[Store]:
    """A PostgreSQL store in a throwaway schema of CTRLRUN_TEST_POSTGRES_URL's server, on
    ``ctrlrun_clock``, the default store for the test; the schema is dropped afterwards."""
    base = os.environ.get(POSTGRES_ENV)
    if not base:
        pytest.skip(f"{POSTGRES_ENV} is not set")
    url = scratch_schema_url(base)
    store = open_store(url, clock=ctrlrun_clock)
    try:
        yield from _as_default(store)
    finally:
        _core.drop_scratch_schema(url)


@pytest.fixture
def ctrlrun_assert(request: pytest.FixtureRequest) -> EffectAssertions:
    """Assertions on the test's store (``ctrlrun_postgres_store`` when the test uses it, else
    ``ctrlrun_store``): ``committed_once(key)``, ``state(key, s)``, ``no_effect(key)``."""
    name = (
        "ctrlrun_postgres_store"
        if "ctrlrun_postgres_store" in request.fixturenames
        else "ctrlrun_store"
    )
    return EffectAssertions(request.getfixturevalue(name))


def _temporary_default(tmp_path_factory: pytest.TempPathFactory, scope: str) -> Iterator[None]:
    """While it runs, an unset default store is a temporary one of this ``scope`` (made on
    first use); the one it covered is put back afterwards."""
    opened: List[Store] = []

    def temporary() -> Store:
        if not opened:
            folder = tmp_path_factory.mktemp(f"ctrlrun-default-{scope}")
            opened.append(open_store("sqlite:///" + str(folder / "state.db")))
        return opened[0]

    previous = use_when_default_is_unset(temporary)
    try:
        yield
    finally:
        use_when_default_is_unset(previous)
        for store in opened:
            store.close()


# One autouse fixture per scope: pytest sets up autouse fixtures first within their scope, so a
# user's fixture of any scope already finds its temporary default when it is set up.
def _no_real_default_store(scope: Literal["session", "package", "module", "class"]) -> Any:
    def fixture(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
        yield from _temporary_default(tmp_path_factory, scope)

    fixture.__name__ = f"_ctrlrun_no_real_default_store_{scope}"
    fixture.__doc__ = f"An unset default store is a temporary one per {scope} (made on first use)."
    return pytest.fixture(scope=scope, autouse=True)(fixture)


_ctrlrun_no_real_default_store_session = _no_real_default_store("session")
_ctrlrun_no_real_default_store_package = _no_real_default_store("package")
_ctrlrun_no_real_default_store_module = _no_real_default_store("module")
_ctrlrun_no_real_default_store_class = _no_real_default_store("class")


@pytest.fixture(autouse=True)
def _ctrlrun_no_real_default_store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """An unset default store is a temporary one for each test (made on first use)."""
    yield from _temporary_default(tmp_path_factory, "test")
