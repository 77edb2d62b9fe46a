"""Plain SQL on a store's database, outside ctrlrun (what a careless hand could do): the
``raw`` fixture (tests_py/conftest.py)."""

from __future__ import annotations

import subprocess
import sys

import ctrlrun

EDIT = """
import sqlite3, sys
conn = sqlite3.connect(sys.argv[1])
conn.execute(sys.argv[2])
conn.commit()
"""


class Raw:
    """Plain SQL on the store's database, outside ctrlrun (what a careless hand could do)."""

    def __init__(self, backend, store_url, request):
        self.backend = backend
        if backend == "sqlite":
            self.path = ctrlrun._core.sqlite_path(store_url)
        else:
            self.pg = request.getfixturevalue("pg")
            self.schema = request.getfixturevalue("pg_schema")

    def run(self, sql: str) -> None:
        if self.backend == "sqlite":
            # In another process: this one's sqlite3 module is another copy of SQLite, whose
            # closing of the file would drop the store's own locks on it.
            done = subprocess.run(
                [sys.executable, "-c", EDIT, str(self.path), sql],
                capture_output=True,
                text=True,
                timeout=60,
            )
            if done.returncode != 0:
                raise RuntimeError(done.stderr)
        else:
            self.pg.psql(f'SET search_path TO "{self.schema}"; {sql}')
