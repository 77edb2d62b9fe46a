"""Driving coroutines in the async tests, and warming a store's pool."""

from __future__ import annotations

import asyncio

import ctrlrun


def run(coro):
    return asyncio.run(coro)


def _warm(store, n=1):
    """Open ``n`` pooled connections (with no delay in effect), so a later delay only slows
    the statements under test, not connection start-up."""

    @ctrlrun.protect("warm", effect="warm:{i}", store=store)
    async def warm(i):
        await asyncio.sleep(0.05)  # overlap: every call holds its own connection
        return i

    async def main():
        await asyncio.gather(*(warm(i) for i in range(n)))

    run(main())
