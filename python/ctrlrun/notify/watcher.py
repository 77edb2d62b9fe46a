"""The time-based notifications, which no call makes: a request that expired without a
decision (``approval.expired``), one pending longer than its action's ``escalate_after``
(``approval.escalated``), and an effect that reads ``ambiguous`` because its lease lapsed with
its holder gone (``effect.ambiguous``). The console runs one::

    from ctrlrun.notify.watcher import start_watcher
    watcher = start_watcher(store, console_url="https://ctrlrun.example.com:8780")
    ...
    watcher.stop()

Every ``interval`` seconds a daemon thread reads the policy in force (``current_policy()``),
the pending and expired requests and the held and ambiguous effects, and queues the events
due. What one run (one watcher) sends, it never sends twice:

* ``approval.expired``: a request that reads ``expired`` with no decision on it, whose time ran
  out at or after ``since`` (default: when the watcher started). One that expired while no
  watcher ran is shown by the console but not notified.
* ``approval.escalated``: a pending request older than ``escalate_after`` (its action's, else
  the policy's), once per request; also one that was overdue when the watcher started (it is
  still waiting for a person). A new watcher (a restarted console) escalates it again.
* ``effect.ambiguous``: a ``reserved`` or ``executing`` effect whose lease lapsed at or after
  ``since``, and an ``ambiguous`` effect that a contender marked so after ``since`` because the
  lease lapsed (its error is the core's lapse note), once per key and attempt. An effect a
  body's outcome made ambiguous was notified by the process that ran it (``hooks``), and is not
  notified again here."""

from __future__ import annotations

import logging
import threading
from datetime import datetime, timezone
from typing import Optional, Set, Tuple

from ctrlrun.notify.events import Event, approval_event, effect_event
from ctrlrun.notify.hooks import emit
from ctrlrun.policy import Policy, current_policy
from ctrlrun.store.api import Store
from ctrlrun.store.records import EffectRecord

__all__ = ["Watcher", "start_watcher", "LAPSE_NOTE"]

log = logging.getLogger("ctrlrun.notify")

#: How the core's note on an effect made ambiguous by a lapsed lease begins.
LAPSE_NOTE = "the lease of action "
#: How long ``stop()`` waits for the thread at most (a tick in progress finishes first).
STOP_WAIT = 10.0


class Watcher:
    """The thread of :func:`start_watcher`; :meth:`tick` is one pass (tests call it)."""

    def __init__(
        self,
        store: Store,
        console_url: Optional[str] = None,
        interval: float = 5.0,
        since: Optional[datetime] = None,
    ) -> None:
        if not interval > 0:
            raise ValueError(f"interval must be more than 0 seconds, got {interval!r}")
        self.store = store
        self.console_url = console_url.rstrip("/") if console_url else None
        self.interval = float(interval)
        self.since = since or self._now()
        self._sent: Set[Tuple[str, str]] = set()
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._policy_problem: Optional[str] = None

    def _now(self) -> datetime:
        clock = self.store.clock
        return clock() if clock is not None else datetime.now(timezone.utc)

    def start(self) -> Watcher:
        self._thread = threading.Thread(
            target=self._run, name="ctrlrun-notify-watcher", daemon=True
        )
        self._thread.start()
        return self

    def stop(self, timeout: float = STOP_WAIT) -> None:
        """End the thread; waits up to ``timeout`` seconds for it."""
        self._stop.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.tick()
            except Exception as exc:  # a store that is down: try again next time
                log.warning("ctrlrun: the notification watcher's pass failed: %s", exc)
            self._stop.wait(self.interval)

    def _policy(self) -> Optional[Policy]:
        try:
            policy = current_policy()
        except Exception as exc:
            problem = str(exc)
            if problem != self._policy_problem:
                self._policy_problem = problem
                log.error("ctrlrun: the notification watcher cannot read the policy: %s", exc)
            return None
        self._policy_problem = None
        return policy if policy is not None and policy.notifies else None

    def _send(self, policy: Policy, once: Tuple[str, str], event: Event) -> int:
        if once in self._sent:
            return 0
        self._sent.add(once)
        emit(policy, event, self.console_url)
        return 1

    def tick(self) -> int:
        """One pass: queue the events due now; how many events were due."""
        policy = self._policy()
        if policy is None:
            return 0
        now = self._now()
        sent = 0
        for record in self.store.list_approvals("expired"):
            if record.decided_at is None and record.expires_at >= self.since:
                event = approval_event("approval.expired", record, record.expires_at)
                sent += self._send(policy, ("expired", record.request_id), event)
        for record in self.store.list_approvals("pending"):
            after = policy.escalation(record.action)
            if after is not None and now - record.requested_at >= after:
                event = approval_event("approval.escalated", record, now)
                sent += self._send(policy, ("escalated", record.request_id), event)
        for state in ("reserved", "executing"):
            for effect in self.store.list_effects(state):
                lapsed = effect.lease_expires_at
                if lapsed is not None and self.since <= lapsed < now:
                    sent += self._lapsed(policy, effect, lapsed)
        for effect in self.store.list_effects("ambiguous"):
            if (effect.error or "").startswith(LAPSE_NOTE) and effect.updated_at >= self.since:
                sent += self._lapsed(policy, effect, effect.updated_at)
        return sent

    def _lapsed(self, policy: Policy, effect: EffectRecord, at: datetime) -> int:
        event = effect_event(effect.action, effect.effect_key, at, request_id=effect.approval_id)
        return self._send(policy, ("lapsed", f"{effect.attempt}:{effect.effect_key}"), event)


def start_watcher(
    store: Store,
    *,
    console_url: Optional[str] = None,
    interval: float = 5.0,
    since: Optional[datetime] = None,
) -> Watcher:
    """Start the watcher thread over ``store`` (a daemon; ``.stop()`` ends it). ``console_url``
    makes the links (else the policy's ``console_url``); ``since`` (default: now) is the
    earliest expiry or lapse it tells of."""
    return Watcher(store, console_url, interval, since).start()
