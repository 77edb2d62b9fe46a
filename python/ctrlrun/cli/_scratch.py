"""What ``ctrlrun verify`` and ``ctrlrun soak`` share: a scratch store on the user's backend
(never the user's data), and worker processes that get their config, the store URL with its
password, on stdin (never on a command line, which any local user can read)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from typing import Any, Callable, Dict, Tuple

import ctrlrun._core as _core
from ctrlrun.store.api import open_store
from ctrlrun.store.scratch import scratch_schema_url

__all__ = ["scratch_store", "Scratch", "start_worker"]


def scratch_store(user_url: str, name: str = "verify") -> Tuple[str, Callable[[], None]]:
    """A scratch store on the same backend as ``user_url`` (never the user's data) and the
    function that removes it: a ``ctrlrun_scratch_*`` schema on PostgreSQL, a file in a new
    ``ctrlrun-<name>-*`` folder next to the user's SQLite file (when its folder exists).
    Raises ``InvalidArgument`` for a URL no store accepts."""
    if _core.url_backend(user_url) == "postgres":  # validates the URL (scheme, options)
        url = scratch_schema_url(user_url)
        return url, lambda: _core.drop_scratch_schema(url)
    sqlite_file = _core.sqlite_path(user_url)
    assert sqlite_file is not None
    query = user_url.partition("?")[2] if "://" in user_url else ""
    parent = os.path.dirname(str(sqlite_file))
    folder = tempfile.mkdtemp(
        prefix=f"ctrlrun-{name}-", dir=parent if os.path.isdir(parent) else None
    )
    url = "sqlite:///" + os.path.join(folder, f"{name}.db") + (f"?{query}" if query else "")
    return url, lambda: shutil.rmtree(folder, ignore_errors=True)


class Scratch:
    """``with Scratch(user_url, progress) as url``: a fresh scratch store, created (tables
    included) before the workers start and removed afterwards, also on Ctrl-C. A failure to
    remove it never hides the error that ended the run."""

    def __init__(self, user_url: str, progress: Callable[[str], None], name: str = "verify"):
        self.user_url, self.progress, self.name = user_url, progress, name
        self.shown = ""  # the scratch store's URL as the store shows it: never a password

    def __enter__(self) -> str:
        self.url, self._cleanup = scratch_store(self.user_url, self.name)
        try:
            store = open_store(self.url)
        except BaseException:
            # What stopped it is the error to show: a server that cannot be reached fails the
            # removal too, and had nothing created to remove.
            self._remove(quiet=True, tell=False)
            raise
        self.shown = store.url
        self.progress(f"scratch store {store.url}")
        store.close()
        return self.url

    def _remove(self, quiet: bool, tell: bool = True) -> None:
        try:
            self._cleanup()
        except Exception as exc:
            if not quiet:
                raise
            if tell:
                self.progress(f"could not remove the scratch store: {exc}")

    def __exit__(self, exc_type: object, *rest: object) -> None:
        self._remove(quiet=exc_type is not None)


def start_worker(module: str, cfg: Dict[str, Any], cwd: str, **popen: Any) -> subprocess.Popen[Any]:
    """Start ``python -m module`` in ``cwd`` with ``cfg`` as one JSON line on its stdin.

    The config holds the store URL and its password: it goes on stdin, never on the command
    line (``/proc/<pid>/cmdline`` is readable by every local user). It is a few hundred bytes,
    written whole into the pipe before the worker starts. The worker sees no policy or store of
    the user's (``CTRLRUN_CONFIG``, ``CTRLRUN_STORE`` are left out of its environment)."""
    env = {k: v for k, v in os.environ.items() if k not in ("CTRLRUN_CONFIG", "CTRLRUN_STORE")}
    read_end, write_end = os.pipe()
    with os.fdopen(write_end, "w") as pipe:
        pipe.write(json.dumps(cfg) + "\n")
    try:
        return subprocess.Popen(
            [sys.executable, "-m", module], stdin=read_end, cwd=cwd, env=env, **popen
        )
    finally:
        os.close(read_end)
