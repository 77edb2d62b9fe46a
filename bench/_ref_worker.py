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
import time

import _common

POLICY = """
schema: ctrlrun.policy/v1
actions:
  bench.effect:
    decision: allow
"""


def open_control(cfg: dict):
    import ctrlrun

    policy = ctrlrun.Policy.from_yaml(POLICY, source="<bench>")
    if cfg.get("path"):
        store = ctrlrun.SQLiteStateStore(cfg["path"])
    else:
        import psycopg

        from ctrlrun.postgres import PostgresStateStore

        # It creates no schema of its own (it says so and refuses): make it first, untimed.
        with psycopg.connect(cfg["pg_url"], autocommit=True) as conn:
            conn.execute(f'CREATE SCHEMA IF NOT EXISTS "{cfg["schema"]}"')
        store = PostgresStateStore(cfg["pg_url"], schema=cfg["schema"])
    return ctrlrun.Control(policy, store), store


def main() -> None:
    cfg = _common.config()
    mode = cfg["mode"]
    import ctrlrun

    if mode == "info":
        from importlib import metadata

        _common.answer(
            {
                "version": metadata.version("ctrlrun"),
                "package": os.path.dirname(ctrlrun.__file__),
                "python": sys.version.split()[0],
            }
        )
        return

    control, store = open_control(cfg)
    if mode == "init":
        store.close()
        _common.answer({"ok": True})
        return

    prefix = cfg.get("prefix", "k")
    n = int(cfg.get("n", 0))
    warmup = int(cfg.get("warmup", 0))
    marks = cfg.get("marks")

    @ctrlrun.protect("bench.effect", effect="bench:{key}", control=control)
    def effect(key: str) -> int:
        if marks:
            _common.mark(marks, key)
        return 1

    with ctrlrun.context(agent="bench"):
        if mode == "latency" and cfg.get("async"):

            async def run() -> dict:
                return await _common.time_calls_async(
                    lambda i: asyncio.to_thread(effect, f"{prefix}{i}"), n, warmup
                )

            _common.answer(asyncio.run(run()))
        elif mode == "latency":
            _common.answer(_common.time_calls(lambda i: effect(f"{prefix}{i}"), n, warmup))
        elif mode == "dup":
            for i in range(-warmup, n):
                effect(f"{prefix}{i}")
            refused = [0]

            def again(i: int) -> None:
                try:
                    effect(f"{prefix}{i}")
                except ctrlrun.DuplicateEffect:
                    refused[0] += 1
                    return
                raise AssertionError(f"a committed key ran again: {prefix}{i}")

            result = _common.time_calls(again, n, warmup)
            result["refused"] = refused[0]
            _common.answer(result)
        elif mode == "contend":
            _common.wait_for_start()
            won = lost = 0
            errors = []
            for key in cfg["keys"]:
                try:
                    effect(key)
                    won += 1
                except ctrlrun.DuplicateEffect:
                    lost += 1
                except Exception as exc:
                    errors.append(f"{key}: {type(exc).__name__}: {exc}")
            _common.answer(
                {
                    "won": won,
                    "lost": lost,
                    "errors": errors[:5],
                    "n_errors": len(errors),
                    "end": time.time(),
                }
            )
        else:
            raise SystemExit(f"unknown mode {mode!r}")
    store.close()


if __name__ == "__main__":
    main()
