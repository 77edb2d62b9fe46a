"""``protect(..., heartbeat=True)``: while a body runs, its lease is extended well before it
lapses, so a long body is never lapsed to ``ambiguous`` while its process lives. When the
process dies the extensions stop with it and the key lapses as without a heartbeat.

A daemon thread per running body, for ``def`` and ``async def`` alike: the extensions are
store I/O, which must never run on an event loop. Each is the store's fenced compare-and-set
(key, action id, attempt, ``executing``), so one that arrives after the outcome was written
changes nothing."""

from __future__ import annotations

import logging
import threading
from datetime import timedelta
from typing import Optional

from ctrlrun.call.steps import Call
from ctrlrun.errors import CTRLRunError, InvalidArgument

log = logging.getLogger("ctrlrun")

#: The lease is extended this often, as a fraction of its length: two more tries before it
#: would lapse if one fails.
BEAT_FRACTION = 1 / 3


class Heartbeat:
    """Extends one running attempt's lease every third of its length until :meth:`stop`."""

    def __init__(self, call: Call) -> None:
        self.call = call
        self.stopped = threading.Event()
        self.thread: Optional[threading.Thread] = None

    def start(self) -> Heartbeat:
        self.thread = threading.Thread(target=self._beat, name="ctrlrun-heartbeat", daemon=True)
        self.thread.start()
        return self

    def stop(self, wait: bool = True) -> None:
        """No extension starts after this; with ``wait``, one in flight ends first."""
        self.stopped.set()
        if wait and self.thread is not None:
            self.thread.join()

    def _beat(self) -> None:
        call = self.call
        lease = timedelta(microseconds=call.lease_us)
        period = max(0.05, lease.total_seconds() * BEAT_FRACTION)
        while not self.stopped.wait(period):
            try:
                call.store.extend_lease(call.key, call.action_id, lease, attempt=call.attempt)
            except InvalidArgument as exc:  # lapsed, or the key moved on: nothing to keep
                if not self.stopped.is_set():
                    log.warning(
                        "ctrlrun: the heartbeat of %r (attempt %d) stopped: %s",
                        call.key,
                        call.attempt,
                        exc,
                    )
                return
            except CTRLRunError as exc:  # the store failed this time: try at the next beat
                if not self.stopped.is_set():
                    log.warning(
                        "ctrlrun: a heartbeat of %r (attempt %d) failed: %s",
                        call.key,
                        call.attempt,
                        exc,
                    )
