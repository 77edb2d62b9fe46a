"""Another process holding a SQLite file's write lock for a while, for tests that need a store
write to wait or fail. (Another process: this one's ``sqlite3`` module is another copy of
SQLite, whose closing of the file would drop the core's locks on it.)"""

from __future__ import annotations

import subprocess
import sys

HOLD = """
import sqlite3, sys, time
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("BEGIN EXCLUSIVE")
print("held", flush=True)
time.sleep(float(sys.argv[2]))
conn.execute("ROLLBACK")
"""


def locked(path: str, seconds: float) -> subprocess.Popen:
    """Start holding the lock on the file at ``path`` for ``seconds``; returns once it is held
    (``wait()`` on the process: it exits 0 once it let go)."""
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, path, str(seconds)], stdout=subprocess.PIPE, text=True
    )
    assert holder.stdout is not None and holder.stdout.readline() == "held\n"
    return holder
