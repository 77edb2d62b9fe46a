"""Fixtures of the PostgreSQL tests beside the root conftest's ``pg``."""

import pytest


@pytest.fixture
def schemas(pg):
    """``schemas()`` makes a fresh schema on the throwaway cluster; all are dropped after."""
    made = []

    def make() -> str:
        made.append(pg.new_schema())
        return made[-1]

    yield make
    for s in made:
        pg.drop_schema(s)
