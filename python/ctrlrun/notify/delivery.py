"""Delivery: one daemon thread per process posts the notifications queued for it, so no
protected call, store write or page ever waits on a webhook.

The queue is bounded (:data:`QUEUE_SIZE`): when it is full a notification is dropped and
logged. Each attempt has a short timeout (:data:`TIMEOUT`); a connection error, a timeout, a
5xx, a 408 or a 429 is retried after each of :data:`PAUSES`; redirects are not followed. Every
failure is logged on the logger ``ctrlrun.notify`` with the URL cut to ``scheme://host`` (a
Slack webhook URL is a secret) and never a body, a secret or an argument value. A forked child
starts its own thread for its own notifications. At interpreter exit what is queued gets up to
``CTRLRUN_NOTIFY_EXIT_FLUSH`` seconds (default 2; 0: none) to go out."""

from __future__ import annotations

import atexit
import http.client
import logging
import os
import socket
import ssl
import threading
import time
import urllib.parse
import uuid
from collections import deque
from dataclasses import dataclass
from typing import Callable, Deque, Dict, Optional, Set, Tuple

from ctrlrun.notify.bodies import render
from ctrlrun.notify.events import Event
from ctrlrun.notify.signing import DELIVERY_HEADER, signed_headers
from ctrlrun.policy.notify import NotifyTarget, env_value, redact, secret_problem, url_problem

__all__ = ["Delivery", "Dispatcher", "submit", "flush", "QUEUE_SIZE", "TIMEOUT", "PAUSES"]

log = logging.getLogger("ctrlrun.notify")

#: Notifications queued at most; more are dropped (and logged).
QUEUE_SIZE = 256
#: Seconds one attempt may take (connecting, sending, reading the answer).
TIMEOUT = 5.0
#: The pauses before the retries of a failed attempt (so at most four attempts).
PAUSES: Tuple[float, ...] = (0.5, 2.0, 5.0)
#: The longest ``Retry-After`` of a 429 that is honoured.
MAX_RETRY_AFTER = 30.0
_RETRIED = (408, 429)
USER_AGENT = "ctrlrun-notify"


@dataclass(frozen=True)
class Delivery:
    """One notification for one target: the event and the console URL of its link."""

    target: NotifyTarget
    event: Event
    console_url: Optional[str]


def _connection(url: str, timeout: float) -> Tuple[http.client.HTTPConnection, str]:
    """A connection to the webhook's host (TLS verified for https) and the request target.
    No redirect is ever followed: one could send the body somewhere the policy never named."""
    parts = urllib.parse.urlsplit(url)
    host, port = parts.hostname or "", parts.port
    conn: http.client.HTTPConnection
    if parts.scheme == "https":
        conn = http.client.HTTPSConnection(
            host, port, timeout=timeout, context=ssl.create_default_context()
        )
    else:
        conn = http.client.HTTPConnection(host, port, timeout=timeout)
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return conn, target


def _cut(conn: http.client.HTTPConnection, fired: threading.Event) -> None:
    """The attempt's deadline passed: shut its socket, which ends a read that a receiver
    trickling bytes keeps alive (each byte restarts the socket's own timeout). What was read
    by then counts for nothing (``fired``): a cut answer can parse as a whole one."""
    fired.set()
    sock = conn.sock
    if sock is not None:
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


class _Failed(Exception):
    """An attempt that failed: why (no URL in it), whether a retry may help, and a pause a
    429 asked for."""

    def __init__(self, why: str, retry: bool, after: Optional[float] = None) -> None:
        super().__init__(why)
        self.retry = retry
        self.after = after


