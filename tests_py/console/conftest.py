"""Fixtures of the console tests: one headless browser per module, a console per test over the
test's store (SQLite and PostgreSQL through ``store_url``)."""

from __future__ import annotations

from typing import Iterator

import pytest

import ctrlrun
from tests_py.console.rig import Console, chrome


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    driver = chrome()
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture
def console_store(store_url) -> Iterator[ctrlrun.Store]:
    store = ctrlrun.open_store(store_url)
    yield store
    store.close()


@pytest.fixture
def console(console_store) -> Iterator[Console]:
    c = Console(console_store)
    c.add("alice")
    c.add("bob")
    yield c
    c.stop()
