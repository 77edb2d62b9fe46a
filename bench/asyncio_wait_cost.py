"""What waiting for a reply through asyncio costs the waiting thread, beside a blocking read
(issue 34, item 3(b)): a socket pair whose far end a thread answers after 300 µs; the main
thread's CPU per round trip (``time.thread_time``; the answering thread's is not counted), once
with a blocking ``recv`` and once with ``loop.add_reader``, a future and an ``await``: the
least any design that waits on a database's socket from the event loop pays per step.

    python -m bench.asyncio_wait_cost [--trips N]
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import threading
import time


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trips", type=int, default=5000)
    n = ap.parse_args().trips
    near, far = socket.socketpair()

    def answer() -> None:
        while True:
            got = far.recv(64)
            if not got:
                return
            time.sleep(0.0003)
            far.send(got)

    threading.Thread(target=answer, daemon=True).start()
    clock = time.thread_time_ns
    started = clock()
    for _ in range(n):
        near.send(b"x")
        near.recv(64)
    blocking = (clock() - started) / n / 1000
    near.setblocking(False)

    async def through_the_loop() -> float:
        loop = asyncio.get_running_loop()
        fd = near.fileno()

        def trip() -> asyncio.Future[None]:
            done = loop.create_future()
            near.send(b"x")

            def readable() -> None:
                try:
                    near.recv(64)
                except BlockingIOError:
                    return
                loop.remove_reader(fd)
                done.set_result(None)

            loop.add_reader(fd, readable)
            return done

        for _ in range(min(n, 1000)):  # warm up
            await trip()
        started = clock()
        for _ in range(n):
            await trip()
        return (clock() - started) / n / 1000

    looped = asyncio.run(through_the_loop())
    near.close()
    print(
        f"blocking recv: {blocking:.1f} µs of the thread's CPU per round trip; "
        f"add_reader + future + await: {looped:.1f} µs (+{looped - blocking:.1f})"
    )


if __name__ == "__main__":
    main()