class Dispatcher:
    """A bounded queue and the daemon thread that empties it (started on first use)."""

    def __init__(
        self,
        size: int = QUEUE_SIZE,
        timeout: float = TIMEOUT,
        pauses: Tuple[float, ...] = PAUSES,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.size = size
        self.timeout = timeout
        self.pauses = pauses
        self.sleep = sleep
        self._items: Deque[Delivery] = deque()
        self._cond = threading.Condition()
        self._busy = 0  # queued or being sent
        self._thread: Optional[threading.Thread] = None
        self._warned: Set[Tuple[str, str]] = set()

    def submit(self, item: Delivery) -> bool:
        """Queue ``item``; ``False`` (logged) when the queue is full. Never blocks on I/O."""
        with self._cond:
            if len(self._items) >= self.size:
                dropped = True
            else:
                dropped = False
                self._items.append(item)
                self._busy += 1
                if self._thread is None:
                    self._thread = threading.Thread(
                        target=self._run, name="ctrlrun-notify", daemon=True
                    )
                    self._thread.start()
                self._cond.notify_all()
        if dropped:
            log.warning(
                "ctrlrun: notification %s of %s dropped: %d are queued already (%s)",
                item.event.event,
                _ident(item.event),
                self.size,
                item.target.where,
            )
        return not dropped

    def flush(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for what is queued to be sent (or given up on);
        whether nothing is left."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._busy:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)
        return True

    @property
    def pending(self) -> int:
        with self._cond:
            return self._busy

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._items:
                    self._cond.wait()
                item = self._items.popleft()
            try:
                self.deliver(item)
            except Exception as exc:  # never let the thread die
                log.error(
                    "ctrlrun: notification %s failed: %s", item.event.event, type(exc).__name__
                )
            finally:
                with self._cond:
                    self._busy -= 1
                    self._cond.notify_all()

    def _once(self, target: NotifyTarget, problem: str) -> None:
        """Log a target's configuration problem once per process."""
        with self._cond:
            if (target.where, problem) in self._warned:
                return
            self._warned.add((target.where, problem))
        log.error("ctrlrun: notifications to %s are not sent: %s", target.where, problem)

    def _where_to(self, target: NotifyTarget) -> Optional[Tuple[str, Dict[str, str]]]:
        """The URL and the secret-free headers, or ``None`` (logged once) when the
        environment no longer gives a usable URL or secret."""
        url = target.url
        if target.url_env is not None:
            value = env_value(target.url_env)
            if value is None:
                self._once(target, f"the environment variable {target.url_env} is no longer set")
                return None
            url = value.strip()
            problem = url_problem(url, f"the URL in {target.url_env}")
            if problem is not None:
                self._once(target, problem)
                return None
        assert url is not None
        return url, {"Content-Type": "application/json", "User-Agent": USER_AGENT}

    def deliver(self, item: Delivery) -> bool:
        """Send ``item`` now (on the calling thread), retrying; whether it was accepted."""
        target, event = item.target, item.event
        where = self._where_to(target)
        if where is None:
            return False
        url, headers = where
        body = render(target.format, event, item.console_url)
        headers["X-Ctrlrun-Event"] = event.event
        delivery = uuid.uuid4().hex  # one id for the notification: every retry keeps it
        headers[DELIVERY_HEADER] = delivery
        shown = redact(url)
        attempts = len(self.pauses) + 1
        for attempt in range(1, attempts + 1):
            if target.secret_env is not None:
                problem = secret_problem(target.secret_env)
                if problem is not None:
                    self._once(target, problem)
                    return False
                secret = env_value(target.secret_env) or ""
                # A fresh timestamp per attempt, signed with the delivery id.
                headers.update(signed_headers(secret, delivery, body))
            try:
                self._post(url, body, headers)
                return True
            except _Failed as failed:
                if not failed.retry or attempt == attempts:
                    log.warning(
                        "ctrlrun: notification %s of %s to %s failed (attempt %d of %d, %s): %s",
                        event.event,
                        _ident(event),
                        shown,
                        attempt,
                        attempts,
                        target.where,
                        failed,
                    )
                    return False
                pause = self.pauses[attempt - 1]
                self.sleep(pause if failed.after is None else max(pause, failed.after))
        return False  # pragma: no cover - the loop returns

    def _post(self, url: str, body: bytes, headers: Dict[str, str]) -> None:
        """One attempt, bounded as a whole: the socket's timeout bounds each wait, and a timer
        shuts the socket at twice that, however the receiver paces its bytes."""
        try:
            conn, target = _connection(url, self.timeout)
        except (ValueError, http.client.HTTPException) as exc:
            raise _Failed(f"no answer ({type(exc).__name__})", False) from None
        fired = threading.Event()
        watchdog = threading.Timer(2 * self.timeout, _cut, (conn, fired))
        watchdog.daemon = True
        watchdog.start()
        try:
            conn.request("POST", target, body=body, headers=headers)
            answer = conn.getresponse()
            answer.read(65536)
            code, retry_after = answer.status, answer.getheader("Retry-After")
        except (OSError, http.client.HTTPException, ValueError) as exc:
            if fired.is_set():
                raise _Failed("no whole answer within the attempt's deadline", True) from None
            why = f"{type(exc).__name__}: {_scrubbed(str(exc), url)}"
            raise _Failed(f"no answer ({why})", True) from None
        finally:
            watchdog.cancel()
            conn.close()
        if fired.is_set():
            raise _Failed("no whole answer within the attempt's deadline", True)
        if code >= 300:
            after = _retry_after(retry_after) if code == 429 else None
            retry = code >= 500 or code in _RETRIED
            kind = "a redirect (not followed)" if 300 <= code < 400 else f"HTTP {code}"
            raise _Failed(f"the webhook answered {kind}", retry, after)


def _retry_after(value: Optional[str]) -> Optional[float]:
    try:
        return min(MAX_RETRY_AFTER, max(0.0, float(value))) if value else None
    except ValueError:
        return None


def _scrubbed(text: str, url: str) -> str:
    """``text`` with the URL (and its path) cut to ``scheme://host``."""
    text = text.replace(url, redact(url))
    path = url.split("://", 1)[-1].partition("/")[2]
    return text.replace(path, "…") if path else text


def _ident(event: Event) -> str:
    """How a log names the event's subject: the request id, or the action (never the key,
    which a template makes from argument values)."""
    if event.request_id is not None:
        return f"approval request {event.request_id}"
    return f"action {event.action!r}"


_dispatcher = Dispatcher()


def dispatcher() -> Dispatcher:
    """This process's dispatcher."""
    return _dispatcher


def submit(item: Delivery) -> bool:
    """Queue ``item`` on this process's dispatcher."""
    return _dispatcher.submit(item)


def flush(timeout: float = 5.0) -> bool:
    """Wait up to ``timeout`` seconds for this process's queued notifications to go out
    (or be given up on); whether none is left."""
    return _dispatcher.flush(timeout)


def _exit_flush_seconds() -> float:
    try:
        return max(0.0, min(60.0, float(os.environ.get("CTRLRUN_NOTIFY_EXIT_FLUSH", "2"))))
    except ValueError:
        return 2.0


def _at_exit() -> None:
    seconds = _exit_flush_seconds()
    if seconds and _dispatcher.pending and not _dispatcher.flush(seconds):
        log.warning(
            "ctrlrun: %d notification(s) were not sent before the process exited",
            _dispatcher.pending,
        )


def _after_fork_in_child() -> None:
    # The parent's thread does not exist here and its lock may have been held: start afresh
    # (what the parent queued is the parent's to send).
    global _dispatcher
    _dispatcher = Dispatcher()


atexit.register(_at_exit)
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
