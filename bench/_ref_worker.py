"""Benchmark worker for the original product, ctrlrun 0.12.2 from PyPI.

Runs under bench/.ref-venv/bin/python (both products import as ``ctrlrun``). The same modes and
workloads as _ctrlrun_worker.py. Facts taken from the 0.12.2 sources (nothing copied):

* a protected call needs a ``Control`` (a policy, a state store) and a principal; the policy
  here allows the one action, the principal comes from ``ctrlrun.context(agent=...)``, and no
  event sink is installed (the least work the product does per call);
* ``SQLiteStateStore(path)`` opens the file in WAL with ``synchronous=NORMAL`` (hard-coded);
* ``ctrlrun.postgres.PostgresStateStore(url, schema=...)`` (psycopg 3) keeps the server's
  ``synchronous_commit``;
* ``protect`` refuses ``async def``; its docs say to call the protected function from async
  code with ``asyncio.to_thread``, which is what the async row does.
"""

from __future__ import annotations

import asyncio
import os
import sys

import _common

POLICY = "schema: ctrlrun.policy/v1\nactions:\n  bench.effect:\n    decision: allow\n"


def open_store(cfg: dict):
    import ctrlrun

    if cfg.get("path"):
        return ctrlrun.SQLiteStateStore(cfg["path"])
    import psycopg

    from ctrlrun.postgres import PostgresStateStore

    # It creates no schema of its own (it says so and refuses): make it first, untimed.
    with psycopg.connect(cfg["pg_url"], autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA IF NOT EXISTS "{cfg["schema"]}"')
    return PostgresStateStore(cfg["pg_url"], schema=cfg["schema"])


def main() -> None:
    cfg = _common.config()
    mode = cfg["mode"]
    import ctrlrun

    if mode == "info":
        from importlib import metadata

        version, package = metadata.version("ctrlrun"), os.path.dirname(ctrlrun.__file__)
        return _common.answer(
            {"version": version, "package": package, "python": sys.version.split()[0]}
        )
    store = open_store(cfg)
    control = ctrlrun.Control(ctrlrun.Policy.from_yaml(POLICY, source="<bench>"), store)
    marks = cfg.get("marks")

    @ctrlrun.protect("bench.effect", effect="bench:{key}", control=control)
    def effect(key: str) -> int:
        if marks:
            _common.mark(marks, key)
        return 1

    with ctrlrun.context(agent="bench"):
        to_thread = lambda key: asyncio.to_thread(effect, key)  # noqa: E731
        result = _common.run_mode(cfg, effect, to_thread, ctrlrun.DuplicateEffect)
    store.close()
    _common.answer(result)


if __name__ == "__main__":
    main()
