"""An asyncio agent that fans tool calls out with ``asyncio.gather``.

Two ``async def`` tools are protected: sending an email and opening a support ticket. The agent
proposes a batch of calls at once, and the batch contains duplicates (the model repeated itself),
so several calls race for the same effect key inside one event loop. For each key exactly one
call runs; the others are refused with ``DuplicateEffect`` (``in_progress`` while the winner
runs, ``committed`` afterwards). A call cut short by ``asyncio.wait_for`` leaves its effect
``ambiguous``: the email may have gone out.

Run it with ``python examples/async_agent.py``; it writes to a temporary SQLite store.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Awaitable, Callable, List, Sequence, Tuple, Union

import ctrlrun


class FakeMailer:
    """Stands in for an email API; counts what was really sent."""

    def __init__(self) -> None:
        self.sent: Counter[str] = Counter()
        self.on_the_wire = asyncio.Event()  # set once a request has been handed to the network
        self.slow = False

    async def send(self, message_id: str, to: str, subject: str, idempotency_key: str) -> str:
        self.sent[message_id] += 1
        self.on_the_wire.set()
        await asyncio.sleep(10 if self.slow else 0.05)  # the round trip
        return f"queued:{message_id}"


class FakeTracker:
    """Stands in for a ticketing API."""

    def __init__(self) -> None:
        self.opened: Counter[str] = Counter()

    async def open_ticket(self, customer_id: int, title: str) -> int:
        await asyncio.sleep(0.02)
        self.opened[str(customer_id)] += 1
        return 4000 + len(self.opened)


SendEmail = Callable[[str, str, str], Awaitable[str]]
OpenTicket = Callable[[int, str], Awaitable[int]]


def make_tools(
    store: ctrlrun.Store, mailer: FakeMailer, tracker: FakeTracker
) -> Tuple[SendEmail, OpenTicket]:
    @ctrlrun.protect("mail.send", effect="email:{message_id}", lease=30, store=store)
    async def send_email(message_id: str, to: str, subject: str) -> str:
        return await mailer.send(message_id, to, subject, ctrlrun.idempotency_token())

    @ctrlrun.protect("support.open_ticket", effect="ticket:{customer_id}", store=store)
    async def open_ticket(customer_id: int, title: str) -> int:
        return await tracker.open_ticket(customer_id, title)

    return send_email, open_ticket


def describe(results: Sequence[Union[object, BaseException]]) -> List[str]:
    lines = []
    for r in results:
        if isinstance(r, ctrlrun.DuplicateEffect):
            lines.append(f"refused: {r.effect_key} is {r.state}")
        elif isinstance(r, BaseException):
            lines.append(f"error: {type(r).__name__}: {r}")
        else:
            lines.append(f"done: {r!r}")
    return lines


async def run_agent(store: ctrlrun.Store) -> None:
    mailer, tracker = FakeMailer(), FakeTracker()
    send_email, open_ticket = make_tools(store, mailer, tracker)

    # One batch of tool calls proposed by the model, duplicates included, run concurrently.
    batch = await asyncio.gather(
        send_email("msg_1", "ana@example.com", "Your refund"),
        send_email("msg_1", "ana@example.com", "Your refund"),
        send_email("msg_2", "bo@example.com", "Welcome"),
        open_ticket(77, "Refund follow-up"),
        open_ticket(77, "Refund follow-up"),
        return_exceptions=True,
    )
    print("first batch:")
    for line in describe(batch):
        print("  " + line)

    # The next turn repeats a call that already committed.
    again = await asyncio.gather(send_email("msg_1", "ana@example.com", "Your refund"),
                                 return_exceptions=True)
    print("second batch:")
    for line in describe(again):
        print("  " + line)

    # The agent's turn is cancelled while a request is on the wire: nobody knows whether the
    # email went out, so the effect becomes ambiguous and no retry will send it blindly.
    mailer.slow = True
    mailer.on_the_wire.clear()
    call = asyncio.ensure_future(send_email("msg_3", "cy@example.com", "Invoice"))
    await mailer.on_the_wire.wait()
    call.cancel()
    try:
        await call
    except asyncio.CancelledError:
        record = store.get_effect("email:msg_3")
        assert record is not None and record.state is ctrlrun.EffectState.AMBIGUOUS
        print(f"cancelled: email:msg_3 is {record.state.value}; a person checks the mailer")
    mailer.slow = False
    try:
        await send_email("msg_3", "cy@example.com", "Invoice")
    except ctrlrun.AmbiguousEffect as exc:
        print(f"retry refused: {exc.effect_key} is ambiguous (held by {exc.action_id})")

    assert mailer.sent["msg_1"] == 1 and mailer.sent["msg_2"] == 1, mailer.sent
    assert tracker.opened["77"] == 1, tracker.opened
    assert sum(1 for r in batch if isinstance(r, ctrlrun.DuplicateEffect)) == 2
    print(f"emails really sent: {dict(mailer.sent)}; tickets opened: {dict(tracker.opened)}")


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="async-agent-") as folder:
        with ctrlrun.open_store("sqlite:///" + str(Path(folder) / "state.db")) as store:
            asyncio.run(run_agent(store))
            for record in store.list_effects():
                print(f"  {record.effect_key:12} {record.state.value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
