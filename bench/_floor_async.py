"""The floors awaited on an asyncio loop: the least an async path can cost at the same
durability, with the loop never blocked by the store (issue 14 keeps that rule for ctrlrun).

* SQLite: ``sqlite3`` blocks, so each transaction runs on one dedicated worker thread
  (``loop.run_in_executor`` on a pool of one thread). Per transaction that is one hand-off to
  the thread and one wake-up of the loop when it is done: the least any design that keeps
  SQLite's I/O off the loop pays.
* PostgreSQL: psycopg's ``AsyncConnection`` does its socket I/O on the loop itself, with no
  thread at all.

The calls are the sync floors' own (``sqlite_steps`` / ``pg_steps``), only driven by
``_floor_receipts.drive_async``: the SQL, the transactions and the commits are the same.
"""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor

import _common
import _floor_receipts


def sqlite_latency(conn, txn, steps_of, n: int, warmup: int) -> dict:
    """Time ``n`` calls ``steps_of(i)``, each transaction ``txn(conn, body)`` on the worker."""

    async def run() -> dict:
        loop = asyncio.get_running_loop()
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="floor-io") as pool:

            async def step(body):
                return await loop.run_in_executor(pool, txn, conn, body)

            async def call(i: int) -> None:
                assert await _floor_receipts.drive_async(steps_of(i), step)

            return await _common.time_calls_async(call, n, warmup)

    return asyncio.run(run())


def pg_latency(url: str, prepare: bool, steps_of, n: int, warmup: int) -> dict:
    """Time ``n`` calls ``steps_of(i)``, each statement sent on one async autocommit
    connection."""
    import psycopg

    async def run() -> dict:
        unprepared = {} if prepare else {"prepare_threshold": None}
        async with await psycopg.AsyncConnection.connect(
            url, autocommit=True, **unprepared
        ) as conn:

            async def step(st):
                cur = await conn.execute(st[0], st[1], prepare=prepare)
                return await cur.fetchone() if cur.description is not None else None

            async def call(i: int) -> None:
                assert await _floor_receipts.drive_async(steps_of(i), step)

            return await _common.time_calls_async(call, n, warmup)

    return asyncio.run(run())
